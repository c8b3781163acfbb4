package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestBackfillCommand_RefusesAndRuns: backfill refuses, with exit 2 and a
// hint and before writing anything, a --stream that can name a live
// stream (the default one or the --live-stream given), the dead-letter
// stream, a bad --rate and a bad --since; then it backfills, --json
// reporting what it appended, and a second run appends nothing.
func TestBackfillCommand_RefusesAndRuns(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	rec := relaytest.NewProduced()
	for i := range 5 {
		insertEvent(t, env.DB, rec, "o-1", i)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream", "outbox:{aggregate_type}"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "outbox:order"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--live-stream", "rebuild:{event_type}"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "outbox:dead-letter", "--live-stream", "live:{aggregate_type}"}, "dead-letter stream"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--rate", "-1"}, "--rate -1 is not valid"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--since", "yesterday"}, "not an RFC 3339 time"},
		{[]string{}, "give --stream"},
	} {
		_, stderr, code := run(t, append(append(global, "backfill"), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "hint:") {
			t.Errorf("backfill %v: exit %d, stderr %q; want exit %d, %q and a hint", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if keys := env.RDB.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("refused backfills wrote %v", keys)
	}
	for i, want := range []int{5, 0} {
		out, stderr, code := run(t, append(global, "backfill", "--stream", "rebuild:{aggregate_type}", "--since", "2000-01-01T00:00:00Z", "--json")...)
		var r admin.BackfillReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("run %d: exit %d, %v\n%s%s", i+1, code, err, out, stderr)
		}
		if r.Appended != want || r.LastID != 5 {
			t.Errorf("run %d: %+v, want %d appended, last id 5", i+1, r, want)
		}
	}
	if n := env.RDB.XLen(ctx, "rebuild:order").Val(); n != 5 {
		t.Errorf("rebuild:order has %d entries, want 5", n)
	}
	if n := env.RDB.Exists(ctx, "outbox:order", posKey(env)).Val(); n != 0 {
		t.Errorf("the backfill wrote the live stream or the position (%d keys)", n)
	}
	out, _, code := run(t, append(global, "backfill", "--stream", "rebuild2:{aggregate_type}")...)
	if code != 0 || !strings.Contains(out, "appended 5, last id 5 of 5") || !strings.Contains(out, "5 entries appended this run") {
		t.Errorf("backfill without --json: exit %d, output %q, want progress and a report line", code, out)
	}
}

// TestBackfillCommand_KilledExactlyOnce: backfill processes killed with
// SIGKILL at random moments, each run again with the same command line
// until one finishes: every row is once in the backfill's stream. The first
// is killed once it has appended some rows, so that at least one resume
// starts half way, however loaded the machine.
func TestBackfillCommand_KilledExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	const rows = 600
	if _, err := env.DB.Exec(`INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at)
		SELECT CONCAT('k-', seq), 'order', CONCAT('o-', seq % 7), 'order.changed', '{}', UTC_TIMESTAMP(6) FROM seq_1_to_600`); err != nil {
		t.Fatal(err)
	}
	args := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--log-format", "json",
		"backfill", "--stream", "rebuild:{aggregate_type}", "--rate", "1000"}
	kills, halfway := 0, 0 // halfway: kills that left some rows appended, some not
	for attempt := 0; ; attempt++ {
		if attempt > 100 {
			t.Fatalf("backfill never finished: %d entries", env.RDB.XLen(ctx, "rebuild:order").Val())
		}
		p := relaytest.StartProcess(t, binary(t), args...)
		if attempt == 0 {
			relaytest.WaitFor(t, 60*time.Second, "the first backfill to append rows", func() bool {
				return env.RDB.XLen(ctx, "rebuild:order").Val() > 0
			})
			p.Signal(t, syscall.SIGKILL)
			kills++
			if n := env.RDB.XLen(ctx, "rebuild:order").Val(); n >= rows {
				t.Fatalf("the first backfill appended all %d rows before it was killed: raise the rows or lower --rate", n)
			}
		}
		select {
		case <-p.Done():
		// The window grows with each attempt, so that a loaded machine,
		// where a backfill takes longer than the first windows to start,
		// still sees one finish.
		case <-time.After(time.Duration(50+rand.IntN(300)+10*attempt) * time.Millisecond):
			// It may have finished as the time ran out: then it was not
			// killed, and its exit code says how it ended.
			if err := p.Cmd.Process.Signal(syscall.SIGKILL); err == nil {
				kills++
			} else if !errors.Is(err, os.ErrProcessDone) {
				t.Fatal(err)
			}
		}
		if n := env.RDB.XLen(ctx, "rebuild:order").Val(); n > 0 && n < rows {
			halfway++
		}
		if code := p.Wait(t, 30*time.Second); code == 0 {
			break
		}
	}
	got := messageIDs(t, env.RDB, "rebuild:order")
	for i := 1; i <= rows; i++ {
		if id := fmt.Sprintf("k-%d", i); got[id] != 1 {
			t.Errorf("%s is %d times in rebuild:order, want once", id, got[id])
		}
	}
	if len(got) != rows {
		t.Errorf("rebuild:order holds %d message ids, want %d", len(got), rows)
	}
	if kills == 0 {
		t.Errorf("no backfill was killed: the test proves nothing about resuming")
	}
	t.Logf("%d backfills killed before one finished, %d of them half way", kills, halfway)
}
