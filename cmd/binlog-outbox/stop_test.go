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
