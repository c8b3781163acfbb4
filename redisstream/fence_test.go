package redisstream

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// clusterLeaseKey is the lease of the fence tests' position.
const clusterLeaseKey = "binlog-outbox:position:app.outbox:lease"

// leasedClusterSink takes a new lease for holder and returns a sink that
// appends with it.
func leasedClusterSink(t *testing.T, c redis.UniversalClient, cfg Config, holder string) (*Sink, *Lease) {
	t.Helper()
	l, err := NewLease(c, LeaseConfig{Key: clusterLeaseKey, Holder: holder, Cluster: true, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, _, err := l.TryAcquire(context.Background()); err != nil || !held {
		t.Fatalf("%s: TryAcquire = %v, %v; want the lease", holder, held, err)
	}
	cfg.Lease = l
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// entries counts the entries of streams.
func entries(t *testing.T, c redis.UniversalClient, streams ...string) int64 {
	t.Helper()
	var n int64
	for _, key := range streams {
		n += c.XLen(context.Background(), key).Val()
	}
	return n
}

// TestSink_ClusterLeaseFencesTheFormerHolder: relay A holds the lease and
// appends; its lease expires while it is paused and B takes it (a higher
// epoch) and fences the slots of A's intent, and only those. A, woken up
// with a batch in flight, is refused in a slot it wrote before, in a slot
// new to both, at the position key, and when the reply of its refused
// script is lost, writing nothing (a take whose reply is lost is found by
// its token); B appends from what A left. The fences are raise-only, a
// missing fence is raised by the holder's next script there, and an epoch
// counter that went back is raised and taken again higher.
func TestSink_ClusterLeaseFencesTheFormerHolder(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	c := rc.Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	const aggs = 8
	var streams []string
	batch := func(from uint64) []outbox.Event {
		var out []outbox.Event
		for a := range aggs {
			out = append(out, event(from+uint64(a), "order", strconv.Itoa(a)))
		}
		return out
	}
	for a := range aggs {
		streams = append(streams, "outbox:order:"+strconv.Itoa(a))
	}

	// Clients that reach every node through a proxy that can drop a reply.
	written := Slot("outbox:order:0")
	proxies := map[string]*testsvc.Proxy{}
	for _, addr := range rc.Addrs() {
		proxies[addr] = testsvc.StartProxy(t, addr)
	}
	proxyOf := func(slot int) *testsvc.Proxy {
		m, err := rc.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		return proxies[rc.Addrs()[m]]
	}
	// through returns a client whose connections go through the proxies;
	// go-redis runs a command again after a network error up to
	// maxRedirects times (-1: never, so that a lost reply reaches the sink).
	through := func(maxRedirects int) *redis.ClusterClient {
		cc := redisconn.NewClusterClientFromOptions(&redis.ClusterOptions{Addrs: rc.Addrs(), ClusterStateReloadInterval: time.Hour, MaxRedirects: maxRedirects,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if p, ok := proxies[addr]; ok {
					addr = p.Addr()
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}})
		t.Cleanup(func() { cc.Close() })
		// The slot map first, so that a reply dropped is a command's.
		if err := cc.Get(ctx, clusterLeaseKey).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return cc
	}
	if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return acquireScript.Load(ctx, n).Err() }); err != nil {
		t.Fatal(err)
	}
	leaseProxy := proxyOf(Slot(clusterLeaseKey))
	// A take whose reply is lost is found by its token, with the epoch
	// Redis gave it: in the run go-redis makes again (which finds the
	// lease there), or, when it does not run it again, at the next try.
	for _, redirects := range []int{0, -1} {
		l, err := NewLease(through(redirects), LeaseConfig{Key: clusterLeaseKey, Holder: "host-p/9", Cluster: true, TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		dropped := leaseProxy.Dropped()
		leaseProxy.DropNextReply()
		held, _, err := l.TryAcquire(ctx)
		if redirects < 0 {
			if held || err == nil {
				t.Fatalf("TryAcquire whose reply was lost, not run again = %v, %v; want an error", held, err)
			}
			held, _, err = l.TryAcquire(ctx)
		}
		if !held || err != nil || leaseProxy.Dropped() != dropped+1 {
			t.Fatalf("redirects %d: TryAcquire after a lost reply (%d dropped) = %v, %v; want the lease its first run took", redirects, leaseProxy.Dropped()-dropped, held, err)
		}
		if f, e := l.currentFence(); f == "" || e < 1 {
			t.Fatalf("redirects %d: after a lost reply the take has fence %q, epoch %d; want the stored one", redirects, f, e)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	ac := through(-1)
	a, aLease := leasedClusterSink(t, ac, cfg, "host-a/1")
	p0, p1, p2, p3, p4 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4), clusterPos(500, 5)
	if err := a.Append(ctx, nil, nil, p0); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, batch(1), p0, p1); err != nil {
		t.Fatal(err)
	}
	aFence, aEpoch := aLease.currentFence()
	if aEpoch < 1 {
		t.Fatalf("A's take has epoch %d, want one", aEpoch)
	}

	// A pauses past its TTL (its own clock still says it holds the lease):
	// the lease expires, B takes it and reads the positions.
	c.Del(ctx, clusterLeaseKey)
	b, bLease := leasedClusterSink(t, c, cfg, "host-b/2")
	at := time.Now()
	if got, err := b.Position(ctx); err != nil || string(got) != string(p1) {
		t.Fatalf("B.Position = %s, %v; want %s", got, err, p1)
	}
	t.Logf("fencing the intent's slots and reading the positions took %s", time.Since(at).Round(time.Millisecond))
	bFence, bEpoch := bLease.currentFence()
	if bEpoch <= aEpoch {
		t.Fatalf("B's epoch %d is not above A's %d", bEpoch, aEpoch)
	}
	for _, slot := range []int{written, Slot("outbox:order:7"), Slot(cfg.PositionKey)} {
		if got := c.Get(ctx, FenceKey(cfg.PositionKey, slot)).Val(); got != bFence {
			t.Errorf("fence of slot %d = %q, want B's %q", slot, got, bFence)
		}
	}
	for _, slot := range []int{0, ClusterSlots - 1} {
		if n := c.Exists(ctx, FenceKey(cfg.PositionKey, slot)).Val(); n != 0 {
			t.Errorf("slot %d, which no relay wrote, has a fence", slot)
		}
	}

	before := entries(t, c, streams...)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Errorf("%s: A's append = %v, want ErrLeaseLost", what, err)
		}
		if n := entries(t, c, append(streams, "outbox:order:new")...); n != before {
			t.Errorf("%s: the streams have %d entries, want %d: A wrote after B fenced", what, n, before)
		}
		if got := c.Get(ctx, SlotPositionKey(cfg.PositionKey, written)).Val(); got != string(p1) {
			t.Errorf("%s: slot %d position = %q, want %s", what, written, got, p1)
		}
		if got := c.Get(ctx, cfg.PositionKey).Val(); got != string(p1) {
			t.Errorf("%s: position = %q, want %s", what, got, p1)
		}
	}
	// A slot A wrote before, then a slot neither wrote, then the position
	// key alone (a batch of no events).
	refused("a slot A wrote", a.Append(ctx, batch(100), p1, p2))
	fresh := []outbox.Event{event(50, "order", "new")}
	if Slot("outbox:order:new") == written {
		t.Fatal("pick another aggregate: outbox:order:new shares slot with outbox:order:0")
	}
	refused("a slot new to both", a.Append(ctx, fresh, p1, p2))
	refused("the position key", a.Append(ctx, nil, p1, p2))
	// A's late fence write (of its own take) cannot lower B's.
	if res, err := fenceScript.Run(ctx, c, b.cluster.fenceKeys(written), aFence, aEpoch).Slice(); err != nil || res[0].(int64) != 0 {
		t.Errorf("fence with A's older epoch = %v, %v; want refused", res, err)
	}
	if got := c.Get(ctx, FenceKey(cfg.PositionKey, written)).Val(); got != bFence {
		t.Errorf("after A's late fence the fence is %q, want B's %q", got, bFence)
	}

	// B appends what A could not.
	if err := b.Append(ctx, batch(100), p1, p2); err != nil {
		t.Fatal(err)
	}
	before = entries(t, c, streams...)
	// The uncertain path: A's refused script there loses its reply (A's
	// client does not run it again), and the slot's position B moved tells
	// A nothing; its fence does.
	proxy := proxyOf(written)
	dropped := proxy.Dropped()
	proxy.DropNextReply()
	err := a.Append(ctx, []outbox.Event{event(300, "order", "0")}, p1, clusterPos(250, 9))
	if proxy.Dropped() == dropped {
		t.Errorf("no reply was dropped (err %v)", err)
	}
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("A's append whose reply was lost = %v, want ErrLeaseLost", err)
	}
	if n := entries(t, c, streams...); n != before {
		t.Errorf("after A's lost reply the streams have %d entries, want %d", n, before)
	}

	// A missing fence (its master lost it, or nobody wrote the slot yet)
	// is raised by the holder's next script there.
	c.Del(ctx, FenceKey(cfg.PositionKey, written))
	if err := b.Append(ctx, batch(200), p2, p3); err != nil {
		t.Fatalf("B's append over a missing fence = %v, want it appended", err)
	}
	if got := c.Get(ctx, FenceKey(cfg.PositionKey, written)).Val(); got != bFence {
		t.Errorf("after B's append the fence is %q, want B's %q", got, bFence)
	}
	if err := bLease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The epoch counter went back (its master lost the INCRs): the next
	// take's epoch is one the fences hold already. Its fencing is refused,
	// raises the counter, and the take after that fences every slot.
	c.Del(ctx, EpochKey(clusterLeaseKey))
	d, dLease := leasedClusterSink(t, c, cfg, "host-d/4")
	if _, low := dLease.currentFence(); low > bEpoch {
		t.Fatalf("after the counter went back D's epoch is %d, want at most B's %d", low, bEpoch)
	}
	if _, err := d.Position(ctx); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("D.Position with an epoch the fences hold = %v, want ErrLeaseLost", err)
	}
	if got, _ := c.Get(ctx, EpochKey(clusterLeaseKey)).Int64(); got < bEpoch {
		t.Errorf("the counter is %d after D's refusal, want raised to B's %d", got, bEpoch)
	}
	if err := dLease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e, eLease := leasedClusterSink(t, c, cfg, "host-e/5")
	if _, high := eLease.currentFence(); high <= bEpoch {
		t.Fatalf("E's epoch %d, want above B's %d", high, bEpoch)
	}
	if got, err := e.Position(ctx); err != nil || string(got) != string(p3) {
		t.Fatalf("E.Position = %s, %v; want %s", got, err, p3)
	}
	if err := e.Append(ctx, batch(300), p3, p4); err != nil {
		t.Fatal(err)
	}
	for key, n := range countStreams(t, c, aggs) {
		if n != 4 {
			t.Errorf("%s has %d entries, want 4 (one per batch)", key, n)
		}
	}
	if n := c.XLen(ctx, "outbox:order:new").Val(); n != 0 {
		t.Errorf("outbox:order:new has %d entries, want none (only A tried it)", n)
	}
}
