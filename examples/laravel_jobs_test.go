package examples_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// jobsRun is what a run of examples/laravel's jobs:dispatch through the
// relay left: the jobs the dispatcher committed and rolled back, the env.
type jobsRun struct {
	e        *exampletest.Env
	art      *artisan
	produced exampletest.Produced
	failing  []string
	relay    *exampletest.Relay
}

// runLaravelJobs dispatches examples/laravel's jobs through the database
// queue (jobs:dispatch: a plain job, one on the emails queue, a delayed one,
// one that fails once, one that always fails, a chain and a batch, inside
// DB::transaction, every third round rolled back and a savepoint rolled
// back in each) while two real workers (`queue:work <connection>`, the
// loop of Illuminate\Queue\Worker) run what the relay of the jobs table
// delivers in format, the relay killed with SIGKILL once between two
// dispatches and started again. It returns once every committed job ran
// and the always failing one landed in failed_jobs, with the workers
// stopped by SIGTERM.
func runLaravelJobs(t *testing.T, format, connection string) jobsRun {
	php := requirePHP(t)
	requireLaravel(t, php)
	e := exampletest.NewBareEnv(t)
	art := newArtisan(t, php, e)
	art.run("migrate", "--force")

	// The relay reads the Redis prefix from the application's .env, as
	// config/database.php derives it (this app sets REDIS_PREFIX's default
	// to outbox_example_); --mysql-dsn and --redis-url win over the rest.
	env := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(env, []byte("APP_NAME=\"Outbox Example\"\nREDIS_PREFIX=outbox_example_\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	relayArgs := []string{"--source", "laravel-jobs", "--laravel-env", env, "--format", format}
	relay := exampletest.StartRelayOn(t, e, "jobs", relayArgs...)
	out := art.run("jobs:dispatch", "--rounds=3", "--rollback-every=3", "--tag=a", "--failing=1")

	var workers []*relaytest.Process
	for _, name := range []string{"worker-1", "worker-2"} {
		cmd := art.command("queue:work", connection, "--queue=default,emails", "--sleep=0", "--timeout=30")
		cmd.Env = append(cmd.Env, "OUTBOX_CONSUMER="+name, "OUTBOX_RETRY_AFTER=5")
		workers = append(workers, relaytest.StartCommand(t, cmd))
	}
	relaytest.WaitFor(t, 45*time.Second, "the workers to run jobs of the first dispatch", func() bool {
		return count(t, e.DB, "SELECT COUNT(*) FROM job_runs") > 0
	})
	relay.Signal(t, syscall.SIGKILL)
	relay.Wait(t, 30*time.Second)
	out += art.run("jobs:dispatch", "--rounds=2", "--rollback-every=2", "--tag=b", "--failing=0")
	relay = exampletest.StartRelayOn(t, e, "jobs", relayArgs...)
	produced := exampletest.ParseProducerOutput(t, out)
	var failing []string
	for _, line := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(line, "failing job key="); ok {
			failing = append(failing, k)
		}
	}

	relaytest.WaitFor(t, 90*time.Second, "the workers to run every committed job and fail the failing one", func() bool {
		for _, w := range workers {
			if w.Exited() {
				t.Fatalf("a worker exited:\n%s", w.Out.String())
			}
		}
		return count(t, e.DB, "SELECT COUNT(DISTINCT job_key) FROM job_runs") >= len(produced.Committed) &&
			count(t, e.DB, "SELECT COUNT(*) FROM failed_jobs") >= len(failing)
	})
	// A job run twice would show within the workers' next rounds.
	time.Sleep(2 * time.Second)
	for i, w := range workers {
		w.Signal(t, syscall.SIGTERM)
		if code := w.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("worker-%d exited with %d after SIGTERM, want 0:\n%s", i+1, code, w.Out.String())
		}
	}
	if strings.Contains(relay.Out.String(), "jobs run twice") {
		t.Errorf("the relay reported a database worker, and none ran:\n%s", relay.Out.String())
	}
	return jobsRun{e: e, art: art, produced: produced, failing: failing, relay: relay}
}

// check asserts what every run must show in the database: each committed
// job ran once (its job_runs row), none of a rolled-back transaction or
// savepoint; the delayed jobs not before their available_at; the jobs that
// fail once ran on their second attempt; the always failing job is in
// failed_jobs, as Laravel writes it, and never ran; every batch finished.
func (r jobsRun) check(t *testing.T, connection string) {
	t.Helper()
	db := r.e.DB
	ran := exampletest.CountedOnce(t, db, "SELECT job_key, COUNT(*) FROM job_runs GROUP BY job_key")
	exampletest.CheckExactlyOnce(t, ran, r.produced)
	if n := count(t, db, "SELECT COUNT(*) FROM job_runs WHERE ran_at < not_before"); n != 0 {
		t.Errorf("%d delayed jobs ran before their available_at", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_runs WHERE not_before > 0"); n == 0 {
		t.Error("no delayed job ran")
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_runs WHERE job_key LIKE '%-retried' AND attempt <> 2"); n != 0 {
		t.Errorf("%d jobs that fail once ran on another attempt than their second", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_runs WHERE job_key LIKE '%-retried'"); n == 0 {
		t.Error("no job that fails once ran")
	}
	if n := count(t, db, fmt.Sprintf("SELECT COUNT(*) FROM job_runs WHERE connection <> '%s'", connection)); n != 0 {
		t.Errorf("%d jobs ran on another connection than %s", n, connection)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_runs WHERE job_key LIKE '%-emails' AND queue NOT LIKE '%emails'"); n != 0 {
		t.Errorf("%d jobs of the emails queue ran from another queue", n)
	}
	for _, k := range r.failing {
		if n := count(t, db, fmt.Sprintf("SELECT COUNT(*) FROM failed_jobs WHERE connection = '%s' AND payload LIKE '%%%s%%'", connection, k)); n != 1 {
			t.Errorf("job %s: %d rows in failed_jobs on connection %s, want 1", k, n, connection)
		}
	}
	if n := count(t, db, "SELECT COUNT(*) FROM failed_jobs"); n != len(r.failing) {
		t.Errorf("%d failed jobs, want %d", n, len(r.failing))
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_batches WHERE pending_jobs <> 0 OR finished_at IS NULL"); n != 0 {
		t.Errorf("%d batches unfinished", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM job_batches"); n == 0 {
		t.Error("no batch committed")
	}
}

// TestLaravelJobs_RedisQueue is the jobs table as the outbox, delivered to
// Laravel's own Redis queue (--source laravel-jobs, --format laravel-queue):
// the application dispatches with Queue::connection('database') inside its
// transactions and two `queue:work redis` workers run the jobs, unchanged,
// from the keys RedisQueue uses, each committed job once across the relay's
// SIGKILL (runLaravelJobs, jobsRun.check). The queues are empty at the end:
// nothing reserved, delayed or waiting, under the application's prefix.
func TestLaravelJobs_RedisQueue(t *testing.T) {
	r := runLaravelJobs(t, "laravel-queue", "redis")
	r.check(t, "redis")
	rdb := r.e.Redis.Client(t, r.e.RedisURL)
	ctx := context.Background()
	for _, q := range []string{"default", "emails"} {
		key := "outbox_example_queues:" + q
		if n := rdb.LLen(ctx, key).Val() + rdb.ZCard(ctx, key+":reserved").Val() + rdb.ZCard(ctx, key+":delayed").Val(); n != 0 {
			t.Errorf("%s still holds %d jobs", key, n)
		}
	}
	if n := rdb.XLen(ctx, "outbox:dead-letter").Val(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// TestLaravelJobs_Streams is the jobs table as the outbox, delivered to one
// Redis stream per queue for the package's outbox connector (--format
// laravel-stream): two `queue:work outbox-jobs` workers read the streams
// through a consumer group and run the jobs' payloads as Laravel runs any
// job (LaravelJob), the delayed ones moved to the streams once due, each
// committed job once across the relay's SIGKILL (runLaravelJobs,
// jobsRun.check). Each stream holds every job of its queue once, nothing
// is left pending or delayed.
func TestLaravelJobs_Streams(t *testing.T) {
	r := runLaravelJobs(t, "laravel-stream", "outbox-jobs")
	r.check(t, "outbox-jobs")
	rdb := r.e.Redis.Client(t, r.e.RedisURL)
	ctx := context.Background()
	seen := map[string]int{}
	total := 0
	for _, q := range []string{"default", "emails"} {
		stream := "outbox:jobs:" + q
		for _, entry := range rdb.XRange(ctx, stream, "-", "+").Val() {
			seen[entry.Values["message_id"].(string)]++
			total++
		}
		if p := rdb.XPending(ctx, stream, "laravel-jobs").Val(); p == nil || p.Count != 0 {
			t.Errorf("%s: pending %v after the workers stopped, want none", stream, p)
		}
		if n := rdb.ZCard(ctx, stream+":delayed").Val(); n != 0 {
			t.Errorf("%s:delayed still holds %d jobs", stream, n)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s is in the streams %d times, want once", id, n)
		}
	}
	if want := len(r.produced.Committed) + len(r.failing); total != want {
		t.Errorf("the streams hold %d jobs, want the %d committed ones", total, want)
	}
}
