package relaytest

import (
	"context"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
)

// StartFunc starts a relay for env in the background. The returned stop
// function shuts it down cleanly and returns what the relay returned.
type StartFunc func(t *testing.T, env *Env) (stop func() error)

// Guarantees parameterise the suite by what a mode promises.
type Guarantees struct {
	ExactlyOnce bool
}

// RunSuite runs the conformance suite against a relay mode.
func RunSuite(t *testing.T, start StartFunc, g Guarantees) {
	check := CheckOptions{ExactlyOnce: g.ExactlyOnce}
	newEnv := func(t *testing.T) *Env {
		return NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	}

	t.Run("ConcurrentProducersWithRollbacks", func(t *testing.T) {
		env := newEnv(t)
		ctx := context.Background()
		stop := start(t, env)
		rec := NewProduced()
		Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 6, Transactions: 60}, rec)
		WaitDelivered(t, env, rec, 60*time.Second)
		if err := stop(); err != nil {
			t.Fatalf("relay returned %v after a clean stop", err)
		}
		Check(ctx, t, env.RDB, rec, check)
	})

	t.Run("ResumeAfterRestart", func(t *testing.T) {
		env := newEnv(t)
		ctx := context.Background()
		rec := NewProduced()
		stop := start(t, env)
		Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 3, Transactions: 30}, rec)
		WaitDelivered(t, env, rec, 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		// Written while no relay runs: the next one must pick them up.
		Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 3, Transactions: 30}, rec)
		stop = start(t, env)
		WaitDelivered(t, env, rec, 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		Check(ctx, t, env.RDB, rec, check)
	})

	t.Run("StopIsPromptAndClean", func(t *testing.T) {
		env := newEnv(t)
		stop := start(t, env)
		time.Sleep(200 * time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- stop() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("stop returned %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("relay did not stop within 10s")
		}
	})
}

// WaitDelivered waits until the streams hold at least as many entries as
// events were committed (Check then tells whether they are the right ones).
func WaitDelivered(t testing.TB, env *Env, rec *Produced, timeout time.Duration) {
	t.Helper()
	rec.mu.Lock()
	want := len(rec.Committed)
	rec.mu.Unlock()
	WaitFor(t, timeout, "all committed events in the streams", func() bool {
		return CountEntries(context.Background(), env.RDB, "outbox:") >= want
	})
}
