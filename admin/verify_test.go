package admin

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// verifyOptions verifies env's table against the default streams, as the
// command does by default.
func verifyOptions(t *testing.T, env *relaytest.Env) VerifyOptions {
	return VerifyOptions{DB: env.DB, Table: table(t, env), Redis: env.RDB, Keys: keys(env), Streams: streams(t),
		Chunk: DefaultVerifyChunk, Page: DefaultVerifyPage, Wait: DefaultVerifyWait}
}

// verify runs Verify, which must not fail.
func verify(t *testing.T, o VerifyOptions) VerifyReport {
	t.Helper()
	r, err := Verify(context.Background(), o)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return r
}

func field(e relaytest.Entry, name string) string {
	s, _ := e.Values[name].(string)
	return s
}

func TestVerify_FindsMissingDuplicatedForeign(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	o := verifyOptions(t, env)
	if r := verify(t, o); !r.Clean() || r.Missing != 0 || r.Matched != len(rec.Committed) || r.Matched != r.Rows || r.Mode != mode.Binlog {
		t.Fatalf("verify after relaying: %+v, want clean with every row matched", r)
	}

	// One entry lost, one appended twice, one naming no row.
	entries := relaytest.ReadAll(ctx, t, env.RDB, "outbox:")
	if len(entries) < 3 {
		t.Fatalf("%d entries, want at least 3", len(entries))
	}
	lost, twice := entries[0], entries[1]
	if err := env.RDB.XDel(ctx, lost.Stream, lost.ID).Err(); err != nil {
		t.Fatal(err)
	}
	xadd(t, env.RDB, twice.Stream, twice.Values)
	phantom := map[string]any{}
	for k, v := range twice.Values {
		phantom[k] = v
	}
	phantom["outbox_id"], phantom["message_id"] = "9999999", "phantom-message"
	xadd(t, env.RDB, "outbox:dead-letter", phantom)

	r := verify(t, o)
	if r.Clean() || r.Missing != 1 || r.Duplicated != 1 || r.Foreign != 1 || r.Mode != mode.Binlog || !r.CaughtUp {
		t.Errorf("verify: %+v; want one of each, binlog mode, caught up", r)
	}
	lostID := field(lost, "outbox_id")
	if len(r.Examples.Missing) != 1 || strconv.FormatUint(r.Examples.Missing[0].OutboxID, 10) != lostID || r.Examples.Missing[0].MessageID != field(lost, "message_id") ||
		len(r.Examples.Duplicated) != 1 || strconv.FormatUint(r.Examples.Duplicated[0].OutboxID, 10) != field(twice, "outbox_id") || len(r.Examples.Duplicated[0].Entries) != 2 ||
		len(r.Examples.Foreign) != 1 || r.Examples.Foreign[0].MessageID != "phantom-message" || r.Examples.Foreign[0].OutboxID != 9999999 {
		t.Errorf("verify examples: %+v", r.Examples)
	}

	// Rows committed after the stored position are not missing: the relay
	// is stopped, so the position never passes them.
	stop()
	relaytest.InsertEvent(t, env.DB, rec, "late", 1)
	from, _ := strconv.ParseUint(lostID, 10, 64)
	o.Wait, o.Range = 100*time.Millisecond, VerifyRange{FromID: from}
	r = verify(t, o)
	if r.Missing != 0 || r.NotYetRelayed == 0 || r.CaughtUp || len(r.Warnings) == 0 {
		t.Errorf("verify with the relay stopped: %+v; want the rows without entry as not yet relayed, with a warning", r)
	}
	if n := env.RDB.Keys(ctx, "binlog-outbox:verify:*").Val(); len(n) != 0 {
		t.Errorf("verify left its index behind: %v", n)
	}
}

func TestVerify_PollModePendingRows(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	rec := relaytest.NewProduced()
	for i := 0; i < 3; i++ {
		relaytest.InsertEvent(t, env.DB, rec, "a", i)
	}
	env.RDB.Set(context.Background(), keys(env).Mode, "poll", 0)
	o := verifyOptions(t, env)
	o.Range = VerifyRange{Since: time.Now().Add(-time.Hour).UTC()}
	if r := verify(t, o); !r.Clean() || r.Mode != mode.Poll || r.Pending != 3 || r.Missing != 0 || r.Rows != 3 {
		t.Errorf("verify of unsent rows in poll mode: %+v; want clean and 3 pending", r)
	}
}

// TestVerify_WalksLargeTable relays 20,000 rows and verifies them with
// small chunks and pages, so that every boundary is crossed many times.
func TestVerify_WalksLargeTable(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	const n = 20000
	startRelay(t, env, mode.Binlog)
	if _, err := env.DB.ExecContext(ctx, `INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at)
		SELECT CONCAT('big-', seq), IF(seq % 2, 'order', 'invoice'), CONCAT('agg-', seq % 97), 'x.changed', '{}', '{}', UTC_TIMESTAMP(6) FROM seq_1_to_20000`); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 60*time.Second, "20000 entries", func() bool { return relaytest.CountEntries(ctx, env.RDB, "outbox:") == n })
	// The relay goes on running: the tests beside this one write the
	// shared server's binlog, which a stopped relay's position never
	// passes.
	o := verifyOptions(t, env)
	o.Chunk, o.Page = 700, 300
	start := time.Now()
	r := verify(t, o)
	t.Logf("verify of %d rows in %s", n, time.Since(start).Round(time.Millisecond))
	if !r.Clean() || r.Rows != n || r.Matched != n || r.Entries != n || r.Streams != 2 {
		t.Fatalf("verify: %+v; want %d rows matched in 2 streams", r, n)
	}
	// One entry of a middle chunk lost.
	var lost redis.XMessage
	for _, m := range env.RDB.XRangeN(ctx, "outbox:order", "-", "+", 5000).Val() {
		lost = m
	}
	env.RDB.XDel(ctx, "outbox:order", lost.ID)
	r = verify(t, o)
	if r.Missing != 1 || r.Matched != n-1 || len(r.Examples.Missing) != 1 ||
		strconv.FormatUint(r.Examples.Missing[0].OutboxID, 10) != lost.Values["outbox_id"].(string) {
		t.Fatalf("verify after XDEL of %v: %+v; want that row missing", lost.Values["outbox_id"], r)
	}
}

// TestVerify_SinceOnTimestampColumn: --since on a TIMESTAMP time column, in a
// session time zone that is not UTC, is the same instant there, as cleanup's
// cutoff is: compared with the instant's UTC wall time, the window shifted by
// the session's five hours and took in a row seven hours old.
func TestVerify_SinceOnTimestampColumn(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	if _, err := env.DB.Exec(`CREATE TABLE events (
		event_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
		message_id CHAR(26) NOT NULL, aggregate_type VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL,
		event_type VARCHAR(255) NOT NULL, payload JSON NOT NULL, headers JSON NULL,
		created_at TIMESTAMP(6) NOT NULL, sent_at DATETIME(6) NULL, KEY (sent_at, event_id))`); err != nil {
		t.Fatal(err)
	}
	for i, age := range []string{"3", "7"} {
		if _, err := env.DB.Exec("INSERT INTO events (message_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES (?, 'order', 'a', 'x', '{}', NOW(6) - INTERVAL "+age+" HOUR)",
			fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	zoned := *env
	zoned.Table, zoned.DB = "events", zonedDB(t, env)
	var err error
	if zoned.Mapping, err = schema.ParseMapping([]string{"id=event_id", "occurred_at=created_at"}); err != nil {
		t.Fatal(err)
	}
	env.RDB.Set(ctx, keys(&zoned).Mode, "poll", 0)
	o := verifyOptions(t, &zoned)
	o.Range = VerifyRange{Since: time.Now().Add(-5 * time.Hour).UTC()}
	if r := verify(t, o); r.Rows != 1 || r.Pending != 1 {
		t.Errorf("verify --since 5h of rows 3 and 7 hours old: %+v; want the one 3 hours old", r)
	}
}
