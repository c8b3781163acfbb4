package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
		{"123456789", 12739},
		{"foo", 12182},
		{"{user1000}.following", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")},
		{"foo{{bar}}zap", Slot("{bar")},
	}
	for _, tt := range tests {
		if got := Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

// Every slot has a tag, and the slot position key of each lies in its slot.
func TestSlotPositionKey_InItsSlot(t *testing.T) {
	longest := ""
	for slot := range ClusterSlots {
		tag := SlotTag(slot)
		if tag == "" {
			t.Fatalf("slot %d has no tag", slot)
		}
		if len(tag) > len(longest) {
			longest = tag
		}
		if got := Slot(SlotPositionKey("binlog-outbox:position:app.outbox", slot)); got != slot {
			t.Fatalf("SlotPositionKey(_, %d) is in slot %d", slot, got)
		}
	}
	if len(longest) > 4 {
		t.Errorf("longest tag %q, want at most 4 characters", longest)
	}
}

// Redis itself puts the keys where Slot says.
func TestSlot_AsTheClusterHashes(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	for _, key := range []string{"outbox:order", "outbox:invoice:7", "binlog-outbox:position:db.t:{" + SlotTag(42) + "}", "x{ab}y", "{}z"} {
		want, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// clusterPos is a stored position at offset pos of one binlog file.
func clusterPos(pos uint32, seq uint64) []byte {
	return position.Binlog{Flavor: position.FlavorMariaDB, ServerID: 1, File: "b.000001", Pos: pos, Writer: "test", Seq: seq}.Encode()
}

// countStreams returns the number of entries of each aggregate's stream.
func countStreams(t *testing.T, c *redis.ClusterClient, aggs int) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for a := range aggs {
		key := fmt.Sprintf("outbox:order:%d", a)
		n, err := c.XLen(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[key] = n
	}
	return out
}

// orderBatch is one event of each of aggs order aggregates, with ids from
// from on: their streams spread over the slots.
func orderBatch(from uint64, aggs int) []outbox.Event {
	var out []outbox.Event
	for a := range aggs {
		out = append(out, event(from+uint64(a), "order", strconv.Itoa(a)))
	}
	return out
}

// clusterStep is one Append of a test: its events, from prev to next.
type clusterStep struct {
	events     []outbox.Event
	prev, next []byte
}

// appendSteps runs each step's Append on s, failing the test at the first
// error.
func appendSteps(ctx context.Context, t *testing.T, s *Sink, steps ...clusterStep) {
	t.Helper()
	for _, step := range steps {
		if err := s.Append(ctx, step.events, step.prev, step.next); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch over many slots: each slot's group is appended with its own
// position; a relay that stopped after some of a batch's scripts resumes
// from the position key, and the slots that ran skip that batch.
func TestSink_ClusterSlotsSkipWhatTheyHold(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	batch := orderBatch
	const aggs = 12
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1, p2, p3 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4)
	if err := s.Append(ctx, nil, nil, p0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, batch(1, aggs), p0, p1); err != nil {
		t.Fatal(err)
	}
	slots := map[int]bool{}
	for a := range aggs {
		slots[Slot(fmt.Sprintf("outbox:order:%d", a))] = true
	}
	for slot := range slots {
		if got, _ := c.Get(ctx, SlotPositionKey(cfg.PositionKey, slot)).Bytes(); string(got) != string(p1) {
			t.Fatalf("slot %d position = %s, want %s", slot, got, p1)
		}
	}
	// The stop: the next batch reached the first slot only.
	second := batch(100, aggs)
	first := Slot("outbox:order:0")
	var part []outbox.Event
	for _, e := range second {
		if Slot("outbox:order:"+e.AggregateID) == first {
			part = append(part, e)
		}
	}
	sc := s.cluster.script
	sc.build(part, SlotPositionKey(cfg.PositionKey, first), p1, p2, "")
	if err := appendScript.Run(ctx, c, sc.keys, sc.args...).Err(); err != nil {
		t.Fatal(err)
	}

	// A new process: the position key still says p1, slot `first` p2.
	s2, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Position(ctx)
	if err != nil || string(got) != string(p1) {
		t.Fatalf("Position = %s, %v; want %s", got, err, p1)
	}
	at2, err := decodePoint(p2)
	if err != nil {
		t.Fatal(err)
	}
	if cuts := s2.CutPoints(); len(cuts) != 1 || cuts[0].String() != at2.String() {
		t.Fatalf("CutPoints = %v, want [%s]", cuts, at2)
	}
	if err := s2.Append(ctx, second, p1, p2); err != nil {
		t.Fatal(err)
	}
	if err := s2.Append(ctx, batch(200, aggs), p2, p3); err != nil {
		t.Fatal(err)
	}
	for key, n := range countStreams(t, c, aggs) {
		if n != 3 {
			t.Errorf("%s has %d entries, want 3 (one per batch)", key, n)
		}
	}
	if got, _ := c.Get(ctx, cfg.PositionKey).Bytes(); string(got) != string(p3) {
		t.Errorf("position = %s, want %s", got, p3)
	}

	// Another writer of a slot's position fences the relay.
	if err := c.Set(ctx, SlotPositionKey(cfg.PositionKey, first), clusterPos(999, 1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	var mismatch *outbox.PositionMismatchError
	if err := s2.Append(ctx, batch(300, aggs), p3, clusterPos(500, 5)); !errors.As(err, &mismatch) || string(mismatch.Stored) != string(clusterPos(999, 1)) {
		t.Fatalf("Append over a slot another relay wrote = %v, want a mismatch naming its position", err)
	}
}

// A cluster sink refuses a lease without epochs, and a position key with a
// hash tag.
func TestNew_ClusterRefusesALeaseWithoutEpochs(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c, err := redisconn.NewClient(r.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := NewLease(c, LeaseConfig{Key: "k:lease"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{
		{PositionKey: "k", Cluster: true, Lease: lease},
		{PositionKey: "k:{x}", Cluster: true},
	} {
		if _, err := New(c, cfg); !errors.Is(err, outbox.ErrConfig) {
			t.Errorf("New(%+v) = %v, want a configuration error", cfg, err)
		}
	}
}

// A slot whose master lost this relay's last writes (a failover with
// asynchronous replication: its position and entries rolled back together)
// refuses the next append as a rollback; Position then resumes from that
// slot's position, the other slots skip what they hold, and the lost
// entries are appended again, once.
func TestSink_ClusterSlotRolledBack(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	const aggs = 12
	batch := func(from uint64) []outbox.Event { return orderBatch(from, aggs) }
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1, p2, p3 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3), clusterPos(400, 4)
	appendSteps(ctx, t, s, clusterStep{nil, nil, p0}, clusterStep{batch(1), p0, p1}, clusterStep{batch(100), p1, p2})
	// The rollback: slot `lost` holds p1 again, its streams lack batch 2.
	lost := Slot("outbox:order:0")
	for a := range aggs {
		key := "outbox:order:" + strconv.Itoa(a)
		if Slot(key) != lost {
			continue
		}
		last, err := c.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			t.Fatalf("XREVRANGE %s: %v %v", key, last, err)
		}
		c.XDel(ctx, key, last[0].ID)
	}
	c.Set(ctx, SlotPositionKey(cfg.PositionKey, lost), p1, 0)

	var mismatch *outbox.PositionMismatchError
	if err := s.Append(ctx, batch(200), p2, p3); !errors.As(err, &mismatch) || string(mismatch.Stored) != string(p1) {
		t.Fatalf("Append over the rolled-back slot = %v, want a mismatch with its position %s", err, p1)
	}
	got, err := s.Position(ctx)
	if err != nil || string(got) != string(p1) {
		t.Fatalf("Position after the rollback = %s, %v; want the slot's %s", got, err, p1)
	}
	// The reader reads again from p1, in the batches it cuts at p2.
	if err := s.Append(ctx, batch(100), p1, p2); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, batch(200), p2, p3); err != nil {
		t.Fatal(err)
	}
	for key, n := range countStreams(t, c, aggs) {
		if n != 3 {
			t.Errorf("%s has %d entries, want 3 (one per batch)", key, n)
		}
	}

	// A slot that lost everything this process wrote there, its first
	// script among them (a master restarted empty, or a replica that never
	// synced took over): it held no position before that first write, so
	// Position resumes from before it, and the lost entries come back once.
	for a := range aggs {
		if key := "outbox:order:" + strconv.Itoa(a); Slot(key) == lost {
			c.Del(ctx, key)
		}
	}
	c.Del(ctx, SlotPositionKey(cfg.PositionKey, lost))
	if got, err := s.Position(ctx); err != nil || string(got) != string(p0) {
		t.Fatalf("Position after the slot lost its first writes = %s, %v; want %s, before its first write", got, err, p0)
	}
	if stored, _ := c.Get(ctx, cfg.PositionKey).Bytes(); string(stored) != string(p0) {
		t.Errorf("position key %s after the slot lost its first writes; want it lowered to %s", stored, p0)
	}
	appendSteps(ctx, t, s, clusterStep{batch(1), p0, p1}, clusterStep{batch(100), p1, p2}, clusterStep{batch(200), p2, p3})
	for key, n := range countStreams(t, c, aggs) {
		if n != 3 {
			t.Errorf("%s has %d entries after the slot's first writes came back, want 3", key, n)
		}
	}

	// A slot that held a position before this process wrote there and lost
	// it lost more than this process can append again: it stops and says so.
	s2, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Position(ctx); err != nil {
		t.Fatal(err)
	}
	p4 := clusterPos(500, 5)
	if err := s2.Append(ctx, batch(300), p3, p4); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, SlotPositionKey(cfg.PositionKey, lost))
	if _, err := s2.Position(ctx); !errors.Is(err, outbox.ErrFenced) || outbox.HintOf(err) == "" {
		t.Errorf("Position after a slot's older position vanished = %v, want ErrFenced with a hint", err)
	}
}

// The relay's ACL (ACLRules) with what go-redis's cluster client reads
// (ClusterACLRules) is enough for the lease, appends and positions on a
// cluster.
func TestSink_ClusterWithTheRelaysACL(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	admin := rc.Client(t)
	ctx := context.Background()
	rules := strings.Fields("reset on >pw " + redisconn.ACLRules + " " + redisconn.ClusterACLRules)
	args := append([]any{"ACL", "SETUSER", "relay"}, toAny(rules)...)
	for _, addr := range rc.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.Do(ctx, args...).Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := redisconn.NewClusterClientFromOptions(&redis.ClusterOptions{Addrs: rc.Addrs(), Username: "relay", Password: "pw"})
	defer c.Close()
	// With the lease: its take counts epochs (INCR), and every slot is
	// fenced before the positions are read.
	// Nothing renews the lease here: its TTL outlasts a loaded machine's run.
	lease, err := NewLease(c, LeaseConfig{Key: "binlog-outbox:position:app.outbox:lease", Cluster: true, TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if held, _, err := lease.TryAcquire(ctx); err != nil || !held {
		t.Fatalf("take the lease as the relay's ACL user: %v, %v", held, err)
	}
	s, err := New(c, Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := clusterPos(100, 1), clusterPos(200, 2)
	if err := s.Append(ctx, nil, nil, p0); err != nil {
		t.Fatal(err)
	}
	var events []outbox.Event
	for a := range 8 {
		events = append(events, event(uint64(a+1), "order", strconv.Itoa(a)))
	}
	if err := s.Append(ctx, events, p0, p1); err != nil {
		t.Fatalf("append as the relay's ACL user: %v", err)
	}
	if got, err := s.Position(ctx); err != nil || string(got) != string(p1) {
		t.Fatalf("Position as the relay's ACL user = %s, %v", got, err)
	}
	if n := admin.XLen(ctx, "outbox:order:0").Val(); n != 1 {
		t.Errorf("outbox:order:0 has %d entries, want 1", n)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// A slot that lost writes is found by a relay started after the loss too,
// from the slot record beside the position key (SlotRecordKey), although
// the position key itself kept everything: the restarted sink resumes from
// the slot's older position, or from before its first script when it holds
// none, and the lost entries come back once. Deleting the slot positions
// (position set and reset) deletes the record first.
func TestSink_ClusterSlotRecordAfterRestart(t *testing.T) {
	// Its Redis Cluster is its own.
	t.Parallel()
	c := testsvc.StartRedisCluster(t).Client(t)
	ctx := context.Background()
	cfg := Config{Stream: "outbox:{aggregate_type}:{aggregate_id}", PositionKey: "binlog-outbox:position:app.outbox", Cluster: true}
	const aggs = 12
	batch := func(from uint64) []outbox.Event { return orderBatch(from, aggs) }
	p0, p1, p2 := clusterPos(100, 1), clusterPos(200, 2), clusterPos(300, 3)
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendSteps(ctx, t, s, clusterStep{nil, nil, p0}, clusterStep{batch(1), p0, p1}, clusterStep{batch(100), p1, p2})
	posSlot := Slot(cfg.PositionKey)
	// Two slots away from the position key's: one rolled back to p1, one
	// that lost everything, its first script included.
	var back, gone int = -1, -1
	for a := range aggs {
		slot := Slot("outbox:order:" + strconv.Itoa(a))
		switch {
		case slot == posSlot || slot == back || slot == gone:
		case back < 0:
			back = slot
		case gone < 0:
			gone = slot
		}
	}
	for a := range aggs {
		key := "outbox:order:" + strconv.Itoa(a)
		switch Slot(key) {
		case back:
			last, err := c.XRevRangeN(ctx, key, "+", "-", 1).Result()
			if err != nil || len(last) != 1 {
				t.Fatalf("XREVRANGE %s: %v %v", key, last, err)
			}
			c.XDel(ctx, key, last[0].ID)
		case gone:
			c.Del(ctx, key)
		}
	}
	c.Set(ctx, SlotPositionKey(cfg.PositionKey, back), p1, 0)
	c.Del(ctx, SlotPositionKey(cfg.PositionKey, gone))

	// A new process: it knows only what Redis holds.
	s2, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Position(ctx)
	if err != nil || string(got) != string(p0) {
		t.Fatalf("Position of a new sink after the losses = %s, %v; want %s, before the gone slot's first script", got, err, p0)
	}
	appendSteps(ctx, t, s2, clusterStep{batch(1), p0, p1}, clusterStep{batch(100), p1, p2})
	for key, n := range countStreams(t, c, aggs) {
		if n != 2 {
			t.Errorf("%s has %d entries, want 2 (one per batch)", key, n)
		}
	}
	if n, err := DeleteSlotPositions(ctx, c, cfg.PositionKey); err != nil || n == 0 {
		t.Fatalf("DeleteSlotPositions = %d, %v", n, err)
	}
	if n := c.Exists(ctx, SlotRecordKey(cfg.PositionKey)).Val(); n != 0 {
		t.Error("the slot record outlived the slot positions it describes")
	}
}
