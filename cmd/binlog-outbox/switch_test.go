package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// insertEvent inserts one outbox row shaped as relaytest.Produce writes them
// and records it as committed (the caller commits).
func insertEvent(t testing.TB, ex interface {
	Exec(string, ...any) (sql.Result, error)
}, rec *relaytest.Produced, agg string, seq int) string {
	t.Helper()
	id := relaytest.MessageID()
	payload, _ := json.Marshal(map[string]any{"seq": seq, "agg": agg, "text": "héllo \"quoted\" 🙂"})
	if _, err := ex.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6))",
		id, agg, string(payload)); err != nil {
		t.Fatal(err)
	}
	rec.Committed[id] = relaytest.Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: seq}
	return id
}

// appendedOutOfIDOrder has the binlog relay append two rows in commit order,
// which is not their id order: transaction A takes id 1, B takes id 2 and
// commits first, then A commits. The stream holds B, then A. It returns the
// running binlog relay and B's message id.
func appendedOutOfIDOrder(t *testing.T, env *relaytest.Env, rec *relaytest.Produced) (*relayProc, string) {
	t.Helper()
	ctx := context.Background()
	binlog := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	txA, err := env.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	insertEvent(t, txA, rec, "a", 1)
	b := insertEvent(t, env.DB, rec, "b", 1)
	relaytest.WaitFor(t, 30*time.Second, "the binlog relay to append B", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:") == 1
	})
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the binlog relay to append A", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:") == 2
	})
	var ids []string
	for _, e := range relaytest.ReadAll(ctx, t, env.RDB, "outbox:") {
		ids = append(ids, fmt.Sprint(e.Values["outbox_id"]))
	}
	if strings.Join(ids, ",") != "2,1" {
		t.Fatalf("stream holds outbox ids %v, want [2 1] (commit order)", ids)
	}
	return binlog, b
}

// finishInPollMode lets the poll relay relay a little more load, stops it
// and returns how often the stream holds message id mid.
func finishInPollMode(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, poll *relayProc, mid string) int {
	t.Helper()
	ctx := context.Background()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitFor(t, 30*time.Second, "poll mode to relay every row", func() bool {
		return countUnsentRows(env) == 0 && relaytest.CountEntries(ctx, env.RDB, "outbox:") >= len(rec.Committed)
	})
	time.Sleep(200 * time.Millisecond)
	poll.Signal(t, syscall.SIGTERM)
	if code := poll.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("poll relay exit code %d", code)
	}
	n := 0
	for _, e := range relaytest.ReadAll(ctx, t, env.RDB, "outbox:") {
		if e.Values["message_id"] == mid {
			n++
		}
	}
	return n
}

// TestRun_SwitchBinlogToPollOutOfIDOrder hands a table from binlog mode to
// poll mode after commits out of id order. The old procedure marked the rows
// up to the largest outbox_id among the newest entry of each stream: here
// A's id 1, so B (id 2), appended before the dedupe window was on, stayed
// unsent and poll mode appended it again. mark-appended marks exactly the
// rows whose events are in the streams.
func TestRun_SwitchBinlogToPollOutOfIDOrder(t *testing.T) {
	t.Run("NewestEntryRuleAppendsAgain", func(t *testing.T) {
		env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
		ctx := context.Background()
		rec := relaytest.NewProduced()
		binlog, b := appendedOutOfIDOrder(t, env, rec)
		// The old procedure: window on, then X from the newest entries.
		binlog.Signal(t, syscall.SIGTERM)
		binlog.Wait(t, 15*time.Second)
		binlog = startRelay(t, env, "--mode", "binlog", "--dedupe-window", "1h")
		newest := env.RDB.XRevRangeN(ctx, "outbox:order", "+", "-", 1).Val()
		x, _ := strconv.ParseUint(fmt.Sprint(newest[0].Values["outbox_id"]), 10, 64)
		if _, err := env.DB.Exec("UPDATE outbox SET sent_at = NOW(6) WHERE sent_at IS NULL AND id <= ?", x); err != nil {
			t.Fatal(err)
		}
		poll := startRelay(t, env, "--mode", "poll", "--dedupe-window", "1h")
		waitPolling(t, poll)
		time.Sleep(300 * time.Millisecond)
		binlog.Signal(t, syscall.SIGTERM)
		binlog.Wait(t, 15*time.Second)
		if n := finishInPollMode(t, env, rec, poll, b); n != 2 {
			t.Errorf("with X = %d from the newest entry, B is in the stream %d times; the old rule appended it twice before", x, n)
		}
	})
	t.Run("MarkAppended", func(t *testing.T) {
		env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
		ctx := context.Background()
		rec := relaytest.NewProduced()
		binlog, b := appendedOutOfIDOrder(t, env, rec)
		// Stop, mark, start: no window needed.
		binlog.Signal(t, syscall.SIGTERM)
		if code := binlog.Wait(t, 15*time.Second); code != 0 {
			t.Fatalf("binlog relay exit code %d", code)
		}
		global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
		out, errOut, code := run(t, append(global, "mark-appended")...)
		if code != 0 || !strings.Contains(out, "2 rows marked sent") {
			t.Fatalf("mark-appended: exit %d, want 0 and 2 rows marked\n%s%s", code, out, errOut)
		}
		poll := startRelay(t, env, "--mode", "poll")
		waitPolling(t, poll)
		if n := finishInPollMode(t, env, rec, poll, b); n != 1 {
			t.Errorf("B is in the stream %d times, want 1", n)
		}
		relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	})
}

// TestRun_SwitchBinlogToPollStopMarkStart follows the first procedure of
// docs/switching-modes.md under a continuous load: stop the binlog relay,
// mark-appended, start the pollers, without a dedupe window.
func TestRun_SwitchBinlogToPollStopMarkStart(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	binlog := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	pctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(pctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 3, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	time.Sleep(700 * time.Millisecond)
	binlog.Signal(t, syscall.SIGTERM)
	if code := binlog.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("binlog relay exit code %d", code)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "mark-appended")...); code != 0 {
		t.Fatalf("mark-appended: exit %d\n%s%s", code, out, errOut)
	}
	poll := startRelay(t, env, "--mode", "poll")
	time.Sleep(700 * time.Millisecond)
	stopLoad()
	wg.Wait()
	relaytest.WaitFor(t, 60*time.Second, "delivery", func() bool {
		return countUnsentRows(env) == 0 && relaytest.CountEntries(ctx, env.RDB, "outbox:") >= len(rec.Committed)
	})
	time.Sleep(200 * time.Millisecond)
	poll.Signal(t, syscall.SIGTERM)
	poll.Wait(t, 15*time.Second)
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}

// TestMarkAppended_TrimmedStreamsAndForeignEntries: an entry whose message_id
// is not its row's (another table sharing the stream) marks nothing, and a
// stream that lost entries stops the command unless --allow-trimmed.
func TestMarkAppended_TrimmedStreamsAndForeignEntries(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	mine := insertEvent(t, env.DB, rec, "a", 1)
	insertEvent(t, env.DB, rec, "a", 2)
	add := func(outboxID, messageID string) string {
		return env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"message_id", messageID, "outbox_id", outboxID}}).Val()
	}
	add("1", mine)
	add("2", "someone-elses")
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "mark-appended")...)
	if code != 0 || !strings.Contains(out, "1 rows marked sent") || !strings.Contains(out, "1 entries name no unsent row") {
		t.Fatalf("mark-appended: exit %d, want 0, 1 row marked and 1 foreign entry\n%s%s", code, out, errOut)
	}
	if n := countUnsentRows(env); n != 1 {
		t.Errorf("%d rows unsent, want 1 (row 2: its entry carries another message_id)", n)
	}
	env.RDB.XDel(ctx, "outbox:order", add("2", "x"))
	out, errOut, code = run(t, append(global, "mark-appended")...)
	if code == 0 || !strings.Contains(errOut, "lost 1 of the 3 entries") || !strings.Contains(errOut, "--allow-trimmed") {
		t.Fatalf("mark-appended on a trimmed stream: exit %d, want a failure that names the loss and the flag\n%s%s", code, out, errOut)
	}
	if _, errOut, code = run(t, append(global, "mark-appended", "--allow-trimmed")...); code != 0 || !strings.Contains(errOut, "warning") {
		t.Fatalf("mark-appended --allow-trimmed: exit %d, want 0 with a warning\n%s", code, errOut)
	}
}

// TestMarkAppended_DeadLetterWithInvalidJSON: MariaDB checks a JSON column's
// json_valid CHECK again on the UPDATE that marks a row, so a dead letter
// whose payload a producer wrote with the checks off could not be marked.
func TestMarkAppended_DeadLetterWithInvalidJSON(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	// MySQL's JSON type cannot hold such a payload at all.
	srv.RequirePrivate(t, "a MariaDB JSON column whose CHECK a session can skip")
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION check_constraint_checks = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-json', 'raw', 'r', 'raw.changed', '{\"n\":')"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:dead-letter", Values: []string{"message_id", "bad-json", "outbox_id", "1", "reason", "payload is not valid JSON"}})
	out, errOut, code := run(t, "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "mark-appended")
	if code != 0 || !strings.Contains(out, "1 rows marked sent") {
		t.Fatalf("mark-appended: exit %d, want the dead letter's row marked\n%s%s", code, out, errOut)
	}
	if n := countUnsentRows(env); n != 0 {
		t.Errorf("%d rows unsent, want 0", n)
	}
}
