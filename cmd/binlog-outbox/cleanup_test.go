package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestParseAge(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"7d", 7 * 24 * time.Hour, true},
		{"36h", 36 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"2w", 14 * 24 * time.Hour, true},
		{"1w2d3h", 9*24*time.Hour + 3*time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{" 7d ", 7 * 24 * time.Hour, true},
		{"", 0, false},
		{"0d", 0, false},
		{"0s", 0, false},
		{"-7d", 0, false},
		{"7", 0, false},
		{"d", 0, false},
		{"7days", 0, false},
		{"1d-1h", 0, false},
		{"999999d", 0, false},
		{"2562047h", 0, false},
	}
	for _, tt := range tests {
		got, err := parseAge(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseAge(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"7d", "1w2d3h", "36h", "1d-1h", "99999w999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseAge(s)
		if err == nil && (d <= 0 || d > (maxAgeDays*2)*24*time.Hour) {
			t.Errorf("parseAge(%q) = %v, want a positive age of at most two centuries", s, d)
		}
		if err != nil && d != 0 {
			t.Errorf("parseAge(%q) = %v with error %v", s, d, err)
		}
	})
}

// cleanupJSON runs cleanup --json and decodes what it printed on success.
func cleanupJSON(t *testing.T, global []string, args ...string) (r cleanupResult, stderr string, code int) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "cleanup", "--json"), args...)...)
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("cleanup --json: output does not parse: %v\n%s%s", err, out, errOut)
		}
	}
	return r, errOut, code
}

// insertOldEvents commits n events of aggregate agg whose occurred_at is
// eight days ago, 500 rows per INSERT, and records them.
func insertOldEvents(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, agg string, n int) {
	t.Helper()
	for done := 0; done < n; {
		k := min(500, n-done)
		var b strings.Builder
		args := make([]any, 0, 3*k)
		b.WriteString("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for i := 0; i < k; i++ {
			done++
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("(?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6) - INTERVAL 8 DAY)")
			id := relaytest.MessageID()
			payload, _ := json.Marshal(map[string]any{"seq": done, "agg": agg, "text": "héllo \"quoted\" 🙂"})
			args = append(args, id, agg, string(payload))
			rec.Committed[id] = relaytest.Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: done}
		}
		if _, err := env.DB.Exec(b.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
}

func countRows(t *testing.T, env *relaytest.Env, where string) int {
	t.Helper()
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const oldRows = "occurred_at < UTC_TIMESTAMP(6) - INTERVAL 7 DAY"

// TestCleanup_BinlogModeUnderLoad deletes 3,000 old rows, 7 per DELETE in
// rounds of 700, while producers commit and the binlog relay runs. A row
// whose transaction took its id first but commits after cleanup read the
// table stays: deleting id ranges would have waited on its lock and then
// deleted it. verify still finds the table clean and every event is in the
// streams exactly once.
func TestCleanup_BinlogModeUnderLoad(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	relay := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}

	late, err := env.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback()
	if _, err := late.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ('late-old-row', 'order', 'late', 'order.changed', ?, '{}', UTC_TIMESTAMP(6) - INTERVAL 8 DAY)",
		`{"seq":1,"text":"héllo \"quoted\" 🙂"}`); err != nil {
		t.Fatal(err)
	}
	rec.Committed["late-old-row"] = relaytest.Sent{AggregateType: "order", AggregateID: "late", EventType: "order.changed", Seq: 1}
	const n = 3000
	insertOldEvents(t, env, rec, "old", n)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 150, Pause: 5 * time.Millisecond}, rec)
	}()
	r, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--batch", "7")
	t.Logf("cleanup: %+v\n%s", r, relaytest.TailLines(errOut, 5))
	if code != 0 || r.Mode != "binlog" || r.Deleted != n || r.Candidates != n || r.Batches != 429 {
		t.Errorf("cleanup: exit %d, %+v; want exit 0 and %d rows deleted in 429 batches (4 rounds of 100, then 29)\n%s", code, r, n, errOut)
	}
	if !strings.Contains(errOut, "cleanup progress") || !strings.Contains(errOut, "rows_per_second") {
		t.Errorf("cleanup logged no progress line:\n%s", errOut)
	}
	wg.Wait()
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, env, oldRows); got != 1 {
		t.Errorf("%d old rows left, want 1 (the one committed after cleanup read the table)", got)
	}
	if got := countRows(t, env, "message_id = 'late-old-row'"); got != 1 {
		t.Error("cleanup deleted the row committed after it read the table")
	}
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	// The rows still in the table and the entries of the last day, as
	// docs/operations.md suggests after a cleanup.
	out, errOut, code := run(t, append(global, "verify", "--since", "24h")...)
	if code != 0 || !strings.Contains(out, "clean") || strings.Contains(out, "matched:         0") {
		t.Errorf("verify after cleanup: exit %d, want 0 and clean\n%s%s", code, out, errOut)
	}
	stopRelay(t, relay)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestCleanup_BinlogModeRelayStopped: rows the relay has not read stay, and
// so do the relayed rows read with them; once the relay caught up they go.
func TestCleanup_BinlogModeRelayStopped(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	relay := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	insertOldEvents(t, env, rec, "relayed", 10)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, relay)
	insertOldEvents(t, env, rec, "unread", 10)
	insertEvent(t, env.DB, rec, "new", 1)

	_, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--wait", "1s")
	if code != exitFailure || !strings.Contains(errOut, "the relay is behind or stopped") || !strings.Contains(errOut, "hint: see `binlog-outbox status`") {
		t.Errorf("cleanup with the relay stopped: exit %d, want 1 with the reason and the hint\n%s", code, errOut)
	}
	if got := countRows(t, env, oldRows); got != 20 {
		t.Errorf("cleanup with the relay stopped left %d old rows, want all 20", got)
	}

	relay = startRelay(t, env, "--mode", "binlog")
	defer stopRelay(t, relay)
	r, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--dry-run")
	if code != 0 || !r.DryRun || r.Candidates != 20 || r.Deleted != 0 || countRows(t, env, oldRows) != 20 {
		t.Errorf("cleanup --dry-run: exit %d, %+v; want 20 candidates and nothing deleted\n%s", code, r, errOut)
	}
	out, errOut, code := run(t, append(global, "cleanup", "--older-than", "7d")...)
	if code != 0 || !strings.Contains(out, "(binlog mode)") || !strings.Contains(out, "deleted 20 in 1 batches") {
		t.Errorf("cleanup after the relay caught up: exit %d, want 20 deleted\n%s%s", code, out, errOut)
	}
	if got, all := countRows(t, env, oldRows), countRows(t, env, "1"); got != 0 || all != 1 {
		t.Errorf("after cleanup: %d old rows and %d in all, want 0 and the new one", got, all)
	}
}

// TestCleanup_PollModeKeepsUnsent: the poll relay marks the old rows sent;
// cleanup deletes those and keeps the old rows not yet sent.
func TestCleanup_PollModeKeepsUnsent(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	relay := startRelay(t, env, "--mode", "poll")
	insertOldEvents(t, env, rec, "sent", 25)
	insertEvent(t, env.DB, rec, "new", 1)
	relaytest.WaitFor(t, 30*time.Second, "the poller to mark every row sent", func() bool { return countRows(t, env, "sent_at IS NULL") == 0 })
	stopRelay(t, relay)
	insertOldEvents(t, env, rec, "unsent", 4)

	r, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--batch", "10")
	if code != 0 || r.Mode != "poll" || r.Deleted != 25 || r.Batches != 3 || r.KeptUnsent != 4 {
		t.Errorf("cleanup in poll mode: exit %d, %+v; want 25 deleted in 3 batches and 4 unsent kept\n%s", code, r, errOut)
	}
	if unsent, all := countRows(t, env, "sent_at IS NULL AND "+oldRows), countRows(t, env, "1"); unsent != 4 || all != 5 {
		t.Errorf("after cleanup: %d old unsent rows, %d in all; want 4 and 5", unsent, all)
	}
}

// TestCleanup_MappedColumns runs on a table with renamed columns and a
// TIMESTAMP time column, in a session time zone that is not UTC: the
// cutoff is the same instant there. A table without sent_at has nothing to
// clean in poll mode, and one without the time column is an error.
func TestCleanup_MappedColumns(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	if _, err := env.DB.Exec(`CREATE TABLE events (
		event_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
		message_id CHAR(26) NOT NULL, aggregate_type VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL,
		event_type VARCHAR(255) NOT NULL, payload JSON NOT NULL, headers JSON NULL,
		created_at TIMESTAMP(6) NOT NULL, relayed_at DATETIME(6) NULL, KEY (relayed_at, event_id))`); err != nil {
		t.Fatal(err)
	}
	// Three hours either side of the cutoff: a cutoff shifted by the
	// session's five hours would keep the first or delete the second.
	for i, age := range []string{"7 3:00", "6 21:00", "7 3:00"} {
		sent := "NOW(6)"
		if i == 2 {
			sent = "NULL"
		}
		if _, err := env.DB.Exec("INSERT INTO events (message_id, aggregate_type, aggregate_id, event_type, payload, created_at, relayed_at) VALUES (?, 'order', 'a', 'x', '{}', NOW(6) - INTERVAL '"+age+"' DAY_MINUTE, "+sent+")",
			fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	redisMode := func(table string) {
		env.RDB.Set(context.Background(), "binlog-outbox:mode:"+env.Database+"."+table, "poll", 0)
	}
	redisMode("events")
	dsn := srv.DSN(env.Database)
	dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "time_zone=%27%2B05%3A00%27"
	mapped := []string{"--mysql-dsn", dsn, "--redis-url", env.RedisURL, "--table", "events",
		"--column", "id=event_id", "--column", "occurred_at=created_at", "--column", "sent_at=relayed_at"}
	r, errOut, code := cleanupJSON(t, mapped, "--older-than", "7d")
	var left []string
	rows, err := env.DB.Query("SELECT message_id FROM events ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		left = append(left, m)
	}
	rows.Close()
	if code != 0 || r.Deleted != 1 || r.KeptUnsent != 1 || strings.Join(left, ",") != "m1,m2" {
		t.Errorf("cleanup of the mapped table: exit %d, %+v, rows left %v; want m0 deleted, the younger m1 and the unsent m2 kept\n%s", code, r, left, errOut)
	}

	noSent := "noSent"
	m, err := schema.ParseMapping([]string{"sent_at=-"})
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Apply(context.Background(), env.DB, noSent, m); err != nil {
		t.Fatal(err)
	}
	redisMode(noSent)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "--table", noSent, "--column", "sent_at=-", "cleanup", "--older-than", "7d")...)
	if code != 0 || !strings.Contains(out, "nothing to clean: the table has no sent_at column") {
		t.Errorf("cleanup of a poll-mode table without sent_at: exit %d\n%s%s", code, out, errOut)
	}

	noTime := []string{"--mysql-dsn", dsn, "--redis-url", env.RedisURL, "--table", "events", "--column", "id=event_id", "--column", "sent_at=relayed_at"}
	out, errOut, code = run(t, append(noTime, "cleanup", "--older-than", "7d")...)
	if code != exitUsage || !strings.Contains(errOut, "occurred_at") || !strings.Contains(errOut, "--column occurred_at=<name>") {
		t.Errorf("cleanup of a table without occurred_at: exit %d, want 2 and how to map it\n%s%s", code, out, errOut)
	}

	_, errOut, code = cleanupJSON(t, append(global, "--table", "outbox"), "--older-than", "7d")
	if code != exitFailure || !strings.Contains(errOut, "no relay recorded a mode") {
		t.Errorf("cleanup of a table no relay ran for: exit %d, want 1 and why\n%s", code, errOut)
	}
	for _, args := range [][]string{{}, {"--older-than", "7"}, {"--older-than", "7d", "--batch", "0"}} {
		_, errOut, code := run(t, append(append(global, "cleanup"), args...)...)
		if code != exitUsage {
			t.Errorf("cleanup %v: exit %d, want 2\n%s", args, code, errOut)
		}
	}
}
