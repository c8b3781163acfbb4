package canal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
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
	_, _, stop := startedReader(t, env, nil)
	produceDelivered(ctx, t, env, rec, 10)
	alterOutbox(t, env, swapColumns)
	produceDelivered(ctx, t, env, rec, 10)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A restart resumes after the ALTER with the new layout.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, rec)
	resumeChecked(ctx, t, env, rec)
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
			// MariaDB has GTIDs: the default first start stores a GTID
			// position too, so either way the hint resumes by GTID.
			resume := gtidPos(t, env)
			relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 5}, relayed)

			r2, sink := newReader(t, env, nil)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := r2.Run(rctx)
			if !errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("Run over rows before an ALTER returned %v, want ErrConfig", err)
			}
			hint := outbox.HintOf(err)
			for _, want := range []string{"binlog_row_metadata=FULL", "position set --start-from " + resume + "`", "repair --apply"} {
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

func binlogPos(t testing.TB, env *relaytest.Env) (string, uint32) {
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

// A DDL on the outbox table ends the positional layout, cache included: the
// next table map without names has the same count and types, and must not
// reuse the layout from before the DDL.
func TestMachine_DDLForgetsPositionalLayout(t *testing.T) {
	tm := binlogtest.OutboxTableMap(false)
	row := func(id int64) []any { return binlogtest.OutboxRow(id, "{}") }
	h := newHarness(t, nil)
	err := h.feed(
		ev(100, mariaGTID(10)), ev(150, tm), ev(300, insert(t, tm, row(1))), ev(331, xid(nil)),
		ev(380, mariaDDLGTID(11)), ev(450, query("ALTER TABLE outbox MODIFY aggregate_id VARCHAR(255) NOT NULL AFTER message_id")),
		ev(500, mariaGTID(12)), ev(550, tm), ev(600, insert(t, tm, row(2))),
	)
	var restart *errLayoutRestart
	if !errors.As(err, &restart) {
		t.Fatalf("row after the DDL: got %v, want errLayoutRestart", err)
	}
	if restart.start.Pos != 450 {
		t.Errorf("restart at %d, want 450 (right after the DDL)", restart.start.Pos)
	}
	if got := ids(h.m.pending.events); len(got) != 1 || got[0] != 1 {
		t.Errorf("pending events %v, want [1]: the row before the DDL", got)
	}
	if h.m.pending.at.Pos != 450 {
		t.Errorf("pending position %d, want 450", h.m.pending.at.Pos)
	}

	// Another table's DDL changes nothing.
	h = newHarness(t, nil)
	if err := h.feed(
		ev(380, mariaDDLGTID(11)), ev(450, query("ALTER TABLE outbox_archive ADD x INT")),
		ev(500, mariaGTID(12)), ev(550, tm), ev(600, insert(t, tm, row(2))), ev(631, xid(nil)),
	); err != nil {
		t.Fatalf("row after another table's DDL: %v", err)
	}
}

// A row without names before the DDL the proof found ahead stops the reader
// with the range and the recovery.
func TestMachine_NamelessRowBeforeDDLAhead(t *testing.T) {
	tm := binlogtest.OutboxTableMap(false)
	h := newHarness(t, func(m *machine) {
		f := m.tables.only()
		f.dec.Forget()
		f.ddlAhead = &ddlEvent{db: "app", table: "outbox", file: testFile, start: 900, end: 1000, query: "ALTER TABLE outbox DROP COLUMN headers"}
	})
	err := h.feed(ev(100, mariaGTID(10)), ev(150, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "{}"))))
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("got %v, want ErrConfig", err)
	}
	for _, want := range []string{testFile + ":4", "ALTER TABLE outbox DROP COLUMN headers", testFile + ":900"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if hint := outbox.HintOf(err); !strings.Contains(hint, "--start-from "+testFile+":1000") {
		t.Errorf("hint %q does not give the position after the DDL", hint)
	}
	if len(h.m.pending.events) != 0 {
		t.Errorf("%d events pending, want none", len(h.m.pending.events))
	}
}

// Rows without column names carry the schema_version and extra columns by
// the proven layout, as rows with names do, INT UNSIGNED values above 2^31
// included: MariaDB's table map then has no signedness either.
func TestReader_NamelessRowsCarryColumns(t *testing.T) {
	relaytest.CarriedColumns(t, namelessEnv(t), func(t *testing.T, env *relaytest.Env) func() error {
		_, _, stop := startedReader(t, env, nil)
		return stop
	})
}

// TestReader_NamelessRowsConvertCharsets checks that rows without column
// names, whose table map carries no character sets on MariaDB, convert
// their latin1 text to UTF-8 by the proven layout's character sets, as rows
// with names do by their collations.
func TestReader_NamelessRowsConvertCharsets(t *testing.T) {
	relaytest.TextCharsets(t, namelessEnv(t), func(t *testing.T, env *relaytest.Env) func() error {
		_, _, stop := startedReader(t, env, nil)
		return stop
	})
}
