package main

import (
	"context"
	"hash/crc32"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRun_SecondRelaySameConfigDoesNotDisturb starts a second relay with
// exactly the first one's flags (one --server-id, one position) while the
// first reads under load: the second must wait for the lease without opening
// a binlog connection, so the first is never disconnected ("another replica
// is connected with the same server id") nor fenced, and every event is in
// the streams exactly once.
func TestRun_SecondRelaySameConfigDoesNotDisturb(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	args := []string{"--mode", "binlog", "--max-batch-events", "50"}
	first := startRelay(t, env, args...)
	waitLog(t, first, "reading binlog")

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(lctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	defer stopLoad()

	second := startRelay(t, env, args...)
	waitLog(t, second, "waiting for the lease held by ")
	time.Sleep(10 * time.Second)
	stopLoad()
	wg.Wait()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)

	for _, p := range []*relayProc{first, second} {
		if p.Exited() {
			t.Fatalf("relay %d exited:\n%s", pid(p), relaytest.TailLines(p.Out.String(), 20))
		}
	}
	for name, p := range map[string]*relayProc{"first": first, "second": second} {
		if n := strings.Count(p.Out.String(), "same server id"); n > 0 {
			t.Errorf("the %s relay logged a server id clash %d times:\n%s", name, n, relaytest.TailLines(p.Out.String(), 20))
		}
	}
	if strings.Contains(second.Out.String(), "reading binlog") {
		t.Errorf("the second relay read the binlog while the first held the lease:\n%s", relaytest.TailLines(second.Out.String(), 20))
	}
	if got := leaseHolder(env); got != pid(first) {
		t.Errorf("lease held by %d, want the first relay %d", got, pid(first))
	}
	stopRelay(t, second)
	stopRelay(t, first)
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}

// startDefaultRelay starts a relay of env with the flags a user gives,
// without the tests' --server-id: the default id is the one under test.
func startDefaultRelay(t *testing.T, env *relaytest.Env, global []string, args ...string) *relayProc {
	t.Helper()
	full := append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--log-format", "json"}, global...)
	full = append(append(full, "run"), args...)
	p := &relayProc{Process: relaytest.StartProcess(t, binary(t), full...)}
	go p.watchMemory()
	return p
}

// produceFor runs producers on env's table in the background until stop.
func produceFor(t *testing.T, env *relaytest.Env, rec *relaytest.Produced) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// TestRun_DefaultServerIDsDoNotCollide runs two relays of two outbox tables
// of one server, on one host, each with the defaults: with one fixed
// default id the server dropped one's binlog connection for the other's,
// again and again. The default now differs per position: neither logs a
// clash, and each table's events are in the streams exactly once.
func TestRun_DefaultServerIDsDoNotCollide(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv, rs := testsvc.SharedMariaDB(t), testsvc.SharedRedis(t)
	envs := []*relaytest.Env{relaytest.NewEnv(t, srv, rs), relaytest.NewEnv(t, srv, rs)}
	var relays []*relayProc
	var recs []*relaytest.Produced
	for _, env := range envs {
		p := startDefaultRelay(t, env, nil, "--mode", "binlog", "--max-batch-events", "50")
		waitLog(t, p, "reading binlog")
		relays = append(relays, p)
		recs = append(recs, relaytest.NewProduced())
	}
	var stops []func()
	for i, env := range envs {
		stops = append(stops, produceFor(t, env, recs[i]))
	}
	time.Sleep(8 * time.Second)
	for i, env := range envs {
		stops[i]()
		relaytest.WaitDelivered(t, env, recs[i], 60*time.Second)
	}
	for i, p := range relays {
		if p.Exited() {
			t.Fatalf("relay %d exited:\n%s", i+1, relaytest.TailLines(p.Out.String(), 20))
		}
		if n := strings.Count(p.Out.String(), "same server id"); n > 0 {
			t.Errorf("relay %d logged a server id clash %d times:\n%s", i+1, n, relaytest.TailLines(p.Out.String(), 20))
		}
	}
	for i, p := range relays {
		stopRelay(t, p)
		relaytest.Check(context.Background(), t, envs[i].RDB, recs[i], relaytest.CheckOptions{ExactlyOnce: true})
	}
}

// TestRun_SecondRelayWithTheSameServerIDRefuses starts, next to a relay
// reading under load, a relay of another table with the same explicit
// --server-id: it must refuse before it opens a binlog connection, naming
// the relay that holds the id, and `check` with its flags says the same;
// the first is never disconnected, and its events are in the streams
// exactly once.
func TestRun_SecondRelayWithTheSameServerIDRefuses(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv, rs := testsvc.SharedMariaDB(t), testsvc.SharedRedis(t)
	env, other := relaytest.NewEnv(t, srv, rs), relaytest.NewEnv(t, srv, rs)
	// The claims live in the Redis database the relays share.
	shared := *other
	shared.RedisURL = env.RedisURL
	other = &shared
	id := []string{"--server-id", strconv.Itoa(5000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000))}
	first := startDefaultRelay(t, env, id, "--mode", "binlog", "--max-batch-events", "50")
	waitLog(t, first, "reading binlog")
	rec := relaytest.NewProduced()
	stop := produceFor(t, env, rec)

	out, errOut, code := run(t, append([]string{"--mysql-dsn", other.MariaDB.DSN(other.Database), "--redis-url", other.RedisURL}, append(id, "check", "--mode", "binlog")...)...)
	if code == 0 || !strings.Contains(out, "FAIL  server id") || !strings.Contains(out, "is in use by the relay") || !strings.Contains(out, posKey(env)) {
		t.Errorf("check with the second relay's flags: exit %d, want a failed server id line naming the first relay's position %s\n%s%s", code, posKey(env), out, errOut)
	}
	second := startDefaultRelay(t, other, id, "--mode", "binlog")
	if code := second.Wait(t, 60*time.Second); code == 0 {
		t.Fatalf("the second relay exited 0:\n%s", second.Out.String())
	}
	got := second.Out.String()
	for _, want := range []string{"is in use by the relay", posKey(env), "opened no binlog connection", "hint:"} {
		if !strings.Contains(got, want) {
			t.Errorf("the second relay's output lacks %q:\n%s", want, relaytest.TailLines(got, 20))
		}
	}
	if strings.Contains(got, "reading binlog") {
		t.Errorf("the second relay read the binlog:\n%s", relaytest.TailLines(got, 20))
	}
	time.Sleep(3 * time.Second)
	stop()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	if first.Exited() {
		t.Fatalf("the first relay exited:\n%s", relaytest.TailLines(first.Out.String(), 20))
	}
	if n := strings.Count(first.Out.String(), "same server id"); n > 0 {
		t.Errorf("the first relay was disconnected %d times:\n%s", n, relaytest.TailLines(first.Out.String(), 20))
	}
	stopRelay(t, first)
	relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
