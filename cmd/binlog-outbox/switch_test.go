package main

import (
	"context"
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

// insertEvent is relaytest.InsertEvent.
func insertEvent(t testing.TB, ex relaytest.Execer, rec *relaytest.Produced, agg string, seq int) string {
	t.Helper()
	return relaytest.InsertEvent(t, ex, rec, agg, seq)
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
// unsent and poll mode appended it again. Now a switch that mark-appended
// did not prepare is refused, by check and by run; mark-appended marks
// exactly the rows whose events are in the streams.
func TestRun_SwitchBinlogToPollOutOfIDOrder(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	t.Run("NewestEntryRuleRefused", func(t *testing.T) {
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
		refusesSwitch(t, env, "poll", "mark-appended")
		binlog.Signal(t, syscall.SIGTERM)
		binlog.Wait(t, 15*time.Second)
		refusesSwitch(t, env, "poll", "mark-appended")
		if n := countMessage(t, env, b); n != 1 {
			t.Errorf("B is in the stream %d times, want 1", n)
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

// refusesSwitch runs check --mode to and run --mode to on env's table, which
// ran in the other mode and whose switch was not prepared: both must refuse
// it with the same words, naming the step (step) and docs/switching-modes.md,
// and the stored mode must stay.
func refusesSwitch(t *testing.T, env *relaytest.Env, to, step string) {
	t.Helper()
	ctx := context.Background()
	modeKey := "binlog-outbox:mode:" + env.Database + "." + env.Table
	before := env.RDB.Get(ctx, modeKey).Val()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "check", "--mode", to)...)
	const said = "the switch was not prepared"
	if code == 0 || !strings.Contains(out, "FAIL  mode switch") || !strings.Contains(out, said) || !strings.Contains(out, step) {
		t.Errorf("check --mode %s: exit %d, want a failed mode switch line naming %q\n%s%s", to, code, step, out, errOut)
	}
	runOut, runCode := runProcess(t, append(global, "run", "--mode", to)...)
	if runCode == 0 || !strings.Contains(runOut, said) || !strings.Contains(runOut, step) || !strings.Contains(runOut, "docs/switching-modes.md") {
		t.Errorf("run --mode %s: exit %d, want a refusal naming %q and the procedure\n%s", to, runCode, step, runOut)
	}
	if got := env.RDB.Get(ctx, modeKey).Val(); got != before {
		t.Errorf("stored mode %q after the refusal, want %q kept", got, before)
	}
}

// countMessage counts the entries of env's stream outbox:order with message
// id mid.
func countMessage(t *testing.T, env *relaytest.Env, mid string) int {
	t.Helper()
	n := 0
	for _, e := range relaytest.ReadAll(context.Background(), t, env.RDB, "outbox:") {
		if e.Values["message_id"] == mid {
			n++
		}
	}
	return n
}

// TestRun_SwitchPollToBinlogUnprepared: after poll mode relayed a table,
// --mode binlog without `position set` would start at now and skip the
// rows not yet polled; check and run refuse it, and after `position set`
// (the procedure's first step) run switches.
func TestRun_SwitchPollToBinlogUnprepared(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	poll := startRelay(t, env, "--mode", "poll")
	waitPolling(t, poll)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, poll)
	refusesSwitch(t, env, "binlog", "position set --start-from now")

	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "position", "set", "--start-from", "now")...); code != 0 || !strings.Contains(out, "switch to binlog mode is prepared") {
		t.Fatalf("position set: exit %d, want the switch prepared\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, append(global, "check", "--mode", "binlog")...); code != 0 {
		t.Fatalf("check --mode binlog after position set: exit %d\n%s%s", code, out, errOut)
	}
	binlog := startRelay(t, env, "--mode", "binlog")
	waitLog(t, binlog, "reading binlog")
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, binlog)
	if got := env.RDB.Get(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table).Val(); got != "binlog" {
		t.Errorf("stored mode %q after the prepared switch, want binlog", got)
	}
	if n := env.RDB.Exists(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table+":prepared").Val(); n != 0 {
		t.Errorf("the prepared switch is still recorded after it was made")
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRun_SwitchBinlogToPollStopMarkStart follows the first procedure of
// docs/switching-modes.md under a continuous load: stop the binlog relay,
// mark-appended, start the pollers, without a dedupe window.
func TestRun_SwitchBinlogToPollStopMarkStart(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
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
	// Its database, Redis database and server id are its own.
	t.Parallel()
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
