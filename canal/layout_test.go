package canal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/relaytest"
	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// swapColumns moves aggregate_id in front of aggregate_type: the same column
// count and type classes, so only the names tell the two layouts apart.
const swapColumns = "MODIFY aggregate_id VARCHAR(255) NOT NULL AFTER message_id"

// namelessEnv is an outbox on a server whose row events carry no column
// names (MariaDB's default binlog_row_metadata=NO_LOG, like MySQL's MINIMAL).
func namelessEnv(t *testing.T) *relaytest.Env {
	t.Helper()
	return relaytest.NewEnv(t, namelessServer(t), testsvc.SharedRedis(t))
}

func namelessServer(t *testing.T) *testsvc.MariaDB {
	t.Helper()
	return testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-row-metadata=NO_LOG"}})
}

func alterOutbox(t *testing.T, env *relaytest.Env, spec string) {
	t.Helper()
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox "+spec)
}

func TestReader_NamelessRowsAcrossAlterWhileRunning(t *testing.T) {
	env := namelessEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	r, _ := newReader(t, env, nil)
	stop := startReader(r)
	waitStarted(t, r)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	alterOutbox(t, env, swapColumns)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A restart resumes after the ALTER with the new layout.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, rec)
	r2, _ := newReader(t, env, nil)
	stop = startReader(r2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// Rows written while the relay is stopped, before an ALTER it cannot see past:
// their layout is unknown, so the relay stops with the range and the recovery
// instead of mapping them with the table as it is now. The recovery (a
// position after the ALTER) then resumes correctly.
func TestReader_NamelessRowsBeforeAlterWhileStopped(t *testing.T) {
	srv := namelessServer(t)
	for _, gtid := range []bool{false, true} {
		t.Run(fmt.Sprintf("gtid=%v", gtid), func(t *testing.T) {
			env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
			ctx := context.Background()
			var tweak func(*Config)
			if gtid {
				start, err := position.ParseStart(gtidPos(t, env))
				if err != nil {
					t.Fatal(err)
				}
				tweak = func(c *Config) { c.Start = start }
			}
			relayed := relaytest.NewProduced()
			r, _ := newReader(t, env, tweak)
			stop := startReader(r)
			waitStarted(t, r)
			relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, relayed)
			relaytest.WaitDelivered(t, env, relayed, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			skipped := relaytest.NewProduced()
			relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, skipped)
			alterOutbox(t, env, swapColumns)
			file, pos := binlogPos(t, env)
			resume := fmt.Sprintf("%s:%d", file, pos)
			if gtid {
				resume = gtidPos(t, env)
			}
			relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, relayed)

			r2, sink := newReader(t, env, nil)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := r2.Run(rctx)
			if !errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("Run over rows before an ALTER returned %v, want ErrConfig", err)
			}
			hint := outbox.HintOf(err)
			for _, want := range []string{"binlog_row_metadata=FULL", "position set --start-from " + resume + "`", "mysqlbinlog", "--mode poll"} {
				if !strings.Contains(hint, want) {
					t.Errorf("hint %q does not mention %q", hint, want)
				}
			}
			if !strings.Contains(err.Error(), "ALTER TABLE") {
				t.Errorf("error %q does not name the DDL", err)
			}

			// The recovery: resume after the ALTER (the skipped rows go
			// through poll mode, not tested here).
			start, err := position.ParseStart(resume)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := r2.StartPosition(ctx, start)
			if err != nil {
				t.Fatal(err)
			}
			if err := sink.SetPosition(ctx, raw); err != nil {
				t.Fatal(err)
			}
			r3, _ := newReader(t, env, nil)
			stop = startReader(r3)
			relaytest.WaitDelivered(t, env, relayed, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// Every entry has the right fields, none of the skipped rows
			// appears (Check reports unknown ids).
			relaytest.Check(ctx, t, env.RDB, relayed, relaytest.CheckOptions{ExactlyOnce: true})
		})
	}
}

func binlogPos(t *testing.T, env *relaytest.Env) (string, uint32) {
	t.Helper()
	var file string
	var pos uint32
	var discard []any
	rows, err := env.DB.Query("SHOW BINLOG STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	discard = make([]any, len(cols))
	discard[0], discard[1] = &file, &pos
	for i := 2; i < len(cols); i++ {
		discard[i] = new(any)
	}
	if !rows.Next() {
		t.Fatal("SHOW BINLOG STATUS: no row")
	}
	if err := rows.Scan(discard...); err != nil {
		t.Fatal(err)
	}
	return file, pos
}

func gtidPos(t *testing.T, env *relaytest.Env) string {
	t.Helper()
	var gtid string
	if err := env.DB.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	return gtid
}
