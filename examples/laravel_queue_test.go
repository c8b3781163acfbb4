package examples_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// TestLaravelQueue runs the package's queue driver in examples/laravel on
// Debian's Laravel (8 or 10): two `queue:work outbox` workers consume outbox:order
// through a consumer group while orders:place places orders (some rolled
// back, each in a nested transaction through the Eloquent trait) and the
// relay is killed with SIGKILL once. Every fourth order's first attempt
// fails and succeeds on the retry; an order on hold fails its 3 tries and
// lands in failed_jobs and the dead-letter stream, and after its release
// `queue:retry all` bills it. The stream holds each committed event once
// across the relay's SIGKILL and restart, as Outbox::record wrote it. In
// the end every committed event is billed exactly once, no rolled-back one,
// nothing is pending, and both workers stop cleanly on SIGTERM.
func TestLaravelQueue(t *testing.T) {
	php := requirePHP(t)
	requireLaravel(t, php)
	ctx := context.Background()
	e := exampletest.NewBareEnv(t)
	rdb := e.Redis.Client(t, e.RedisURL)
	art := newArtisan(t, php, e)
	art.php.env = append(art.php.env, "OUTBOX_RETRY_AFTER=2", "OUTBOX_EXAMPLE_FLAKY_EVERY=4")

	art.run("migrate", "--force")
	relay := exampletest.StartRelay(t, e)
	out := art.run("orders:place", "--orders=12", "--rollback-every=3")
	first := exampletest.ParseProducerOutput(t, out)
	relaytest.WaitFor(t, 30*time.Second, "the relay to append the first orders' events", func() bool {
		return rdb.XLen(ctx, "outbox:order").Val() >= int64(len(first.Committed))
	})
	// customer-5's order (placed, not paid): its job fails until released.
	if _, err := e.DB.Exec("UPDATE orders SET status = 'on_hold' WHERE customer = 'customer-5'"); err != nil {
		t.Fatal(err)
	}

	var workers []*relaytest.Process
	for _, name := range []string{"worker-1", "worker-2"} {
		cmd := art.command("queue:work", "outbox", "--queue=outbox:order", "--sleep=0", "--timeout=30")
		cmd.Env = append(cmd.Env, "OUTBOX_CONSUMER="+name)
		workers = append(workers, relaytest.StartCommand(t, cmd))
	}
	relay.Signal(t, syscall.SIGKILL)
	relay.Wait(t, 30*time.Second)
	out += art.run("orders:place", "--orders=12", "--rollback-every=3")
	exampletest.StartRelay(t, e)
	produced := exampletest.ParseProducerOutput(t, out)

	var held int
	if err := e.DB.QueryRow("SELECT id FROM orders WHERE status = 'on_hold'").Scan(&held); err != nil {
		t.Fatal(err)
	}
	waitBilled := func(what string, want, failed int) {
		t.Helper()
		relaytest.WaitFor(t, 45*time.Second, what, func() bool {
			for _, w := range workers {
				if w.Exited() {
					t.Fatalf("a worker exited:\n%s", w.Out.String())
				}
			}
			return count(t, e.DB, "SELECT COUNT(*) FROM invoice_lines") >= want &&
				count(t, e.DB, "SELECT COUNT(*) FROM failed_jobs") == failed
		})
	}
	waitBilled("the workers to bill every committed event but the order on hold", len(produced.Committed)-1, 1)
	// Before queue:retry appends the failed one again.
	if n := rdb.XLen(ctx, "outbox:order").Val(); n != int64(len(produced.Committed)) {
		t.Errorf("outbox:order has %d entries after the relay's SIGKILL and restart, want the %d committed events once each", n, len(produced.Committed))
	}
	checkLaravelEvent(t, rdb.XRangeN(ctx, "outbox:order", "-", "+", 1).Val()[0].Values)
	if n := count(t, e.DB, "SELECT COUNT(*) FROM failed_jobs"); n != 1 {
		t.Errorf("%d failed jobs, want the order on hold's one", n)
	}
	dead := rdb.XRange(ctx, "outbox:dead-letter", "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["aggregate_id"] != strconv.Itoa(held) || !strings.Contains(dead[0].Values["reason"].(string), "on hold") || dead[0].Values["deliveries"] != "3" {
		t.Errorf("dead letters %v, want the order on hold's event after 3 deliveries", dead)
	}
	if n := count(t, e.DB, "SELECT COUNT(*) FROM invoice_lines WHERE attempt = 2"); n == 0 {
		t.Error("no event billed on its second attempt, want every fourth order's after its first failed")
	}

	if _, err := e.DB.Exec("UPDATE orders SET status = 'placed' WHERE id = ?", held); err != nil {
		t.Fatal(err)
	}
	art.run("queue:retry", "all")
	waitBilled("queue:retry to bill the released order", len(produced.Committed), 0)

	for i, w := range workers {
		w.Signal(t, syscall.SIGTERM)
		if code := w.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("worker-%d exited with %d after SIGTERM, want 0:\n%s", i+1, code, w.Out.String())
		}
	}
	billed := exampletest.CountedOnce(t, e.DB, "SELECT message_id, COUNT(*) FROM invoice_lines GROUP BY message_id")
	exampletest.CheckExactlyOnce(t, billed, produced)
	if n := count(t, e.DB, "SELECT COUNT(*) FROM failed_jobs"); n != 0 {
		t.Errorf("%d failed jobs after queue:retry all, want 0", n)
	}
	if p := rdb.XPending(ctx, "outbox:order", "billing-queue").Val(); p.Count != 0 {
		t.Errorf("%d entries pending in group billing-queue after the workers stopped, want 0", p.Count)
	}
}

func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
