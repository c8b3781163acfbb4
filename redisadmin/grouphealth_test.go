package redisadmin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// healthOf reads the health of the groups of key, by group name.
func healthOf(t *testing.T, c redis.UniversalClient, key string, idle time.Duration) map[string]GroupHealth {
	t.Helper()
	gs, err := ReadGroupHealth(context.Background(), c, key, idle)
	if err != nil {
		t.Fatalf("ReadGroupHealth %s: %v", key, err)
	}
	out := map[string]GroupHealth{}
	for _, g := range gs {
		out[g.Name] = g
	}
	return out
}

// appendN appends n entries to key with ids first-0, first+1-0, ...
func appendN(t *testing.T, c *redis.Client, key string, first, n int) {
	t.Helper()
	pipe := c.Pipeline()
	for i := first; i < first+n; i++ {
		pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", i), Values: []string{"f", "v"}})
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// lagOf is XINFO GROUPS lag of group, -1 when Redis reports none.
func lagOf(t *testing.T, c *redis.Client, key, group string) int64 {
	t.Helper()
	gs, err := c.XInfoGroups(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g.Lag
		}
	}
	t.Fatalf("no group %s on %s", group, key)
	return 0
}

// TestReadGroupHealth_Undelivered: the entries not yet delivered are
// counted from ids where XINFO GROUPS lag is wrong (an undelivered entry
// trimmed, then the group read on: Redis 7.0 still counts it) or absent
// (an XDEL after the group's last delivered id), also across many pages
// from either end.
func TestReadGroupHealth_Undelivered(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c := r.Client(t, r.NewDB(t))
	ctx := context.Background()
	read := func(key, group string, n int64) {
		t.Helper()
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: n, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	group := func(key, name, id string) {
		t.Helper()
		if err := c.XGroupCreate(ctx, key, name, id).Err(); err != nil {
			t.Fatal(err)
		}
	}

	appendN(t, c, "trimmed", 1, 6)
	group("trimmed", "g", "0")
	read("trimmed", "g", 2)
	c.XTrimMaxLen(ctx, "trimmed", 2) // 3-0 and 4-0 go undelivered
	read("trimmed", "g", 1)          // 5-0
	if lag := lagOf(t, c, "trimmed", "g"); lag == 1 {
		t.Logf("XINFO GROUPS lag is right on this Redis: %d", lag)
	} else {
		t.Logf("XINFO GROUPS lag after a trim: %d, with 1 entry undelivered", lag)
	}

	appendN(t, c, "deleted", 1, 6)
	group("deleted", "g", "0")
	read("deleted", "g", 2)
	c.XDel(ctx, "deleted", "4-0")
	t.Logf("XINFO GROUPS lag after an XDEL: %d (-1: none), with 3 entries undelivered", lagOf(t, c, "deleted", "g"))

	// Past 2 pages each way: counted from the end up to the group's id.
	appendN(t, c, "long", 1, 2*countPage+500)
	group("long", "near-start", "10-0")
	group("long", "near-end", fmt.Sprintf("%d-0", 2*countPage+400))
	group("long", "middle", fmt.Sprintf("%d-0", countPage+250))
	group("long", "before", "0")
	group("long", "done", "$")
	c.XDel(ctx, "long", "5-0", fmt.Sprintf("%d-0", 2*countPage+450))

	for _, tt := range []struct {
		key, group string
		want       int64
	}{
		{"trimmed", "g", 1},
		{"deleted", "g", 3},
		{"long", "near-start", 2*countPage + 500 - 10 - 1},
		{"long", "near-end", 100 - 1},
		{"long", "middle", countPage + 250 - 1},
		{"long", "before", 2*countPage + 500 - 2},
		{"long", "done", 0},
	} {
		if got := healthOf(t, c, tt.key, time.Hour)[tt.group]; got.Undelivered != tt.want || got.Estimated {
			t.Errorf("%s group %s: %d undelivered (estimated %v), want %d counted", tt.key, tt.group, got.Undelivered, got.Estimated, tt.want)
		}
	}

	// Past maxCounted on both sides: an estimate within what was counted
	// (XINFO GROUPS has no lag here, after the XDEL past the group's id:
	// the upper bound).
	defer func(n int64) { maxCounted = n }(maxCounted)
	maxCounted = 2 * countPage
	const undelivered, stored = countPage + 250 - 1, 2*countPage + 500 - 2
	if got := healthOf(t, c, "long", time.Hour)["middle"]; !got.Estimated || got.Undelivered != stored-countPage {
		t.Errorf("long group middle, counting at most %d: %d undelivered (estimated %v), want the estimate %d (%d in fact)", maxCounted, got.Undelivered, got.Estimated, stored-countPage, undelivered)
	}
}

// TestReadGroupHealth_PendingIdleAndTrim: the oldest pending entry with
// its delivery count after claims, the consumers idle past the threshold,
// and which group holds back --trim acked: the one whose horizon is the
// stream's, not a group done with everything.
func TestReadGroupHealth_PendingIdleAndTrim(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c := r.Client(t, r.NewDB(t))
	ctx := context.Background()
	const key = "outbox:order"
	now := time.Now().UnixMilli()
	var ids []string
	for i := range 5 {
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", now-int64(5-i)*60_000), Values: []string{"f", "v"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, g := range []string{"billing", "audit"} {
		if err := c.XGroupCreate(ctx, key, g, "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// billing: c1 read two entries and acknowledged the second; c2 claimed
	// the first three times (a poison entry); then c1 read the rest.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{key, ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	c.XAck(ctx, key, "billing", ids[1])
	for range 3 {
		if err := c.XClaim(ctx, &redis.XClaimArgs{Stream: key, Group: "billing", Consumer: "c2", Messages: []string{ids[0]}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// audit read everything and acknowledged it: it holds nothing back.
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "a1", Streams: []string{key, ">"}, Count: 10, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages {
		c.XAck(ctx, key, "audit", m.ID)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{key, ">"}, Count: 10, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}

	h := healthOf(t, c, key, 200*time.Millisecond)
	b, a := h["billing"], h["audit"]
	if b.Consumers != 2 || b.Pending != 4 || b.Undelivered != 0 || b.Oldest == nil || b.Oldest.ID != ids[0] || b.Oldest.Consumer != "c2" || b.Oldest.Deliveries != 4 ||
		b.Oldest.Age < 5*time.Minute || b.Oldest.Age > 6*time.Minute {
		t.Errorf("billing: %+v, oldest %+v; want 2 consumers, 4 pending, none undelivered, the oldest %s at c2 delivered 4 times, 5 minutes old", b, b.Oldest, ids[0])
	}
	if _, ok := b.Idle["c2"]; len(b.Idle) != 1 || !ok {
		t.Errorf("billing idle consumers: %v, want c2 alone (c1 read a moment ago)", b.Idle)
	}
	if !b.HoldsBackTrim || b.Held != ids[0] || b.HeldAge < 5*time.Minute {
		t.Errorf("billing: holds back %v from %s (%s); want it to hold back trimming from %s", b.HoldsBackTrim, b.Held, b.HeldAge, ids[0])
	}
	if a.HoldsBackTrim || a.Pending != 0 || a.Oldest != nil || a.Undelivered != 0 || len(a.Idle) != 1 {
		t.Errorf("audit: %+v; want nothing pending or held back, its consumer idle", a)
	}

	// The trimmer stops where ReadGroupHealth says: at billing's oldest
	// pending entry. Acknowledged everywhere, nothing is held back.
	tr, err := redisstream.NewTrimmer(c, redisstream.TrimConfig{Glob: "outbox:*", Acked: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tr.Step(ctx); err != nil || st.Acked != 0 {
		t.Errorf("trim: %+v, %v; want nothing trimmed while billing holds %s", st, err, ids[0])
	}
	c.XAck(ctx, key, "billing", ids...)
	if b := healthOf(t, c, key, time.Hour)["billing"]; b.HoldsBackTrim || b.Pending != 0 || b.Oldest != nil {
		t.Errorf("billing, all acknowledged: %+v; want nothing held back", b)
	}
}

func TestStreamID_NextAndLess(t *testing.T) {
	for _, tt := range []struct{ id, next string }{
		{"0-0", "0-1"},
		{"1700000000000-5", "1700000000000-6"},
		{"5-18446744073709551615", "6-0"},
		{"18446744073709551615-18446744073709551615", "18446744073709551615-18446744073709551615"},
	} {
		id, ok := parseID(tt.id)
		if !ok {
			t.Fatalf("parseID(%q) failed", tt.id)
		}
		if got := id.next().String(); got != tt.next {
			t.Errorf("%s.next() = %s, want %s", tt.id, got, tt.next)
		}
		if n := id.next(); tt.id != tt.next && (!id.less(n) || n.less(id)) {
			t.Errorf("%s.less(%s) = %v, want true", tt.id, n, id.less(n))
		}
	}
	for _, bad := range []string{"", "5", "a-1", "1-b", "-1-0"} {
		if _, ok := parseID(bad); ok {
			t.Errorf("parseID(%q) accepted", bad)
		}
	}
	if a, _ := parseID("10-0"); !a.less(streamID{10, 1}) || !(streamID{9, 99}).less(a) || a.less(a) {
		t.Errorf("less orders by milliseconds, then sequence")
	}
}

// ackAfterGroups acknowledges entries of a group on another connection the
// moment XINFO GROUPS of the stream has been answered: the consumer that
// finishes its entries between ReadGroupHealth's reads.
type ackAfterGroups struct {
	other        *redis.Client
	key, group   string
	ids          []string
	acknowledged bool
}

func (h *ackAfterGroups) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ackAfterGroups) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *ackAfterGroups) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if _, ok := cmd.(*redis.XInfoGroupsCmd); ok && !h.acknowledged {
			h.acknowledged = true
			if aerr := h.other.XAck(ctx, h.key, h.group, h.ids...).Err(); aerr != nil {
				return aerr
			}
		}
		return err
	}
}

// TestReadGroupHealth_AcknowledgedMeanwhile: XINFO GROUPS counts pending
// entries that the consumer acknowledges before XPENDING reads the oldest:
// the health has no oldest pending entry then, and the trim horizon is the
// entry after the last delivered one (a relay's group metrics once
// panicked on it under load).
func TestReadGroupHealth_AcknowledgedMeanwhile(t *testing.T) {
	r := testsvc.SharedRedis(t)
	db := r.NewDB(t)
	c := r.Client(t, db)
	ctx := context.Background()
	const key, group = "outbox:order", "billing"
	appendN(t, c, key, 1, 4)
	if err := c.XGroupCreate(ctx, key, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{key, ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	reader := r.Client(t, db)
	hook := &ackAfterGroups{other: c, key: key, group: group, ids: []string{"1-0", "2-0"}}
	reader.AddHook(hook)

	h := healthOf(t, reader, key, time.Hour)[group]
	if !hook.acknowledged {
		t.Fatal("the hook never saw XINFO GROUPS")
	}
	if h.Pending != 2 || h.Oldest != nil {
		t.Errorf("pending %d, oldest %+v; want XINFO GROUPS's 2 and no oldest entry", h.Pending, h.Oldest)
	}
	if h.Undelivered != 2 || !h.HoldsBackTrim || h.Held != "3-0" {
		t.Errorf("undelivered %d, holds back trim %v at %q; want 2, true, 3-0", h.Undelivered, h.HoldsBackTrim, h.Held)
	}
}
