package poller

import (
	"context"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

func TestPoller_Backlog(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	p := newPoller(t, env, nil)
	b, err := p.Backlog(ctx, env.DB)
	if err != nil || b.Unsent != 0 || b.OldestKnown {
		t.Fatalf("empty table: %+v, %v; want nothing unsent", b, err)
	}
	oldest := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	for i, at := range []time.Time{oldest, oldest.Add(time.Minute), oldest.Add(2 * time.Minute)} {
		if _, err := env.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES (?, 'order', 'a', 'e', '{}', ?)",
			relaytest.MessageID(), at.Format("2006-01-02 15:04:05.999999")); err != nil {
			t.Fatalf("insert row %d: %v", i, err)
		}
	}
	b, err = p.Backlog(ctx, env.DB)
	if err != nil || b.Unsent != 3 || b.Capped || !b.OldestKnown || !b.Oldest.Equal(oldest) {
		t.Fatalf("three unsent rows: %+v, %v; want 3, the oldest at %v", b, err, oldest)
	}
	if n, err := p.Step(ctx); err != nil || n != 3 {
		t.Fatalf("Step = %d, %v; want 3 rows relayed", n, err)
	}
	if s := p.Stats(); s.LastRelay.IsZero() || s.Retrying != "" {
		t.Errorf("stats after a round: %+v; want the round's time, no failure", s)
	}
	if b, err = p.Backlog(ctx, env.DB); err != nil || b.Unsent != 0 || b.OldestKnown {
		t.Errorf("all relayed: %+v, %v; want nothing unsent", b, err)
	}
}
