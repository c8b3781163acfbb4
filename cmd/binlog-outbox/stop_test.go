package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// waitPolling waits until the poll relay process is past its preflight and
// polling, so that a signal lands on rounds, not on the start.
func waitPolling(t testing.TB, p *relayProc) {
	t.Helper()
	waitLog(t, p, "poll relay starting")
}

// waitLog waits until the relay process logged msg.
func waitLog(t testing.TB, p *relayProc, msg string) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the relay to log "+msg, func() bool {
		return strings.Contains(p.Out.String(), msg) || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("the relay exited at its start:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
}

// TestRun_CleanStopsUnderLoadExactlyOnce stops the relay with SIGTERM ten
// times at random moments while producers write and restarts it, without
// the dedupe window: nothing is appended twice, nothing is lost. Poll mode:
// a clean stop finishes the round in flight; before the stop left the round
// its own context, a signal between the append and the COMMIT rolled the
// marks back and the next start appended the rows again. Binlog mode: a stop
// during an append leaves the entries and the position together or neither,
// and the next start resumes at the stored position.
func TestRun_CleanStopsUnderLoadExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, tt := range []struct {
		mode, ready string
		args        []string
	}{
		{"poll", "poll relay starting", []string{"--mode", "poll", "--batch-size", "50"}},
		{"binlog", "reading binlog", []string{"--mode", "binlog", "--max-batch-events", "50"}},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
			ctx := context.Background()
			rec := relaytest.NewProduced()
			p := startRelay(t, env, tt.args...)
			waitLog(t, p, tt.ready)

			lctx, stopLoad := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				relaytest.Produce(lctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 100000, Pause: time.Millisecond}, rec)
			}()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
			const stops = 10
			for i := 0; i < stops; i++ {
				time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
				p.Signal(t, syscall.SIGTERM)
				if code := p.Wait(t, 15*time.Second); code != 0 {
					t.Fatalf("stop %d: exit code %d after SIGTERM, want 0", i+1, code)
				}
				p = startRelay(t, env, tt.args...)
				waitLog(t, p, tt.ready)
			}
			stopLoad()
			wg.Wait()
			relaytest.WaitDelivered(t, env, rec, 60*time.Second)
			if tt.mode == "poll" {
				relaytest.WaitFor(t, 30*time.Second, "every row marked", func() bool { return countUnsentRows(env) == 0 })
			}
			time.Sleep(200 * time.Millisecond)
			p.Signal(t, syscall.SIGTERM)
			if code := p.Wait(t, 15*time.Second); code != 0 {
				t.Fatalf("exit code %d after the last SIGTERM, want 0", code)
			}
			n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
			t.Logf("%s mode: %d clean stops, %d committed events, %d entries", tt.mode, stops, len(rec.Committed), n)
		})
	}
}

func countUnsentRows(env *relaytest.Env) int {
	n := -1
	_ = env.DB.QueryRow("SELECT COUNT(*) FROM `" + env.Table + "` WHERE sent_at IS NULL").Scan(&n)
	return n
}

// TestRun_SignalStopReleasesLease: SIGHUP, SIGINT and SIGTERM each stop a
// relay holding the lease cleanly: it says so, exits 0 and gives the lease
// up, so that the next relay reads at once rather than after the lease's
// TTL. Before SIGHUP was handled it killed the relay without a word and
// left the lease held. On a Redis Cluster too, where the lease's take also
// raised the slots' fences.
func TestRun_SignalStopReleasesLease(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	const ttl = 20 * time.Second
	args := []string{"--mode", "binlog", "--lease-ttl", ttl.String(), "--lease-renew", "1s"}
	stopAndRestart := func(t *testing.T, env *relaytest.Env, start func() *relayProc, sig syscall.Signal, said string) {
		t.Helper()
		ctx := context.Background()
		p := start()
		waitLog(t, p, "reading binlog")
		p.Signal(t, sig)
		if code := p.Wait(t, 15*time.Second); code != 0 {
			t.Fatalf("exit %d after %s, want 0:\n%s", code, sig, relaytest.TailLines(p.Out.String(), 20))
		}
		if !p.Said(said, 5*time.Second) {
			t.Errorf("the relay did not say %q:\n%s", said, relaytest.TailLines(p.Out.String(), 20))
		}
		if n := env.Streams().Exists(ctx, posKey(env)+":lease").Val(); n != 0 {
			t.Errorf("the lease is still held after %s", sig)
		}
		began := time.Now()
		next := start()
		waitLog(t, next, "reading binlog")
		if took := time.Since(began); took > ttl/2 {
			t.Errorf("the next relay read after %s, want at once (the lease's TTL is %s)", took, ttl)
		}
		stopRelay(t, next)
	}
	t.Run("standalone", func(t *testing.T) {
		env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
		start := func() *relayProc { return startRelay(t, env, args...) }
		for _, tt := range []struct {
			sig  syscall.Signal
			said string
		}{{syscall.SIGHUP, "received hangup, stopping"}, {syscall.SIGINT, "received interrupt, stopping"}, {syscall.SIGTERM, "received terminated, stopping"}} {
			stopAndRestart(t, env, start, tt.sig, tt.said)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
		start := func() *relayProc { return startRelay(t, env, args...) }
		stopAndRestart(t, env, start, syscall.SIGHUP, "received hangup, stopping")
	})
}
