package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// jobsTableDDL is jobs as Laravel 8's `php artisan queue:table` migration
// creates it (10 and 11 alike).
const jobsTableDDL = `CREATE TABLE jobs (
  id BIGINT UNSIGNED AUTO_INCREMENT NOT NULL PRIMARY KEY,
  queue VARCHAR(255) NOT NULL, payload LONGTEXT NOT NULL, attempts TINYINT UNSIGNED NOT NULL,
  reserved_at INT UNSIGNED DEFAULT NULL, available_at INT UNSIGNED NOT NULL, created_at INT UNSIGNED NOT NULL,
  INDEX jobs_queue_index (queue)
) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`

// insertJob inserts a job as DatabaseQueue::pushToDatabase does, available
// delay from now.
func insertJob(t *testing.T, env *relaytest.Env, queue, uuid string, delay time.Duration) {
	t.Helper()
	now := time.Now().Unix()
	payload := fmt.Sprintf(`{"uuid":"%s","displayName":"App\\Jobs\\Bill","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"data":{"commandName":"App\\Jobs\\Bill","command":"O:13:\"App\\Jobs\\Bill\":0:{}"}}`, uuid)
	if _, err := env.DB.Exec("INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, created_at) VALUES (?, ?, 0, NULL, ?, ?)",
		queue, payload, now+int64(delay/time.Second), now); err != nil {
		t.Fatal(err)
	}
}

// TestCheck_LaravelJobsSource checks a jobs table with --source
// laravel-jobs in both modes, and refuses to guess Laravel's Redis prefix.
func TestCheck_LaravelJobsSource(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	dbName := m.NewDatabase(t)
	if _, err := m.Open(t, dbName).Exec(jobsTableDDL); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", m.DSN(dbName), "--redis-url", testsvc.SharedRedis(t).URL(0), "--source", "laravel-jobs"}
	for _, mode := range []string{"binlog", "poll"} {
		for _, format := range []string{"laravel-queue", "laravel-stream"} {
			// No sent_at: poll mode deletes the rows it relayed.
			out, errOut, code := run(t, append(global, "--laravel-redis-prefix", "app_database_", "check", "--mode", mode, "--format", format, "--on-sent", "delete")...)
			if code != 0 || !strings.Contains(out, "PASS  "+preflight.NameFormat) || !strings.Contains(out, format+": jobs rows") ||
				!strings.Contains(out, "PASS  "+preflight.NameOtherWorkers) {
				t.Errorf("check --mode %s --format %s: exit %d, want 0 with the format\n%s%s", mode, format, code, out, errOut)
			}
		}
	}
	// A row a database queue worker reserved: both modes warn.
	if _, err := m.Open(t, dbName).Exec("INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, created_at) VALUES ('default', '{}', 1, UNIX_TIMESTAMP(), UNIX_TIMESTAMP(), UNIX_TIMESTAMP())"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"binlog", "poll"} {
		out, errOut, _ := run(t, append(global, "--laravel-redis-prefix", "app_database_", "check", "--mode", mode, "--on-sent", "delete", "--start-from", "now")...)
		if !strings.Contains(out, "WARN  "+preflight.NameOtherWorkers) || !strings.Contains(out, "a row of") {
			t.Errorf("check --mode %s of a reserved row: no warning\n%s%s", mode, out, errOut)
		}
	}
	// A key where a queue's list lies holding another type: check names it.
	rdb := testsvc.SharedRedis(t).Client(t, testsvc.SharedRedis(t).URL(0))
	if err := rdb.Set(context.Background(), "chkother_queues:default", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, _ := run(t, append(global, "--laravel-redis-prefix", "chkother_", "check", "--mode", "binlog", "--format", "laravel-queue", "--start-from", "now")...)
	if !strings.Contains(out, "WARN  "+preflight.NameStreamKeys) || !strings.Contains(out, "chkother_queues:default (string)") {
		t.Errorf("check with a string where a queue's list lies: no warning naming it\n%s%s", out, errOut)
	}
	if _, errOut, code := run(t, append(global, "check", "--mode", "binlog")...); code != exitUsage || !strings.Contains(errOut, "--laravel-redis-prefix") {
		t.Errorf("check without the Redis prefix: exit %d, want %d naming --laravel-redis-prefix\n%s", code, exitUsage, errOut)
	}
	if _, errOut, code := run(t, "--source", "laravel-jobs", "schema", "print"); code != exitUsage || !strings.Contains(errOut, "queue:table") {
		t.Errorf("schema print --source laravel-jobs: exit %d, want %d with the hint\n%s", code, exitUsage, errOut)
	}
}

// TestRun_LaravelJobs relays jobs rows in binlog mode to Laravel's Redis
// queue under the .env's prefix and database: each job on its queue's list
// with a notification, the delayed one in the delayed set at its
// available_at; the relay killed and restarted delivers the later ones once;
// a database worker's UPDATE of a row is reported, and cleanup removes the
// relayed rows.
func TestRun_LaravelJobs(t *testing.T) {
	t.Parallel()
	env := jobsEnv(t)
	ctx := context.Background()
	global := []string{"--source", "laravel-jobs", "--laravel-redis-prefix", "shop_database_"}
	p := startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), global, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	insertJob(t, env, "default", "u1", 0)
	insertJob(t, env, "emails", "u2", 0)
	insertJob(t, env, "default", "u3", time.Hour)
	rdb := env.RDB
	relaytest.WaitFor(t, 30*time.Second, "the first jobs", func() bool {
		return rdb.LLen(ctx, "shop_database_queues:default").Val() == 1 && rdb.ZCard(ctx, "shop_database_queues:default:delayed").Val() == 1
	})
	p.Signal(t, 9)
	p.Wait(t, 30*time.Second)
	insertJob(t, env, "default", "u4", 0)
	p = startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), global, "--mode", "binlog")
	relaytest.WaitFor(t, 30*time.Second, "the job after the restart", func() bool {
		return rdb.LLen(ctx, "shop_database_queues:default").Val() >= 2
	})
	var ids []string
	for _, m := range rdb.LRange(ctx, "shop_database_queues:default", 0, -1).Val() {
		var j struct {
			ID       string `json:"id"`
			Attempts int    `json:"attempts"`
		}
		if err := json.Unmarshal([]byte(m), &j); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		ids = append(ids, j.ID)
	}
	if fmt.Sprint(ids) != "[u1 u4]" || rdb.LLen(ctx, "shop_database_queues:default:notify").Val() != 2 ||
		rdb.LLen(ctx, "shop_database_queues:emails").Val() != 1 {
		t.Errorf("queues:default %v, notify %d, emails %d; want [u1 u4], 2, 1", ids,
			rdb.LLen(ctx, "shop_database_queues:default:notify").Val(), rdb.LLen(ctx, "shop_database_queues:emails").Val())
	}
	z := rdb.ZRangeWithScores(ctx, "shop_database_queues:default:delayed", 0, -1).Val()
	if len(z) != 1 || z[0].Score < float64(time.Now().Add(50*time.Minute).Unix()) {
		t.Errorf("delayed set %v, want u3 due in an hour", z)
	}

	if _, err := env.DB.Exec("UPDATE jobs SET reserved_at = UNIX_TIMESTAMP(), attempts = attempts + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if !p.Said("jobs run twice", 30*time.Second) {
		t.Errorf("no report of the database worker's UPDATE:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	if strings.Contains(p.Out.String(), "preflight: stream keys") {
		t.Errorf("the preflight did not take Laravel's lists for its keys:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}

	// verify and repair find rows by their entries, which workers take off
	// Laravel's lists: they refuse rather than call every job missing.
	adminFlags := append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}, global...)
	// status shows what waits on each queue, the notify lists left out.
	queueStatus(t, adminFlags, []admin.QueueStatus{
		{Key: "shop_database_queues:default", Type: "list", Waiting: 2, Delayed: 1},
		{Key: "shop_database_queues:emails", Type: "list", Waiting: 1},
	})
	for _, cmd := range [][]string{{"verify"}, {"repair"}} {
		if out, errOut, code := run(t, append(adminFlags, cmd...)...); code != exitUsage || !strings.Contains(errOut, "does not work with --format laravel-queue") {
			t.Errorf("%s: exit %d, want %d and the refusal\n%s%s", cmd[0], code, exitUsage, out, errOut)
		}
	}
	// available_at holds whole seconds: the rows must be older than
	// --older-than by more than one.
	time.Sleep(2500 * time.Millisecond)
	out, errOut, code := run(t, append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}, append(global, "cleanup", "--older-than", "1s")...)...)
	var left int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM jobs").Scan(&left); err != nil {
		t.Fatal(err)
	}
	// The delayed job's available_at lies ahead: it is kept until then.
	if code != 0 || left != 1 {
		t.Errorf("cleanup: exit %d, %d rows left, want 0 and the delayed one\n%s%s", code, left, out, errOut)
	}
}

// TestRun_LaravelJobsPoll relays jobs rows in poll mode, deleting each row
// it pushed (--on-sent delete: the table has no sent_at): available_at, an
// INT UNSIGNED, is read as the delayed job's time there too.
func TestRun_LaravelJobsPoll(t *testing.T) {
	t.Parallel()
	env := jobsEnv(t)
	ctx := context.Background()
	insertJob(t, env, "default", "u1", 0)
	insertJob(t, env, "default", "u2", time.Hour)
	p := startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), []string{"--source", "laravel-jobs", "--laravel-redis-prefix", ""},
		"--mode", "poll", "--on-sent", "delete", "--poll-interval", "100ms")
	rdb := env.RDB
	relaytest.WaitFor(t, 30*time.Second, "the jobs and their rows deleted", func() bool {
		var left int
		if err := env.DB.QueryRow("SELECT COUNT(*) FROM jobs").Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0 && rdb.LLen(ctx, "queues:default").Val() == 1
	})
	z := rdb.ZRangeWithScores(ctx, "queues:default:delayed", 0, -1).Val()
	if len(z) != 1 || z[0].Score < float64(time.Now().Add(50*time.Minute).Unix()) || rdb.LLen(ctx, "queues:default:notify").Val() != 1 {
		t.Errorf("delayed set %v, notify %d; want u2 due in an hour and one notification", z, rdb.LLen(ctx, "queues:default:notify").Val())
	}
	p.Signal(t, 15)
	p.Wait(t, 30*time.Second)
}

// TestStatus_LaravelStreamQueues: status shows what waits on the queues of
// --format laravel-stream, a stream and its delayed set each, by the format
// the relay recorded.
func TestStatus_LaravelStreamQueues(t *testing.T) {
	t.Parallel()
	env := jobsEnv(t)
	ctx := context.Background()
	global := []string{"--source", "laravel-jobs", "--laravel-redis-prefix", ""}
	p := startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), global, "--mode", "binlog", "--format", "laravel-stream")
	waitStoredPosition(t, env, posKey(env))
	insertJob(t, env, "default", "u1", 0)
	insertJob(t, env, "default", "u2", time.Hour)
	insertJob(t, env, "emails", "u3", time.Hour)
	rdb := env.RDB
	relaytest.WaitFor(t, 30*time.Second, "the jobs", func() bool {
		return rdb.XLen(ctx, "outbox:jobs:default").Val() == 1 && rdb.ZCard(ctx, "outbox:jobs:emails:delayed").Val() == 1
	})
	stopRelay(t, p)
	queueStatus(t, append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}, global...), []admin.QueueStatus{
		{Key: "outbox:jobs:default", Type: "stream", Waiting: 1, Delayed: 1},
		{Key: "outbox:jobs:emails", Type: "none", Delayed: 1},
	})
}

// queueStatus runs status with global and flags, as text and as JSON, and
// wants the queues want in both.
func queueStatus(t *testing.T, global []string, want []admin.QueueStatus, flags ...string) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "status"), flags...)...)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	for _, q := range want {
		line := fmt.Sprintf("queue:     %s (%s), %d waiting, %d delayed, %d reserved\n", q.Key, q.Type, q.Waiting, q.Delayed, q.Reserved)
		if !strings.Contains(out, line) {
			t.Errorf("status does not say %q:\n%s", line, out)
		}
	}
	out, errOut, code = run(t, append(append(global, "status", "--json"), flags...)...)
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if !reflect.DeepEqual(r.Queues, want) {
		t.Errorf("status --json queues:\n got %+v\nwant %+v", r.Queues, want)
	}
}

// jobsEnv is a test's own database with Laravel's jobs table as the table
// under test.
func jobsEnv(t *testing.T) *relaytest.Env {
	t.Helper()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	if _, err := env.DB.Exec(jobsTableDDL); err != nil {
		t.Fatal(err)
	}
	env.Table = "jobs"
	return env
}
