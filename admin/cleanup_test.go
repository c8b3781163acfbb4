package admin

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// cleanupOptions deletes env's rows older than seven days, as the command
// does by default.
func cleanupOptions(t *testing.T, env *relaytest.Env) CleanupOptions {
	return CleanupOptions{DB: env.DB, Table: table(t, env), Redis: env.RDB, Keys: keys(env),
		OlderThan: 7 * 24 * time.Hour, Batch: 500, Wait: time.Minute, Logger: testLogger(t)}
}

// zonedDB opens env's database in a session time zone of +05:00.
func zonedDB(t *testing.T, env *relaytest.Env) *sql.DB {
	t.Helper()
	dsn := env.MariaDB.DSN(env.Database)
	dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "time_zone=%27%2B05%3A00%27"
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func countRows(t *testing.T, env *relaytest.Env, table, where string) int {
	t.Helper()
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE " + where).Scan(&n); err != nil {
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
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)

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
	relaytest.InsertOldEvents(t, env.DB, rec, "old", n)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 150, Pause: 5 * time.Millisecond}, rec)
	}()
	var logs relaytest.Logs
	o := cleanupOptions(t, env)
	o.Batch, o.Logger = 7, logs.Logger()
	r, err := Cleanup(ctx, o)
	t.Logf("cleanup: %+v", r)
	if err != nil || r.Mode != mode.Binlog || r.Deleted != n || r.Candidates != n || r.Batches != 429 {
		t.Errorf("cleanup: %+v, %v; want %d rows deleted in 429 batches (4 rounds of 100, then 29)", r, err, n)
	}
	var progress bool
	for _, l := range logs.Lines("INFO") {
		if l["msg"] == "cleanup progress" && l["rows_per_second"] != nil && l["component"] == "cleanup" {
			progress = true
		}
	}
	if !progress {
		t.Errorf("cleanup logged no progress line:\n%s", logs.String())
	}
	wg.Wait()
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, env, "outbox", oldRows); got != 1 {
		t.Errorf("%d old rows left, want 1 (the one committed after cleanup read the table)", got)
	}
	if got := countRows(t, env, "outbox", "message_id = 'late-old-row'"); got != 1 {
		t.Error("cleanup deleted the row committed after it read the table")
	}
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	// The rows still in the table and the entries of the last day, as
	// docs/cleanup.md suggests after a cleanup.
	vo := verifyOptions(t, env)
	vo.Range = VerifyRange{Since: time.Now().Add(-24 * time.Hour).UTC()}
	if v := verify(t, vo); !v.Clean() || v.Matched == 0 {
		t.Errorf("verify after cleanup: %+v, want clean", v)
	}
	stop()
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestCleanup_BinlogModeRelayStopped: rows the relay has not read stay, and
// so do the relayed rows read with them; once the relay caught up they go.
func TestCleanup_BinlogModeRelayStopped(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.InsertOldEvents(t, env.DB, rec, "relayed", 10)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relaytest.InsertOldEvents(t, env.DB, rec, "unread", 10)
	relaytest.InsertEvent(t, env.DB, rec, "new", 1)

	o := cleanupOptions(t, env)
	o.Wait = time.Second
	_, err := Cleanup(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "the relay is behind or stopped") || !strings.HasPrefix(outbox.HintOf(err), "see `binlog-outbox status`") {
		t.Errorf("cleanup with the relay stopped: %v, want the reason and the hint", err)
	}
	if got := countRows(t, env, "outbox", oldRows); got != 20 {
		t.Errorf("cleanup with the relay stopped left %d old rows, want all 20", got)
	}

	startRelay(t, env, mode.Binlog)
	o = cleanupOptions(t, env)
	o.DryRun = true
	if r, err := Cleanup(ctx, o); err != nil || !r.DryRun || r.Candidates != 20 || r.Deleted != 0 || countRows(t, env, "outbox", oldRows) != 20 {
		t.Errorf("cleanup --dry-run: %+v, %v; want 20 candidates and nothing deleted", r, err)
	}
	o.DryRun = false
	if r, err := Cleanup(ctx, o); err != nil || r.Mode != mode.Binlog || r.Deleted != 20 || r.Batches != 1 {
		t.Errorf("cleanup after the relay caught up: %+v, %v; want 20 deleted in 1 batch", r, err)
	}
	if got, all := countRows(t, env, "outbox", oldRows), countRows(t, env, "outbox", "1"); got != 0 || all != 1 {
		t.Errorf("after cleanup: %d old rows and %d in all, want 0 and the new one", got, all)
	}
}

// TestCleanup_PollModeKeepsUnsent: the poll relay marks the old rows sent;
// cleanup deletes those and keeps the old rows not yet sent.
func TestCleanup_PollModeKeepsUnsent(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Poll)
	relaytest.InsertOldEvents(t, env.DB, rec, "sent", 25)
	relaytest.InsertEvent(t, env.DB, rec, "new", 1)
	relaytest.WaitFor(t, 30*time.Second, "the poller to mark every row sent", func() bool { return countRows(t, env, "outbox", "sent_at IS NULL") == 0 })
	stop()
	relaytest.InsertOldEvents(t, env.DB, rec, "unsent", 4)

	o := cleanupOptions(t, env)
	o.Batch = 10
	r, err := Cleanup(context.Background(), o)
	if err != nil || r.Mode != mode.Poll || r.Deleted != 25 || r.Batches != 3 || r.KeptUnsent != 4 {
		t.Errorf("cleanup in poll mode: %+v, %v; want 25 deleted in 3 batches and 4 unsent kept", r, err)
	}
	if unsent, all := countRows(t, env, "outbox", "sent_at IS NULL AND "+oldRows), countRows(t, env, "outbox", "1"); unsent != 4 || all != 5 {
		t.Errorf("after cleanup: %d old unsent rows, %d in all; want 4 and 5", unsent, all)
	}
}

// TestCleanup_MappedColumns runs on a table with renamed columns and a
// TIMESTAMP time column, in a session time zone that is not UTC: the
// cutoff is the same instant there. A table without sent_at has nothing to
// clean in poll mode, and one no relay ran for is refused.
func TestCleanup_MappedColumns(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
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
	poll := func(table string) {
		env.RDB.Set(ctx, keys(&relaytest.Env{Database: env.Database, Table: table}).Mode, "poll", 0)
	}
	poll("events")
	zoned := *env
	zoned.Table, zoned.DB = "events", zonedDB(t, env)
	var err error
	if zoned.Mapping, err = schema.ParseMapping([]string{"id=event_id", "occurred_at=created_at", "sent_at=relayed_at"}); err != nil {
		t.Fatal(err)
	}
	r, err := Cleanup(ctx, cleanupOptions(t, &zoned))
	var left []string
	rows, qerr := env.DB.Query("SELECT message_id FROM events ORDER BY event_id")
	if qerr != nil {
		t.Fatal(qerr)
	}
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		left = append(left, m)
	}
	rows.Close()
	if err != nil || r.Deleted != 1 || r.KeptUnsent != 1 || strings.Join(left, ",") != "m1,m2" {
		t.Errorf("cleanup of the mapped table: %+v, %v, rows left %v; want m0 deleted, the younger m1 and the unsent m2 kept", r, err, left)
	}

	m, err := schema.ParseMapping([]string{"sent_at=-"})
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Apply(ctx, env.DB, "noSent", m); err != nil {
		t.Fatal(err)
	}
	poll("noSent")
	noSent := *env
	noSent.Table, noSent.Mapping = "noSent", m
	if r, err := Cleanup(ctx, cleanupOptions(t, &noSent)); err != nil || !strings.Contains(r.Note, "nothing to clean: the table has no sent_at column") {
		t.Errorf("cleanup of a poll-mode table without sent_at: %+v, %v", r, err)
	}

	if _, err := Cleanup(ctx, cleanupOptions(t, env)); err == nil || !strings.Contains(err.Error(), "no relay recorded a mode") || outbox.HintOf(err) == "" {
		t.Errorf("cleanup of a table no relay ran for: %v, want why and a hint", err)
	}
}
