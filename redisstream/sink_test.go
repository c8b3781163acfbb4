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
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The cluster tests and the conformance cases wait on their servers and
// faults far more than on the CPU: more of them run at a time than the
// machine has cores.
func TestMain(m *testing.M) { testsvc.MainParallel(m, 6) }

func newSink(t testing.TB, url string, cfg Config) (*Sink, *redis.Client) {
	t.Helper()
	c, err := redisconn.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if cfg.PositionKey == "" {
		cfg.PositionKey = "binlog-outbox:test:position"
	}
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func event(id uint64, typ, agg string) outbox.Event {
	return outbox.Event{
		OutboxID: id, MessageID: fmt.Sprintf("01J%023d", id), AggregateType: typ, AggregateID: agg,
		EventType: typ + ".created", Payload: []byte(fmt.Sprintf(`{"id":%d}`, id)),
		Headers: []byte(`{"trace":"x"}`), OccurredAt: time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC),
	}
}

func TestSink_AppendWritesEntriesAndPosition(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{})
	ctx := context.Background()

	batch := []outbox.Event{event(1, "order", "o-1"), event(2, "invoice", "i-1"), event(3, "order", "o-1")}
	batch[1].Headers = nil
	batch[2].Fields = []outbox.Field{{Name: "schema_version", Value: "3"}, {Name: "tenant", Value: ""}}
	if err := s.Append(ctx, batch, nil, []byte("p1")); err != nil {
		t.Fatal(err)
	}
	got, err := c.XRange(ctx, "outbox:order", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("outbox:order has %d entries, want 2", len(got))
	}
	want := map[string]any{
		"message_id": batch[0].MessageID, "aggregate_type": "order", "aggregate_id": "o-1",
		"event_type": "order.created", "payload": `{"id":1}`, "occurred_at": "2026-11-29T10:00:00.123456Z",
		"outbox_id": "1", "headers": `{"trace":"x"}`,
	}
	if fmt.Sprint(got[0].Values) != fmt.Sprint(want) {
		t.Errorf("entry fields:\n got %v\nwant %v", got[0].Values, want)
	}
	if got[1].Values["outbox_id"] != "3" {
		t.Errorf("second order entry outbox_id = %v, want 3 (commit order)", got[1].Values["outbox_id"])
	}
	if v, ok := got[1].Values["schema_version"]; !ok || v != "3" || got[1].Values["tenant"] != "" || len(got[1].Values) != len(want)+2 {
		t.Errorf("entry with carried fields = %v, want the built-in fields, schema_version 3 and an empty tenant", got[1].Values)
	}
	inv, _ := c.XRange(ctx, "outbox:invoice", "-", "+").Result()
	if len(inv) != 1 || inv[0].Values["headers"] != "" {
		t.Errorf("invoice entries = %v, want one with empty headers", inv)
	}
	if pos, _ := s.Position(ctx); string(pos) != "p1" {
		t.Errorf("position = %q, want p1", pos)
	}
	// A position-only step moves the position without entries.
	if err := s.Append(ctx, nil, []byte("p1"), []byte("p2")); err != nil {
		t.Fatal(err)
	}
	if pos, _ := s.Position(ctx); string(pos) != "p2" {
		t.Errorf("position = %q, want p2", pos)
	}
}

func TestSink_AppendFencedByOtherPosition(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{})
	ctx := context.Background()
	if err := s.Append(ctx, []outbox.Event{event(1, "order", "a")}, nil, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPosition(ctx, []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	err := s.Append(ctx, []outbox.Event{event(2, "order", "a")}, []byte("mine"), []byte("mine2"))
	var mm *outbox.PositionMismatchError
	if !errors.As(err, &mm) || string(mm.Stored) != "theirs" {
		t.Fatalf("Append with stale prev: err = %v, want PositionMismatchError{theirs}", err)
	}
	if n := c.XLen(ctx, "outbox:order").Val(); n != 1 {
		t.Fatalf("fenced append wrote entries: XLEN = %d, want 1", n)
	}
	// No stored position but one expected.
	if err := s.DeletePosition(ctx); err != nil {
		t.Fatal(err)
	}
	err = s.Append(ctx, nil, []byte("theirs"), []byte("x"))
	if !errors.As(err, &mm) || mm.Stored != nil {
		t.Fatalf("Append after delete: err = %v, want PositionMismatchError{nil}", err)
	}
}

// appendPaths are the values of Config.MultiMin that make Append use the
// script and MULTI/EXEC, for the tests that must hold for both.
var appendPaths = []struct {
	name     string
	multiMin int
}{{"script", -1}, {"multi", 1}}

// TestSink_AppendWrongTypeWritesNothing: a batch with an event bound for a
// key of another type is refused whole (a retryable WrongTypeError), and
// the same events read again make that one a dead letter with the reason:
// the rest flow, the key stays as it is.
func TestSink_AppendWrongTypeWritesNothing(t *testing.T) {
	r := testsvc.SharedRedis(t)
	for _, path := range appendPaths {
		t.Run(path.name, func(t *testing.T) {
			s, c := newSink(t, r.NewDB(t), Config{MultiMin: path.multiMin})
			ctx := context.Background()
			c.Set(ctx, "outbox:invoice", "not a stream", 0)
			batch := func() []outbox.Event {
				evs := []outbox.Event{event(1, "order", "a"), event(2, "invoice", "b")}
				for i := range evs {
					s.Prepare(&evs[i])
				}
				return evs
			}
			err := s.Append(ctx, batch(), nil, []byte("p"))
			var wt *WrongTypeError
			if !errors.As(err, &wt) || wt.Key != "outbox:invoice" || wt.Type != "string" || errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("Append onto a string key: err = %v, want a retryable WrongTypeError naming outbox:invoice", err)
			}
			if n := c.XLen(ctx, "outbox:order").Val(); n != 0 {
				t.Errorf("XLEN outbox:order = %d after a failed append, want 0", n)
			}
			if pos, _ := s.Position(ctx); pos != nil {
				t.Errorf("position = %q after a failed append, want none", pos)
			}
			// Read again, as the reader does after the error.
			if err := s.Append(ctx, batch(), nil, []byte("p")); err != nil {
				t.Fatalf("Append read again: %v", err)
			}
			if n := c.XLen(ctx, "outbox:order").Val(); n != 1 {
				t.Errorf("XLEN outbox:order = %d, want 1", n)
			}
			dl := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
			if len(dl) != 1 || !strings.Contains(fmt.Sprint(dl[0].Values[entry.FieldReason]), "outbox:invoice holds a string, not a stream") {
				t.Errorf("dead letters %v, want the invoice's with the reason", dl)
			}
			if v := c.Get(ctx, "outbox:invoice").Val(); v != "not a stream" {
				t.Errorf("outbox:invoice = %q, want it left alone", v)
			}
		})
	}
}

func TestSink_DeadLetterAndPartitions(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{Stream: "ev:{aggregate_type}:{partition}", Partitions: 4, NoHeaders: true})
	ctx := context.Background()
	bad := event(9, "order", "o-9")
	bad.Invalid = "payload is NULL"
	if err := s.Append(ctx, []outbox.Event{event(1, "order", "o-1"), bad}, nil, []byte("p")); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("ev:order:%d", entry.Partition("o-1", 4))
	got := c.XRange(ctx, key, "-", "+").Val()
	if len(got) != 1 {
		t.Fatalf("%s has %d entries, want 1", key, len(got))
	}
	if _, ok := got[0].Values["headers"]; ok {
		t.Errorf("entry has a headers field although the table has none: %v", got[0].Values)
	}
	dl := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dl) != 1 || dl[0].Values["reason"] != "payload is NULL" || dl[0].Values["outbox_id"] != "9" {
		t.Fatalf("dead-letter entries = %v, want the bad row with its reason", dl)
	}
}

func TestSink_OOMWritesNothing(t *testing.T) {
	r := testsvc.StartRedis(t, testsvc.RedisOptions{})
	for _, path := range appendPaths {
		t.Run(path.name, func(t *testing.T) {
			s, c := newSink(t, r.URL(0), Config{MultiMin: path.multiMin})
			ctx := context.Background()
			c.FlushDB(ctx)
			c.ConfigSet(ctx, "maxmemory", "0")
			info := c.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"]
			if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(mustAtoi(t, info)+(2<<20))).Err(); err != nil {
				t.Fatal(err)
			}
			big := strings.Repeat("x", 64<<10)
			var err error
			for i := 0; i < 200 && err == nil; i++ {
				err = c.Set(ctx, fmt.Sprintf("fill:%d", i), big, 0).Err()
			}
			if err == nil {
				t.Fatal("filling Redis never hit maxmemory")
			}
			// Well over the limit, so that no write slips through the margin.
			info = c.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"]
			if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(mustAtoi(t, info)-(1<<20))).Err(); err != nil {
				t.Fatal(err)
			}
			batch := []outbox.Event{event(1, "order", "a"), event(2, "invoice", "b")}
			err = s.Append(ctx, batch, nil, []byte("p"))
			if err == nil || !strings.Contains(outbox.HintOf(err), "maxmemory") {
				t.Fatalf("Append at maxmemory: err = %v, want an OOM error with a hint", err)
			}
			if n := c.Exists(ctx, "outbox:order", "outbox:invoice").Val(); n != 0 {
				t.Errorf("%d streams after OOM, want none", n)
			}
			if pos, _ := s.Position(ctx); pos != nil {
				t.Errorf("position = %q after OOM, want none", pos)
			}
			// Memory freed: the same append goes through.
			c.FlushDB(ctx)
			if err := s.Append(ctx, batch, nil, []byte("p")); err != nil {
				t.Fatalf("Append after freeing memory: %v", err)
			}
			if n := c.XLen(ctx, "outbox:order").Val() + c.XLen(ctx, "outbox:invoice").Val(); n != 2 {
				t.Errorf("%d entries after the retry, want 2", n)
			}
		})
	}
}

func TestNewClient_RedactsPassword(t *testing.T) {
	_, err := redisconn.NewClient("redis://user:s3cret@host:notaport/0")
	if err == nil {
		t.Fatal("redisconn.NewClient accepted a bad port")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestNewClient_Timeouts(t *testing.T) {
	for _, tt := range []struct {
		url         string
		read, write time.Duration
	}{
		{"redis://127.0.0.1:6379/0", 30 * time.Second, 30 * time.Second},
		{"redis://127.0.0.1:6379/0?read_timeout=2s&write_timeout=1s", 2 * time.Second, time.Second},
	} {
		c, err := redisconn.NewClient(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		o := c.Options()
		if o.ReadTimeout != tt.read || o.WriteTimeout != tt.write {
			t.Errorf("redisconn.NewClient(%q): read %s, write %s; want %s, %s", tt.url, o.ReadTimeout, o.WriteTimeout, tt.read, tt.write)
		}
		c.Close()
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
