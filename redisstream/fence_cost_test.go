package redisstream

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// commandCalls sums the calls of every command (INFO commandstats, which
// counts the commands scripts run too) over the cluster's masters, by
// command, leaving out those of the client itself (INFO, CLUSTER, COMMAND,
// PING).
func commandCalls(t *testing.T, c *redis.ClusterClient) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int64{}
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			name = strings.TrimPrefix(name, "cmdstat_")
			if name == "info" || strings.HasPrefix(name, "cluster") || strings.HasPrefix(name, "command") || name == "ping" {
				continue
			}
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				return err
			}
			out[name] += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// callsSince returns what calls more than before, in total and of the
// writing commands (SET, HSET, HSETNX, DEL, XADD).
func callsSince(before, after map[string]int64) (total, writes int64) {
	for name, n := range after {
		d := n - before[name]
		total += d
		switch name {
		case "set", "hset", "hsetnx", "del", "xadd":
			writes += d
		}
	}
	return total, writes
}

// countFences counts the fence keys of the position on every master.
func countFences(t *testing.T, c *redis.ClusterClient, positionKey string) int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, positionKey+":fence:*").Result()
		mu.Lock()
		n += len(keys)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSink_ClusterCostFollowsTheSlotsWritten: a relay without a lease
// starts, and a standby takes the lease over from a relay that wrote to a
// few dozen slots; the commands each sends (INFO commandstats of every
// master, the scripts' own commands counted) follow the slots written, not
// the cluster's 16384 slots, and so do the fence keys.
func TestSink_ClusterCostFollowsTheSlotsWritten(t *testing.T) {
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	const aggs = 40
	slots := map[int]bool{}
	for a := range aggs {
		slots[Slot("outbox:order:"+strconv.Itoa(a))] = true
	}
	written := int64(len(slots))
	// Per slot at most: a script (EVALSHA, or EVAL the first time on a
	// node), its GETs of the fence and the position, and the raise of the
	// fence; plus a few in the position key's slot.
	const perSlot, fixed = 8, 20
	p0, p1, p2, p3 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4)

	// Without a lease: the reads of a start.
	plain := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.plain", Cluster: true}
	s, err := New(c, plain)
	if err != nil {
		t.Fatal(err)
	}
	appendSteps(ctx, t, s, clusterStep{nil, nil, p0}, clusterStep{orderBatch(1, aggs), p0, p1}, clusterStep{orderBatch(100, aggs), p1, p2})
	restarted, err := New(c, plain)
	if err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, c)
	if got, err := restarted.Position(ctx); err != nil || string(got) != string(p2) {
		t.Fatalf("Position = %s, %v; want %s", got, err, p2)
	}
	total, writes := callsSince(before, commandCalls(t, c))
	t.Logf("a start after writing %d slots: %d commands, %d writes", written, total, writes)
	if total > perSlot*written+fixed || writes != 0 {
		t.Errorf("a start after writing %d slots ran %d commands (%d writes), want at most %d and no write", written, total, writes, perSlot*written+fixed)
	}

	// With a lease: the takeover.
	cfg := Config{Stream: plain.Stream, PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	a, _ := leasedClusterSink(t, c, cfg, "host-a/1")
	appendSteps(ctx, t, a, clusterStep{nil, nil, p0}, clusterStep{orderBatch(1, aggs), p0, p1}, clusterStep{orderBatch(100, aggs), p1, p2})
	c.Del(ctx, clusterLeaseKey) // A's lease expires
	b, _ := leasedClusterSink(t, c, cfg, "host-b/2")
	before = commandCalls(t, c)
	at := time.Now()
	if got, err := b.Position(ctx); err != nil || string(got) != string(p2) {
		t.Fatalf("B.Position = %s, %v; want %s", got, err, p2)
	}
	took := time.Since(at)
	total, writes = callsSince(before, commandCalls(t, c))
	t.Logf("a takeover after writing %d slots: %d commands, %d writes, %s", written, total, writes, took.Round(time.Millisecond))
	if total > perSlot*written+fixed || writes > written+1 {
		t.Errorf("a takeover after writing %d slots ran %d commands (%d writes), want at most %d (%d writes: a fence per slot written and one for the position key)", written, total, writes, perSlot*written+fixed, written+1)
	}
	if n := int64(countFences(t, c, cfg.PositionKey)); n > written+1 {
		t.Errorf("%d fence keys after the takeover, want at most %d", n, written+1)
	}
	// B's appends go on in the same slots: no intent to add, the
	// fences raised already; a batch costs what it cost before.
	before = commandCalls(t, c)
	if err := b.Append(ctx, orderBatch(200, aggs), p2, p3); err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(t, c)
	if d := calls["evalsha"] + calls["eval"] - before["evalsha"] - before["eval"]; d != written+1 {
		t.Errorf("B's batch over %d slots ran %d scripts, want one per slot and one for the position", written, d)
	}
	for key, n := range countStreams(t, c, aggs) {
		if n != 5 {
			t.Errorf("%s has %d entries, want 5 (two batches each under two position keys, one more)", key, n)
		}
	}
}

// TestSink_ClusterFormerHolderInASlotTheNewHolderDidNotWrite: relay A
// holds the lease, has appended to a few slots, and begins a batch that
// also writes two slots new to both relays: its intent names them, and it
// appends to one of them. Then it pauses past its lease; B takes over
// without writing anything. A, woken up, appends to the other new slot, and
// tries a batch in a third slot no intent named: both are refused and
// write nothing. B resumes: the slot A reached skips what it holds, and
// every stream has each event once.
func TestSink_ClusterFormerHolderInASlotTheNewHolderDidNotWrite(t *testing.T) {
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	const aggs = 4
	// Aggregates 4 and 5 are the new slots of batch 2, 6 the third one.
	used := map[int]bool{}
	for a := range aggs {
		used[Slot("outbox:order:"+strconv.Itoa(a))] = true
	}
	for a := aggs; a < aggs+3; a++ {
		slot := Slot("outbox:order:" + strconv.Itoa(a))
		if used[slot] {
			t.Fatalf("aggregate %d shares slot %d with another: pick other aggregates", a, slot)
		}
		used[slot] = true
	}
	reached, untouched := Slot("outbox:order:4"), Slot("outbox:order:5")
	p0, p1, p2, p3 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4)

	a, aLease := leasedClusterSink(t, c, cfg, "host-a/1")
	appendSteps(ctx, t, a, clusterStep{nil, nil, p0}, clusterStep{orderBatch(1, aggs), p0, p1})
	aFence, _ := aLease.currentFence()

	// A's batch 2, as Append runs it, up to its script in slot `reached`.
	second := orderBatch(100, aggs+2)
	groups := map[int]slotGroup{}
	for _, g := range a.cluster.groupBySlot(second) {
		groups[g.slot] = g
	}
	if err := a.cluster.addIntent(ctx, []int{reached, untouched}, aFence, p1); err != nil {
		t.Fatal(err)
	}
	if err := a.cluster.appendSlot(ctx, groups[reached], p1, p2, aFence); err != nil {
		t.Fatal(err)
	}

	// A pauses past its TTL; B takes the lease and reads, writing nothing
	// to the new slots.
	c.Del(ctx, clusterLeaseKey)
	b, _ := leasedClusterSink(t, c, cfg, "host-b/2")
	if got, err := b.Position(ctx); err != nil || string(got) != string(p1) {
		t.Fatalf("B.Position = %s, %v; want %s", got, err, p1)
	}
	if cuts := b.CutPoints(); len(cuts) != 1 {
		t.Fatalf("B's cut points = %v, want slot %d's position", cuts, reached)
	}

	// A wakes up: its script in the slot its intent named, and a batch of
	// its own in a slot no intent named, are refused.
	if err := a.cluster.appendSlot(ctx, groups[untouched], p1, p2, aFence); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("A's script in slot %d after B's take = %v, want ErrLeaseLost", untouched, err)
	}
	if err := a.Append(ctx, []outbox.Event{event(500, "order", "6")}, p1, p2); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("A's batch in a slot no intent named = %v, want ErrLeaseLost", err)
	}
	for _, key := range []string{"outbox:order:5", "outbox:order:6"} {
		if n := c.XLen(ctx, key).Val(); n != 0 {
			t.Errorf("%s has %d entries after A's refused writes, want none", key, n)
		}
	}

	// B appends batch 2 (cut at slot `reached`'s position) and batch 3.
	if err := b.Append(ctx, second, p1, p2); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, orderBatch(200, aggs+2), p2, p3); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for a := range aggs {
		want["outbox:order:"+strconv.Itoa(a)] = 3
	}
	want["outbox:order:4"], want["outbox:order:5"], want["outbox:order:6"] = 2, 2, 0
	for key, n := range want {
		if got := c.XLen(ctx, key).Val(); got != n {
			t.Errorf("%s has %d entries, want %d: each event once", key, got, n)
		}
	}
	if got := c.Get(ctx, cfg.PositionKey).Val(); got != string(p3) {
		t.Errorf("position = %q, want %s", got, p3)
	}
}

// TestSink_ClusterSlotTheIntentLost: a stop left a slot new to the relay
// past the position, and the master of the position key lost the intent
// that named it (asynchronous replication). The restarted relay does not
// know the slot; its script there, for a batch that ends elsewhere, finds
// the position, and asks for a new session (no mismatch, which would stop
// the relay) that reads the slot too: the slot skips what it holds, each
// event once. (A batch that ends where the slot's position is finds its
// own appends there, as after a lost reply, and goes on.)
func TestSink_ClusterSlotTheIntentLost(t *testing.T) {
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	const aggs = 3
	fresh := Slot("outbox:order:3")
	for a := range aggs {
		if Slot("outbox:order:"+strconv.Itoa(a)) == fresh {
			t.Fatalf("aggregate %d shares slot %d with aggregate 3: pick others", a, fresh)
		}
	}
	p0, p1, p2, p3 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4)
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendSteps(ctx, t, s, clusterStep{nil, nil, p0}, clusterStep{orderBatch(1, aggs), p0, p1})
	// Batch 2 reaches the new slot only, then the relay stops; the intent
	// that named the slot is lost.
	second := orderBatch(100, aggs+1)
	for _, g := range s.cluster.groupBySlot(second) {
		if g.slot != fresh {
			continue
		}
		if err := s.cluster.addIntent(ctx, []int{fresh}, "", p1); err != nil {
			t.Fatal(err)
		}
		if err := s.cluster.appendSlot(ctx, g, p1, p2, ""); err != nil {
			t.Fatal(err)
		}
	}
	c.Del(ctx, IntentKey(cfg.PositionKey))

	r, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Position(ctx); err != nil || string(got) != string(p1) || len(r.CutPoints()) != 0 {
		t.Fatalf("Position = %s, %v (cuts %v); want %s and no cut: the slot is unknown", got, err, r.CutPoints(), p1)
	}
	// The reader, not knowing of the cut, reads batches 2 and 3 as one.
	err = r.Append(ctx, append(orderBatch(100, aggs+1), orderBatch(200, aggs+1)...), p1, p3)
	var mismatch *outbox.PositionMismatchError
	if err == nil || errors.As(err, &mismatch) || errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Append over the unknown slot = %v, want an error that starts a new session", err)
	}
	// Cut where the unknown slot stands, and where the merged batch left
	// the slots it reached first.
	if got, err := r.Position(ctx); err != nil || string(got) != string(p1) || len(r.CutPoints()) != 2 {
		t.Fatalf("Position after = %s, %v (cuts %v); want %s and two cuts", got, err, r.CutPoints(), p1)
	}
	appendSteps(ctx, t, r, clusterStep{second, p1, p2}, clusterStep{orderBatch(200, aggs+1), p2, p3})
	for key, n := range countStreams(t, c, aggs+1) {
		want := int64(3)
		if key == "outbox:order:3" {
			want = 2
		}
		if n != want {
			t.Errorf("%s has %d entries, want %d", key, n, want)
		}
	}
	// The record names the slot now: a start reads it.
	if n := c.HExists(ctx, SlotRecordKey(cfg.PositionKey), strconv.Itoa(fresh)).Val(); !n {
		t.Errorf("the slot record lacks slot %d after the relay wrote there", fresh)
	}
}
