package redisstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

const testLeaseKey = "binlog-outbox:test:position:lease"

func newLease(t *testing.T, c redis.UniversalClient, holder string, ttl time.Duration) *Lease {
	t.Helper()
	l, err := NewLease(c, LeaseConfig{Key: testLeaseKey, TTL: ttl, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLease_OneHolderAtATime(t *testing.T) {
	r := testsvc.SharedRedis(t)
	_, c := newSink(t, r.NewDB(t), Config{})
	ctx := context.Background()
	a, b := newLease(t, c, "host-a/1", 5*time.Second), newLease(t, c, "host-b/2", 5*time.Second)

	held, holder, err := a.TryAcquire(ctx)
	if err != nil || !held || !strings.HasPrefix(holder, "host-a/1/") {
		t.Fatalf("a.TryAcquire = %v, %q, %v; want held by host-a/1/<token>", held, holder, err)
	}
	held, bHolder, err := b.TryAcquire(ctx)
	if err != nil || held || bHolder != holder {
		t.Fatalf("b.TryAcquire while a holds it = %v, %q, %v; want not held, holder %q", held, bHolder, err, holder)
	}
	if held, err := a.Renew(ctx); !held || err != nil {
		t.Errorf("a.Renew = %v, %v; want held", held, err)
	}
	if held, err := b.Renew(ctx); held || err != nil {
		t.Errorf("b.Renew of a lease it never held = %v, %v; want not held", held, err)
	}
	info, ttl, ok, err := ReadLease(ctx, c, testLeaseKey)
	if err != nil || !ok || info.String() != holder || ttl <= 0 || ttl > 5*time.Second {
		t.Errorf("ReadLease = %+v, %s, %v, %v; want %s with up to 5s left", info, ttl, ok, err, holder)
	}
	// b releasing leaves a's lease alone.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := a.Renew(ctx); !held || err != nil {
		t.Errorf("a.Renew after b released = %v, %v; want held", held, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := ReadLease(ctx, c, testLeaseKey); ok || err != nil {
		t.Errorf("after a released: ReadLease ok %v, err %v; want none held", ok, err)
	}
	held, holder2, err := b.TryAcquire(ctx)
	if err != nil || !held || !strings.HasPrefix(holder2, "host-b/2/") {
		t.Fatalf("b.TryAcquire after a released = %v, %q, %v; want held", held, holder2, err)
	}
	// a takes it again later with a new token: its old one is no use.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, again, _ := a.TryAcquire(ctx); again == holder {
		t.Errorf("a took the lease again with the same token %q", again)
	}
}

func TestLease_RenewAfterExpiryIsLost(t *testing.T) {
	r := testsvc.SharedRedis(t)
	_, c := newSink(t, r.NewDB(t), Config{})
	ctx := context.Background()
	a, b := newLease(t, c, "host-a/1", 150*time.Millisecond), newLease(t, c, "host-b/2", 5*time.Second)
	if held, _, err := a.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("a.TryAcquire = %v, %v", held, err)
	}
	time.Sleep(300 * time.Millisecond) // a paused past its TTL
	if held, _, err := b.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("b.TryAcquire after a's lease expired = %v, %v", held, err)
	}
	if held, err := a.Renew(ctx); held || err != nil {
		t.Errorf("a.Renew of a lease b took = %v, %v; want lost", held, err)
	}
	if a.Value() != "" {
		t.Errorf("a.Value() after the loss = %q, want none", a.Value())
	}
	if held, err := b.Renew(ctx); !held || err != nil {
		t.Errorf("b.Renew = %v, %v; a's renewal must not have touched b's lease", held, err)
	}
}

// TestSink_AppendWithStaleLeaseWritesNothing is the paused former leader:
// its lease expired and another relay took it; its script, sent with the
// token it still has, writes nothing and says the lease is lost, not that
// it was fenced.
func TestSink_AppendWithStaleLeaseWritesNothing(t *testing.T) {
	r := testsvc.SharedRedis(t)
	url := r.NewDB(t)
	_, c := newSink(t, url, Config{})
	ctx := context.Background()
	a, b := newLease(t, c, "host-a/1", 150*time.Millisecond), newLease(t, c, "host-b/2", 5*time.Second)
	sa, _ := newSink(t, url, Config{Lease: a})
	sb, _ := newSink(t, url, Config{Lease: b})

	if err := sa.Append(ctx, []outbox.Event{event(1, "order", "o-1")}, nil, []byte("p1")); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("append before taking the lease: %v, want ErrLeaseLost", err)
	}
	if held, _, err := a.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("a.TryAcquire = %v, %v", held, err)
	}
	if err := sa.Append(ctx, []outbox.Event{event(1, "order", "o-1")}, nil, []byte("p1")); err != nil {
		t.Fatalf("append holding the lease: %v", err)
	}
	stale := a.Value()
	time.Sleep(300 * time.Millisecond)
	if held, _, err := b.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("b.TryAcquire = %v, %v", held, err)
	}
	if err := sb.Append(ctx, []outbox.Event{event(2, "order", "o-1")}, []byte("p1"), []byte("p2")); err != nil {
		t.Fatalf("b appends: %v", err)
	}
	// a woke up and appends what it had read, with the position it knew
	// and with the position b stored: both refused for the lease.
	for _, prev := range []string{"p1", "p2"} {
		if a.Value() == "" {
			a.hold(stale, time.Now()) // what a paused process still believes
		}
		err := sa.Append(ctx, []outbox.Event{event(2, "order", "o-1"), event(3, "invoice", "i-1")}, []byte(prev), []byte("p3"))
		if !errors.Is(err, outbox.ErrLeaseLost) || errors.Is(err, outbox.ErrFenced) || !strings.Contains(err.Error(), "host-b/2/") {
			t.Errorf("stale append from %s: %v, want ErrLeaseLost naming host-b/2", prev, err)
		}
		var mm *outbox.PositionMismatchError
		if errors.As(err, &mm) {
			t.Errorf("stale append from %s: %v is a position mismatch; the lease must be checked first", prev, err)
		}
		if a.Value() != "" {
			t.Errorf("a.Value() after a refused append = %q, want none", a.Value())
		}
	}
	if n := c.XLen(ctx, "outbox:order").Val(); n != 2 {
		t.Errorf("outbox:order has %d entries, want 2 (1 from a, 2 from b)", n)
	}
	if n := c.Exists(ctx, "outbox:invoice").Val(); n != 0 {
		t.Errorf("the refused script created outbox:invoice")
	}
	if pos, _ := sb.Position(ctx); string(pos) != "p2" {
		t.Errorf("position = %q, want p2 (b's)", pos)
	}
	// The poll mode's script takes no lease.
	if _, err := sa.Publish(ctx, []outbox.Event{event(4, "order", "o-2")}); err != nil {
		t.Errorf("Publish with a lost lease: %v; poll mode takes no lease", err)
	}
}
