package poller

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// probeFinds runs p's probe statement and reports whether it returned the
// tag, which it does when the table holds an unsent row.
func probeFinds(t *testing.T, p *Poller, db *sql.DB) bool {
	t.Helper()
	var tag int
	err := db.QueryRow(p.ProbeQuery(7)).Scan(&tag)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false
	case err != nil:
		t.Fatalf("probe: %v", err)
	}
	if tag != 7 {
		t.Fatalf("probe returned %d, want the tag 7", tag)
	}
	return true
}

// With Config.Wake, an idle poller runs no rounds of its own: a row waits
// until a value on Wake (a relay of many tables sends one when its probe
// finds an unsent row), then it is relayed and the probe finds none.
func TestPoller_WakeParksIdleRounds(t *testing.T) {
	env := newEnv(t)
	wake := make(chan struct{}, 1)
	p := newPoller(t, env, func(c *Config) { c.Wake = wake })
	if probeFinds(t, p, env.DB) {
		t.Fatal("the probe finds an unsent row in an empty table")
	}
	stop := sync.OnceValue(start(p))
	defer stop()
	// Its first round, then parked.
	time.Sleep(200 * time.Millisecond)
	insertRow(t, env.DB, env.Table, "m1", "order", "a", `{"n":1}`)
	if !probeFinds(t, p, env.DB) {
		t.Fatal("the probe does not find the unsent row")
	}
	// Six poll intervals without a wake: the row stays unsent.
	time.Sleep(300 * time.Millisecond)
	if n := countUnsent(t, env); n != 1 {
		t.Fatalf("%d rows unsent before the wake, want 1: a parked poller polled", n)
	}
	wake <- struct{}{}
	relaytest.WaitFor(t, 5*time.Second, "the row relayed after the wake", func() bool {
		return relaytest.CountEntries(context.Background(), env.RDB, "outbox:") == 1
	})
	relaytest.WaitFor(t, 5*time.Second, "the row marked", func() bool { return countUnsent(t, env) == 0 })
	if probeFinds(t, p, env.DB) {
		t.Error("the probe finds an unsent row after the relay")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
}
