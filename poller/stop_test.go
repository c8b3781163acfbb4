package poller

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

func countUnsent(t testing.TB, env *relaytest.Env) int {
	t.Helper()
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM `" + env.Table + "` WHERE sent_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPoller_StopFinishesRoundInFlight stops Run exactly between the append
// and the COMMIT, the window where a cancelled round used to roll back and
// leave its appended rows to be appended again at the next start. The round
// must commit, and no round may start after the stop.
func TestPoller_StopFinishesRoundInFlight(t *testing.T) {
	env := newEnv(t)
	for i := 1; i <= 5; i++ {
		insertRow(t, env.DB, env.Table, fmt.Sprintf("m%d", i), "order", "a", `{"n":1}`)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := newPoller(t, env, nil)
	p.afterPublish = func(context.Context, *sql.Tx) error {
		// A row committed after the stop: no new round may take it.
		insertRow(t, env.DB, env.Table, "late", "order", "b", `{"n":2}`)
		stop()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() after a stop = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
	if n := countUnsent(t, env); n != 1 {
		t.Errorf("%d rows unsent after the stop, want 1 (the late row; the round in flight committed)", n)
	}
	if s := p.Stats(); s.Rounds != 1 || s.Events != 5 {
		t.Errorf("Stats() = %+v, want 1 round of 5 events", s)
	}
	// The next start appends the late row only.
	p2 := newPoller(t, env, nil)
	if n, err := p2.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("Step() after the restart = %d, %v; want 1, nil", n, err)
	}
	if got := relaytest.CountEntries(context.Background(), env.RDB, "outbox:"); got != 6 {
		t.Errorf("streams hold %d entries, want 6 (none twice)", got)
	}
}

// TestPoller_StopAbandonsRoundAfterGrace: a round that cannot finish within
// ShutdownGrace after the stop is abandoned (rolled back, its rows unsent),
// and Run returns instead of hanging.
func TestPoller_StopAbandonsRoundAfterGrace(t *testing.T) {
	env := newEnv(t)
	for i := 1; i <= 3; i++ {
		insertRow(t, env.DB, env.Table, fmt.Sprintf("m%d", i), "order", "a", `{"n":1}`)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := newPoller(t, env, func(c *Config) { c.ShutdownGrace = 300 * time.Millisecond })
	p.afterPublish = func(rctx context.Context, _ *sql.Tx) error {
		stop()
		// A database or Redis call that hangs until the grace runs out.
		<-rctx.Done()
		return rctx.Err()
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace")
	}
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Errorf("Run returned after %s, before the grace of 300ms", d)
	}
	relaytest.WaitFor(t, 5*time.Second, "the abandoned round's rollback", func() bool { return countUnsent(t, env) == 3 })
}
