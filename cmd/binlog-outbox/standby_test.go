package main

import (
	"context"
	"encoding/json"
	"hash/crc32"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// takeoverLimit is what the lease promises with its defaults (--lease-ttl
// 5s, --lease-renew 1s): a standby reads within 10s of the active relay's
// death or pause.
const takeoverLimit = 10 * time.Second

// pidOf returns the pid in a holder or writer id (hostname/pid/...), 0 when
// it has none.
func pidOf(id string) int {
	parts := strings.Split(id, "/")
	if len(parts) < 2 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[1])
	return pid
}

// leaseHolder returns the pid holding the lease of env's position, 0 when
// none does.
func leaseHolder(env *relaytest.Env) int {
	info, _, ok, err := redisstream.ReadLease(context.Background(), env.Streams(), posKey(env)+":lease")
	if err != nil || !ok {
		return 0
	}
	return pidOf(info.Holder)
}

// positionWriter returns the pid of the relay that stored env's position.
func positionWriter(env *relaytest.Env) int {
	raw, err := env.Streams().Get(context.Background(), posKey(env)).Bytes()
	if err != nil {
		return 0
	}
	b, err := position.Decode(raw)
	if err != nil {
		return 0
	}
	return pidOf(b.Writer)
}

func pid(p *relayProc) int { return p.Cmd.Process.Pid }

// TestRun_StandbyTakesOverExactlyOnce runs two relays with the lease (the
// default) under load and takes the active one away four times, alternating:
// kill -9 (an orchestrator restarts it, as a standby), and SIGSTOP until the
// standby has taken over and appended, then SIGCONT. Each time the standby
// reads within 10s; the paused one, woken up, appends nothing (its lease is
// gone, its scripts are refused), stops reading and waits; no relay exits by
// itself, and every committed event is in the streams exactly once.
func TestRun_StandbyTakesOverExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	args := []string{"--mode", "binlog", "--max-batch-events", "50"}
	// An id per relay, as docs/standby-relays.md advises (--server-id-range does it
	// on distinct hosts): a frozen former holder's dump connection, its
	// socket buffer full, can keep a shared id registered on MariaDB long
	// after the new holder connected with it, and the new holder then reads
	// nothing.
	started := 0
	start := func() *relayProc {
		started++
		id := 4000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000) + started
		return startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), []string{"--server-id", strconv.Itoa(id)}, args...)
	}
	active := start()
	waitLog(t, active, "reading binlog")
	standby := start()
	waitLog(t, standby, "waiting for the lease held by ")
	if got := leaseHolder(env); got != pid(active) {
		t.Fatalf("lease held by pid %d, want the first relay %d", got, pid(active))
	}

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(lctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	defer stopLoad()

	active, standby = takeovers(t, env, active, standby, []string{"SIGSTOP", "SIGKILL", "SIGSTOP", "SIGKILL"}, start)

	// status shows who reads.
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "status", "--json")...)
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if r.Lease == nil || pidOf(r.Lease.Holder) != pid(active) || len(r.Lease.TokenPrefix) != 8 || r.Lease.TTLSeconds <= 0 || r.LeaseKey != posKey(env)+":lease" {
		t.Errorf("status --json lease = %+v at %q, want the active relay %d with a token prefix and TTL left", r.Lease, r.LeaseKey, pid(active))
	}

	stopLoad()
	wg.Wait()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	for _, p := range []*relayProc{standby, active} {
		if p.Exited() {
			t.Fatalf("relay %d exited:\n%s", pid(p), relaytest.TailLines(p.Out.String(), 20))
		}
		stopRelay(t, p)
	}
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("4 takeovers, %d committed events, %d entries", len(rec.Committed), n)
}

// waitsFor counts the times p logged that it waits for the lease held by
// the relay process pid.
func waitsFor(p *relayProc, pid int) int {
	n := 0
	for _, line := range strings.Split(p.Out.String(), "\n") {
		if i := strings.Index(line, "waiting for the lease held by "); i >= 0 && strings.Contains(line[i:], "/"+strconv.Itoa(pid)+"/") {
			n++
		}
	}
	return n
}

// takeovers takes the active relay away once per fault, under the load the
// caller runs: "SIGKILL" (then restart starts it again, as an orchestrator
// would, and it waits as a standby) or "SIGSTOP" until the standby has
// taken over and appended (then SIGCONT). Each time the standby must
// append within takeoverLimit, the former active relay must notice it lost
// the lease and wait for the new holder without appending, and no relay
// may exit. It returns the relays' roles after the last fault.
func takeovers(t *testing.T, env *relaytest.Env, active, standby *relayProc, faults []string, restart func() *relayProc) (*relayProc, *relayProc) {
	t.Helper()
	for i, fault := range faults {
		time.Sleep(300 * time.Millisecond) // appends under load before the fault
		if positionWriter(env) != pid(active) {
			t.Fatalf("fault %d: the position was not written by the active relay %d but by %d", i+1, pid(active), positionWriter(env))
		}
		sig := syscall.SIGSTOP
		if fault == "SIGKILL" {
			sig = syscall.SIGKILL
		}
		waitsBefore := waitsFor(active, pid(standby))
		at := time.Now()
		active.Signal(t, sig)
		relaytest.WaitFor(t, 30*time.Second, "the standby to take the lease and append", func() bool {
			return positionWriter(env) == pid(standby) || standby.Exited()
		})
		took := time.Since(at)
		if standby.Exited() {
			t.Fatalf("fault %d: the standby exited:\n%s", i+1, relaytest.TailLines(standby.Out.String(), 20))
		}
		if took > takeoverLimit {
			t.Errorf("fault %d (%s): the standby appended %s after the fault, want within %s", i+1, fault, took.Round(time.Millisecond), takeoverLimit)
		}
		t.Logf("fault %d (%s): the standby appended %s after it", i+1, fault, took.Round(time.Millisecond))
		old := active
		if fault == "SIGKILL" {
			old.Wait(t, 10*time.Second)
			old, waitsBefore = restart(), 0
		} else {
			lostBefore := strings.Count(old.Out.String(), "lost the lease")
			old.Signal(t, syscall.SIGCONT)
			relaytest.WaitFor(t, 30*time.Second, "the woken relay to notice it lost the lease", func() bool {
				return strings.Count(old.Out.String(), "lost the lease") > lostBefore || old.Exited()
			})
		}
		relaytest.WaitFor(t, 30*time.Second, "the former active relay to wait for the lease", func() bool {
			return waitsFor(old, pid(standby)) > waitsBefore || old.Exited()
		})
		if old.Exited() {
			t.Fatalf("fault %d: the former active relay exited:\n%s", i+1, relaytest.TailLines(old.Out.String(), 20))
		}
		if w := positionWriter(env); w != pid(standby) {
			t.Fatalf("fault %d: after the former active relay woke up, the position was written by %d, want the new active relay %d", i+1, w, pid(standby))
		}
		active, standby = standby, old
	}
	return active, standby
}

// TestRun_RestartedRelayTakesItsDeadLeaseAtOnce: a relay killed with
// SIGKILL and started again at once, as systemd or a supervisor does, takes
// the lease its dead process held without waiting for it to expire
// (--lease-ttl 60s here): the lease names the process, and on the same boot
// and PID namespace its absence is a proof. A holder that is alive, here
// frozen by SIGSTOP, proves nothing: another relay waits for its lease.
func TestRun_RestartedRelayTakesItsDeadLeaseAtOnce(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	args := []string{"--mode", "binlog", "--lease-ttl", "60s", "--lease-renew", "1s"}
	first := startRelay(t, env, args...)
	waitLog(t, first, "reading binlog")
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)

	first.Signal(t, syscall.SIGKILL)
	first.Wait(t, 10*time.Second)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 20}, rec)
	at := time.Now()
	second := startRelay(t, env, args...)
	waitLog(t, second, "took the lease of a relay that is gone")
	// Well within the 60s the dead lease had left.
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	t.Logf("the restarted relay delivered %s after its start", time.Since(at).Round(time.Millisecond))
	if got := leaseHolder(env); got != pid(second) {
		t.Fatalf("lease held by pid %d, want the restarted relay %d", got, pid(second))
	}

	second.Signal(t, syscall.SIGSTOP)
	third := startRelayGlobal(t, env, env.MariaDB.DSN(env.Database), []string{"--server-id", strconv.Itoa(5000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000))}, args...)
	waitLog(t, third, "waiting for the lease held by ")
	time.Sleep(3 * time.Second) // three tries of the standby
	if got := leaseHolder(env); got != pid(second) || strings.Contains(third.Out.String(), "is gone") {
		t.Errorf("lease held by pid %d while its holder %d is frozen, want it left to expire:\n%s", got, pid(second), relaytest.TailLines(third.Out.String(), 10))
	}
	second.Signal(t, syscall.SIGCONT)
	stopRelay(t, third)
	stopRelay(t, second)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
