package examples_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// TestOutboxConsumer runs examples/php/lib's OutboxConsumer through
// lib/tests/worker.php against the suite's MariaDB and Redis, with entries
// written as the relay writes them: a redelivery after a crash between
// COMMIT and XACK is deduplicated, a Redis client that prefixes keys is
// refused, poison entries are dead-lettered after
// max deliveries with their effects rolled back, and SIGTERM stops a worker
// after the entry in progress, handing the rest back to the group.
func TestOutboxConsumer(t *testing.T) {
	php := requirePHP(t)
	e := exampletest.NewEnv(t)
	if _, err := e.DB.Exec(`CREATE TABLE consumer_effects (message_id VARCHAR(64) NOT NULL, consumer VARCHAR(255) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	w := &testWorker{php: newPHP(t, php, e), rdb: e.Redis.Client(t, e.RedisURL), e: e, script: repo(t, "examples", "php", "lib", "tests", "worker.php")}

	t.Run("crash between COMMIT and XACK", func(t *testing.T) {
		ids := w.add(t, "outbox:crash", "test.effect", "test.effect", "test.effect", "test.effect", "test.effect")
		out, err := w.php.command(w.args("outbox:crash", "crasher", "--crash-after-commit", ids[2])...).CombinedOutput()
		if ws, ok := exitStatus(err); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("worker with --crash-after-commit: %v, want it killed by SIGKILL\n%s", err, out)
		}
		if got := w.effects(t); len(got) != 3 {
			t.Fatalf("effects after the crash: %v, want the first 3", got)
		}
		st := parseStats(t, w.php.run(w.args("outbox:crash", "survivor")...))
		if st["claimed"] != 3 || st["duplicates"] != 1 || st["processed"] != 2 || st["failed"] != 0 {
			t.Errorf("survivor: %v, want the 3 pending entries claimed, 1 duplicate (committed before the crash), 2 processed", st)
		}
		w.checkOnce(t, ids)
		w.checkNothingPending(t, "outbox:crash")
	})

	t.Run("a prefixing Redis client refused", func(t *testing.T) {
		out, err := w.php.command(w.args("outbox:prefixed", "prefixed", "--redis-prefix", "laravel_database_")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "would read laravel_database_outbox:prefixed") {
			t.Errorf("worker with a key prefix: %v, want it refused with the key it would read:\n%s", err, out)
		}
	})

	t.Run("poison entries dead-lettered", func(t *testing.T) {
		ids := w.add(t, "outbox:poison", "test.effect", "test.poison", "test.bad-json", "test.effect")
		st := parseStats(t, w.php.run(w.args("outbox:poison", "poisoned", "--max-deliveries", "3", "--dead-letter-stream", "outbox:poison-dead")...))
		if st["processed"] != 2 || st["failed"] != 6 || st["dead_lettered"] != 2 {
			t.Errorf("worker: %v, want 2 processed, 2 entries failing 3 times each, 2 dead-lettered", st)
		}
		w.checkOnce(t, []string{ids[0], ids[3]})
		dead := w.rdb.XRange(context.Background(), "outbox:poison-dead", "-", "+").Val()
		if len(dead) != 2 {
			t.Fatalf("dead-letter stream: %v, want the 2 poison entries", dead)
		}
		for i, want := range []struct{ id, reason string }{
			{ids[1], "poison on purpose"},
			{ids[2], "payload is not JSON"},
		} {
			v := dead[i].Values
			if v["message_id"] != want.id || v["source_stream"] != "outbox:poison" || v["consumer_group"] != "test" || v["deliveries"] != "3" ||
				!strings.Contains(fmt.Sprint(v["reason"]), "processing failed 3 times") || !strings.Contains(fmt.Sprint(v["reason"]), want.reason) {
				t.Errorf("dead letter %d: %v, want %s with deliveries 3 and a reason naming %q", i, v, want.id, want.reason)
			}
		}
		w.checkNothingPending(t, "outbox:poison")
	})

	t.Run("SIGTERM stops after the entry in progress", func(t *testing.T) {
		ids := w.add(t, "outbox:stop", "test.slow", "test.effect", "test.effect", "test.effect")
		dir := t.TempDir()
		started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
		// A min-idle far beyond the test's deadlines: only the hand-back on
		// stop lets the successor claim the rest at once.
		minIdle := []string{"--min-idle-ms", "600000"}
		p := relaytest.StartCommand(t, w.php.command(w.args("outbox:stop", "stopper", append(minIdle, "--mode", "run", "--slow-started", started, "--slow-release", release)...)...))
		relaytest.WaitFor(t, 30*time.Second, "the slow handler to start", func() bool {
			_, err := os.Stat(started)
			return err == nil || p.Exited()
		})
		p.Signal(t, syscall.SIGTERM)
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("worker exited with %d after SIGTERM, want 0:\n%s", code, p.Out.String())
		}
		if st := parseStats(t, p.Out.String()); st["processed"] != 1 {
			t.Errorf("stopped worker: %v, want only the entry in progress processed", st)
		}
		w.checkOnce(t, ids[:1])
		pending := w.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "outbox:stop", Group: "test", Start: "-", End: "+", Count: 10}).Val()
		if len(pending) != 3 {
			t.Fatalf("pending after the stop: %v, want the 3 entries read and not processed", pending)
		}
		st := parseStats(t, w.php.run(w.args("outbox:stop", "successor", minIdle...)...))
		if st["claimed"] != 3 || st["processed"] != 3 || st["duplicates"] != 0 {
			t.Errorf("successor: %v, want the 3 handed-back entries claimed and processed", st)
		}
		w.checkOnce(t, ids[1:])
		w.checkNothingPending(t, "outbox:stop")
	})
}

// testWorker runs lib/tests/worker.php; each subtest has its own stream.
type testWorker struct {
	php    *phpRunner
	rdb    *redis.Client
	e      *exampletest.Env
	script string
	all    []string // message ids processed by the subtests so far
}

// args are worker.php's arguments: a draining worker on stream, as consumer.
func (w *testWorker) args(stream, consumer string, more ...string) []string {
	return append([]string{w.script, "--stream", stream, "--consumer", consumer, "--min-idle-ms", "300"}, more...)
}

// add appends one entry per event type to stream, with the fields the relay
// writes, and returns their message ids. test.bad-json has the payload of a
// test.effect that is not JSON.
func (w *testWorker) add(t *testing.T, stream string, types ...string) []string {
	t.Helper()
	var ids []string
	for i, typ := range types {
		id := relaytest.MessageID()
		payload := `{"n":` + strconv.Itoa(i) + `}`
		if typ == "test.bad-json" {
			typ, payload = "test.effect", "{not json"
		}
		err := w.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: map[string]any{
			"message_id": id, "aggregate_type": "test", "aggregate_id": strconv.Itoa(i), "event_type": typ,
			"payload": payload, "occurred_at": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
			"outbox_id": strconv.Itoa(i + 1), "headers": "",
		}}).Err()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// effects counts the handlers' committed writes per message id.
func (w *testWorker) effects(t *testing.T) map[string]int {
	t.Helper()
	rows, err := w.e.DB.Query(`SELECT message_id, COUNT(*) FROM consumer_effects GROUP BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOnce adds ids to what the earlier subtests processed and checks that
// exactly those have an inbox row and one committed effect each.
func (w *testWorker) checkOnce(t *testing.T, ids []string) {
	t.Helper()
	w.all = append(w.all, ids...)
	exampletest.CheckExactlyOnce(t, exampletest.ProcessedIDs(t, w.e.DB, "test"), exampletest.Produced{Committed: w.all})
	effects := w.effects(t)
	for _, id := range w.all {
		if effects[id] != 1 {
			t.Errorf("message %s has %d committed effects, want 1", id, effects[id])
		}
	}
	if len(effects) != len(w.all) {
		t.Errorf("effects of %d messages committed, want %d: %v", len(effects), len(w.all), effects)
	}
}

func (w *testWorker) checkNothingPending(t *testing.T, stream string) {
	t.Helper()
	if p := w.rdb.XPending(context.Background(), stream, "test").Val(); p.Count != 0 {
		t.Errorf("%s: %d entries pending in group test, want 0", stream, p.Count)
	}
}

// exitStatus is how a command that returned err ended.
func exitStatus(err error) (syscall.WaitStatus, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ws, ok
}
