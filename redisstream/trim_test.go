package redisstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// addEntries appends n entries with ids 1-0 .. n-0 to key.
func addEntries(t *testing.T, c *redis.Client, key string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", i), Values: []string{"n", fmt.Sprint(i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// deliver reads n entries for group and acknowledges those in ack.
func deliver(t *testing.T, c *redis.Client, key, group string, n int, ack ...int) {
	t.Helper()
	ctx := context.Background()
	if n > 0 {
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: int64(n), Block: -1}).Err(); err != nil {
			t.Fatalf("XREADGROUP %s: %v", group, err)
		}
	}
	for _, i := range ack {
		if err := c.XAck(ctx, key, group, fmt.Sprintf("%d-0", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// unacked returns the ids of key some group has not acknowledged: its
// pending entries and those after its last-delivered-id.
func unacked(t *testing.T, c *redis.Client, key string, total int) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := map[string]bool{}
	groups, err := c.XInfoGroups(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		pend, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: g.Name, Start: "-", End: "+", Count: 100000}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pend {
			out[p.ID] = true
		}
		var last int
		fmt.Sscanf(g.LastDeliveredID, "%d-", &last)
		for i := last + 1; i <= total; i++ {
			out[fmt.Sprintf("%d-0", i)] = true
		}
	}
	return out
}

func streamIDs(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func TestTrimmer_StepKeepsEveryUnacknowledgedEntry(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c := r.Client(t, r.NewDB(t))
	ctx := context.Background()
	const key, total = "outbox:order", 10
	addEntries(t, c, key, 1, total)
	addEntries(t, c, "outbox:nobody", 1, 5) // no group: never trimmed
	for _, g := range []string{"half", "pending", "none"} {
		if err := c.XGroupCreate(ctx, key, g, "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	deliver(t, c, key, "half", 5, 1, 2, 3, 4, 5) // acked half
	deliver(t, c, key, "pending", 8, 1, 2, 3, 5) // 4, 6, 7, 8 pending
	var logs relaytest.Logs
	tr, err := NewTrimmer(c, TrimConfig{Glob: "outbox:*", Exclude: []string{DefaultDeadLetterStream}, Acked: true}, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name  string
		act   func()
		first string // the oldest entry left: every group's horizon
	}{
		{"one group acked nothing", func() {}, "1-0"},
		{"it catches up", func() { deliver(t, c, key, "none", total, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10) }, "4-0"},
		{"the oldest pending is acked", func() { deliver(t, c, key, "pending", 0, 4) }, "6-0"},
		{"all pending acked", func() { deliver(t, c, key, "pending", 0, 6, 7, 8) }, "6-0"}, // half read up to 5
		{"all read and acked", func() {
			deliver(t, c, key, "half", total, 6, 7, 8, 9, 10)
			deliver(t, c, key, "pending", total, 9, 10)
		}, ""},
	}
	for _, s := range steps {
		s.act()
		keep := unacked(t, c, key, total)
		if _, err := tr.Step(ctx); err != nil {
			t.Fatalf("%s: Step: %v", s.name, err)
		}
		ids := streamIDs(t, c, key)
		left := map[string]bool{}
		for _, id := range ids {
			left[id] = true
		}
		for id := range keep {
			if !left[id] {
				t.Errorf("%s: entry %s trimmed although a group has not acknowledged it", s.name, id)
			}
		}
		first := ""
		if len(ids) > 0 {
			first = ids[0]
		}
		if first != s.first {
			t.Errorf("%s: oldest entry left %q, want %q (entries %v)", s.name, first, s.first, ids)
		}
	}
	if n := c.XLen(ctx, "outbox:nobody").Val(); n != 5 {
		t.Errorf("stream without group has %d entries, want 5", n)
	}
	if n := len(logs.Lines("INFO")); n != 1 {
		t.Errorf("%d INFO lines, want one saying outbox:nobody has no group:\n%s", n, logs.String())
	}
}

func TestTrimmer_MaxLenCutsAckedFirstAndWarns(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c := r.Client(t, r.NewDB(t))
	ctx := context.Background()
	const key = "outbox:order"
	addEntries(t, c, key, 1, 1000)
	if err := c.XGroupCreate(ctx, key, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	acked := make([]int, 300)
	for i := range acked {
		acked[i] = i + 1
	}
	deliver(t, c, key, "g", 300, acked...)

	var logs relaytest.Logs
	tr, err := NewTrimmer(c, TrimConfig{Glob: "outbox:*", MaxLen: 800}, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Under the cap once the acknowledged entries are gone: nothing else cut.
	if st.Acked != 300 || st.Unacked != 0 || len(logs.Lines("WARN")) != 0 {
		t.Fatalf("first pass: %+v, warnings %v; want 300 acked removed, nothing cut", st, logs.Lines("WARN"))
	}
	if got := streamIDs(t, c, key)[0]; got != "301-0" {
		t.Fatalf("oldest entry %s, want 301-0", got)
	}

	tr.cfg.MaxLen = 200
	st, err = tr.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := c.XLen(ctx, key).Val()
	if st.Unacked == 0 || st.Unacked != 700-n || n < 200 {
		t.Fatalf("second pass: %+v, %d entries left; want 700 minus the entries left cut, at least 200 left", st, n)
	}
	warns := logs.Lines("WARN")
	if len(warns) != 1 || warns[0]["stream"] != key || warns[0]["cut"] != float64(st.Unacked) || warns[0]["hint"] == nil {
		t.Fatalf("warnings %v, want one with the stream, the count cut and a hint", warns)
	}
}

// A standby (Active false) trims nothing; once it holds the lease, it does.
func TestTrimmer_RunTrimsOnlyWhenActive(t *testing.T) {
	r := testsvc.SharedRedis(t)
	c := r.Client(t, r.NewDB(t))
	ctx := context.Background()
	const key = "outbox:order"
	addEntries(t, c, key, 1, 10)
	if err := c.XGroupCreate(ctx, key, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	deliver(t, c, key, "g", 10, 1, 2, 3, 4, 5)
	var active atomic.Bool
	tr, err := NewTrimmer(c, TrimConfig{Glob: "outbox:*", Acked: true, Interval: 10 * time.Millisecond, Active: active.Load}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(rctx) }()
	time.Sleep(300 * time.Millisecond)
	if n := c.XLen(ctx, key).Val(); n != 10 {
		t.Errorf("a standby's trimmer left %d entries, want all 10", n)
	}
	active.Store(true)
	relaytest.WaitFor(t, 10*time.Second, "the holder's trimmer to trim", func() bool { return c.XLen(ctx, key).Val() == 5 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil once cancelled", err)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"7.0.15", 7, 0, true},
		{"6.2", 6, 2, true},
		{"255.255.255", 255, 255, true},
		{"7", 0, 0, false},
		{"", 0, 0, false},
	} {
		major, minor, ok := parseVersion(tc.in)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("parseVersion(%q) = %d, %d, %v; want %d, %d, %v", tc.in, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}
