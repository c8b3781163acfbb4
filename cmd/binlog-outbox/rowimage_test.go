package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRun_RowImageWithoutColumnsStops follows issue 41's reproduction:
// binlog_row_image=MINIMAL is set while the relay runs, and an application
// that never sets headers leaves the column out of its INSERT. The relay
// stops at that row, naming the setting and repair, instead of appending a
// dead letter of empty fields; with the setting back to FULL, repair
// --apply appends the rows the binlog lacks and run goes on: every event
// once, no dead letter.
func TestRun_RowImageWithoutColumnsStops(t *testing.T) {
	// Its MariaDB is its own: the test changes a global setting.
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	relaytest.InsertEvent(t, env.DB, rec, "a", 1)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)

	m.Exec(t, "SET GLOBAL binlog_row_image = 'MINIMAL'")
	// A new connection: sessions take the global value when they open.
	minimal := m.Open(t, env.Database)
	var mids []string
	for seq := 2; seq <= 3; seq++ {
		mid := relaytest.MessageID()
		if _, err := minimal.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', 'a', 'order.changed', ?)",
			mid, fmt.Sprintf(`{"seq":%d}`, seq)); err != nil {
			t.Fatal(err)
		}
		mids = append(mids, mid)
	}
	code := p.Wait(t, 60*time.Second)
	out := p.Out.String()
	if code == 0 || !strings.Contains(out, "binlog_row_image=MINIMAL or NOBLOB") || !strings.Contains(out, "has no value for") {
		t.Fatalf("relay exit %d, want a stop at the row without all its columns:\n%s", code, relaytest.TailLines(out, 20))
	}
	hint := hintLine(out)
	for _, want := range []string{"binlog_row_image=FULL", "repair --apply"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not say %q", hint, want)
		}
	}
	if n := env.RDB.XLen(ctx, "outbox:dead-letter").Val(); n != 0 {
		t.Errorf("%d dead letters, want none: %v", n, env.RDB.XRange(ctx, "outbox:dead-letter", "-", "+").Val())
	}
	// The fix, as the hint gives it. The setting alone is not enough: a
	// restart stops at the same row, as the position stayed before it.
	m.Exec(t, "SET GLOBAL binlog_row_image = 'FULL'")
	p = startRelay(t, env, "--mode", "binlog")
	if code := p.Wait(t, 60*time.Second); code == 0 || !strings.Contains(p.Out.String(), "binlog_row_image=MINIMAL or NOBLOB") {
		t.Fatalf("restarted relay: exit %d, want the same stop:\n%s", code, relaytest.TailLines(p.Out.String(), 20))
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "repair", "--apply")...); code != 0 || !strings.Contains(out, "appended 2 entries") {
		t.Fatalf("repair --apply: exit %d, want 0 and the 2 rows appended\n%s%s", code, out, errOut)
	}
	p = startRelay(t, env, "--mode", "binlog")
	relaytest.InsertEvent(t, env.DB, rec, "a", 4)
	relaytest.WaitFor(t, 30*time.Second, "the event after the repair", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:") == len(rec.Committed)+len(mids)
	})
	stopRelay(t, p)
	// The rows without headers carry an empty headers field, as a NULL
	// column gives (Check wants one): they are counted here.
	entries := relaytest.ReadAll(ctx, t, env.RDB, "outbox:")
	skip := map[string]bool{}
	for _, mid := range mids {
		skip[mid] = true
		n := 0
		for _, e := range entries {
			if field(e, "message_id") == mid {
				n++
			}
		}
		if n != 1 {
			t.Errorf("event %s appended %d times, want once", mid, n)
		}
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true, Skip: skip})
}

// hintLine returns the text of out's last "hint: " line, or "".
func hintLine(out string) string {
	hint := ""
	for _, l := range strings.Split(out, "\n") {
		if h, ok := strings.CutPrefix(l, "hint: "); ok {
			hint = h
		}
	}
	return hint
}

// TestRun_StatementLoggedRowsRepair follows issue 41's reproduction: a
// producer's session logs its INSERT as a statement, which the relay cannot
// read. Its error's hint names `repair --apply` (re-inserting the row, the
// old advice, is refused by the unique message_id), and that step appends
// the row once.
func TestRun_StatementLoggedRowsRepair(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	// One connection, whose session logs statements.
	stmt := env.MariaDB.Open(t, env.Database)
	stmt.SetMaxOpenConns(1)
	if _, err := stmt.Exec("SET SESSION binlog_format = 'STATEMENT'"); err != nil {
		t.Fatal(err)
	}
	relaytest.InsertEvent(t, stmt, rec, "a", 1)
	if !p.Said("logged as a statement", 30*time.Second) {
		t.Fatalf("no word of the statement-logged INSERT:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	if out := p.Out.String(); !strings.Contains(out, "repair --apply") || strings.Contains(out, "re-insert the lost events") {
		t.Errorf("the relay's hint does not name repair --apply:\n%s", relaytest.TailLines(out, 10))
	}
	stopRelay(t, p)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "repair", "--apply")...); code != 0 || !strings.Contains(out, "appended 1 entries") {
		t.Fatalf("repair --apply: exit %d, want 0 and the row appended\n%s%s", code, out, errOut)
	}
	p = startRelay(t, env, "--mode", "binlog")
	relaytest.InsertEvent(t, env.DB, rec, "a", 2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
