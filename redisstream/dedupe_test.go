package redisstream

import (
	"context"
	"reflect"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestSink_PublishWritesAppendsFields(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	batch := event(1, "order", "o-1")
	bad := event(2, "order", "o-2")
	bad.Invalid = "payload is not JSON"

	// The same events through Append (binlog mode) and Publish (poll mode)
	// must give entries a consumer cannot tell apart.
	sa, ca := newSink(t, r.NewDB(t), Config{})
	if err := sa.Append(ctx, []outbox.Event{batch, bad}, nil, []byte("p")); err != nil {
		t.Fatal(err)
	}
	sp, cp := newSink(t, r.NewDB(t), Config{PositionKey: "unused"})
	n, err := sp.Publish(ctx, []outbox.Event{batch, bad})
	if err != nil || n != 2 {
		t.Fatalf("Publish() = %d, %v; want 2, nil", n, err)
	}
	for _, stream := range []string{"outbox:order", DefaultDeadLetterStream} {
		a := ca.XRange(ctx, stream, "-", "+").Val()
		p := cp.XRange(ctx, stream, "-", "+").Val()
		if len(a) != 1 || len(p) != 1 || !reflect.DeepEqual(a[0].Values, p[0].Values) {
			t.Errorf("%s: Append wrote %v, Publish wrote %v", stream, a, p)
		}
	}
	if v := cp.Exists(ctx, "unused").Val(); v != 0 {
		t.Errorf("Publish wrote the position key")
	}
}

func TestSink_PublishDedupe(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	url := r.NewDB(t)
	s, c := newSink(t, url, Config{Dedupe: Dedupe{Window: 500 * time.Millisecond, KeyPrefix: "dd:"}})

	n, err := s.Publish(ctx, []outbox.Event{event(1, "order", "o-1"), event(2, "order", "o-1")})
	if err != nil || n != 2 {
		t.Fatalf("first Publish() = %d, %v; want 2, nil", n, err)
	}
	n, err = s.Publish(ctx, []outbox.Event{event(1, "order", "o-1"), event(2, "order", "o-1"), event(3, "order", "o-1")})
	if err != nil || n != 1 {
		t.Fatalf("second Publish() = %d, %v; want 1 (two duplicates), nil", n, err)
	}
	if got := c.XLen(ctx, "outbox:order").Val(); got != 3 {
		t.Errorf("XLEN = %d, want 3", got)
	}
	if ttl := c.PTTL(ctx, "dd:"+event(1, "order", "o-1").MessageID).Val(); ttl <= 0 || ttl > 500*time.Millisecond {
		t.Errorf("dedupe key TTL = %s, want (0, 500ms]", ttl)
	}
	// After the window the id is forgotten: appended again.
	time.Sleep(600 * time.Millisecond)
	n, err = s.Publish(ctx, []outbox.Event{event(1, "order", "o-1")})
	if err != nil || n != 1 {
		t.Fatalf("Publish() after the window = %d, %v; want 1, nil", n, err)
	}
	// Without a window nothing is recorded or skipped.
	plain, _ := newSink(t, url, Config{})
	n, err = plain.Publish(ctx, []outbox.Event{event(1, "order", "o-1")})
	if err != nil || n != 1 {
		t.Fatalf("Publish() without dedupe = %d, %v; want 1, nil", n, err)
	}
}

func TestSink_PublishChecksBeforeWriting(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	s, c := newSink(t, r.NewDB(t), Config{Dedupe: Dedupe{Window: time.Hour}})
	c.Set(ctx, "outbox:invoice", "x", 0)
	_, err := s.Publish(ctx, []outbox.Event{event(1, "order", "o-1"), event(2, "invoice", "i-1")})
	if err == nil {
		t.Fatal("Publish() to a string key succeeded")
	}
	if n := c.Exists(ctx, "outbox:order", DefaultDedupeKeyPrefix+event(1, "order", "o-1").MessageID).Val(); n != 0 {
		t.Errorf("failed Publish() wrote %d keys, want none", n)
	}
}

// A relay of several tables remembers each event's message id under its own
// table's prefix: the keys a relay of that table alone uses.
func TestSink_PublishDedupeBySource(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	s, c := newSink(t, r.NewDB(t), Config{Dedupe: Dedupe{Window: time.Minute, BySource: true}})
	a, b := event(1, "order", "o-1"), event(1, "order", "o-1")
	a.Database, a.Table = "tenant_01", "outbox"
	b.Database, b.Table = "tenant_02", "outbox"
	n, err := s.Publish(ctx, []outbox.Event{a, b, a})
	if err != nil || n != 2 {
		t.Fatalf("Publish() = %d, %v; want 2 (the same message id in two tables, once again in the first), nil", n, err)
	}
	for _, e := range []outbox.Event{a, b} {
		key := KeysFor(e.Database, e.Table, "").DedupePrefix + e.MessageID
		if c.Exists(ctx, key).Val() != 1 {
			t.Errorf("dedupe key %s missing", key)
		}
	}
}

func TestKeysFor(t *testing.T) {
	tests := []struct {
		db, table, positionKey string
		want                   Keys
	}{
		{"app", "outbox", "", Keys{
			Position: "binlog-outbox:position:app.outbox", Mode: "binlog-outbox:mode:app.outbox",
			Lease:        "binlog-outbox:position:app.outbox:lease",
			DedupePrefix: "binlog-outbox:dedupe:app.outbox:",
		}},
		{"app", "outbox", "custom", Keys{
			Position: "custom", Mode: "binlog-outbox:mode:app.outbox", Lease: "custom:lease",
			DedupePrefix: "binlog-outbox:dedupe:app.outbox:",
		}},
		// Relays sharing a position share its lease, and a hash tag in the
		// position key holds for the lease too.
		{"app", "outbox", "{app}:pos", Keys{
			Position: "{app}:pos", Mode: "binlog-outbox:mode:app.outbox", Lease: "{app}:pos:lease",
			DedupePrefix: "binlog-outbox:dedupe:app.outbox:",
		}},
	}
	for _, tt := range tests {
		if got := KeysFor(tt.db, tt.table, tt.positionKey); got != tt.want {
			t.Errorf("KeysFor(%q, %q, %q) = %+v, want %+v", tt.db, tt.table, tt.positionKey, got, tt.want)
		}
	}
}

func TestModeStore(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	c, err := redisconn.NewClient(r.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewModeStore(c, KeysFor("app", "outbox", "").Mode)
	if got, err := s.Load(ctx); err != nil || got != "" {
		t.Fatalf("Load() on an empty Redis = %q, %v; want \"\", nil", got, err)
	}
	if err := s.Save(ctx, "poll"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx); err != nil || got != "poll" {
		t.Fatalf("Load() = %q, %v; want poll", got, err)
	}
	if got := c.Get(ctx, "binlog-outbox:mode:app.outbox").Val(); got != "poll" {
		t.Errorf("stored under the mode key: %q, want poll", got)
	}
}

// TestSink_AppendRuns appends a batch whose entries change stream and field
// names in every way a run of shared names can break (see build), with
// duplicates inside runs: each stream gets exactly its entries, in order,
// each with its own fields.
func TestSink_AppendRuns(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	s, c := newSink(t, r.NewDB(t), Config{Dedupe: Dedupe{Window: time.Minute, KeyPrefix: "dd:"}})
	withField := func(e outbox.Event, v string) outbox.Event {
		e.Fields = []outbox.Field{{Name: "tenant", Value: v}}
		return e
	}
	// 2 and 5 were appended before: they are skipped where they stand.
	if _, err := s.Publish(ctx, []outbox.Event{event(2, "order", "o"), event(5, "order", "o")}); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, "outbox:order")
	batch := []outbox.Event{
		event(1, "order", "o"), event(2, "order", "o"), event(3, "order", "o"), // one run, its middle a duplicate
		event(4, "invoice", "i"),                                                       // another stream
		withField(event(5, "order", "o"), "a"), withField(event(6, "order", "o"), "b"), // other names
		event(7, "order", "o"), // the first names again
	}
	if err := s.Append(ctx, batch, nil, []byte("p")); err != nil {
		t.Fatal(err)
	}
	got := func(stream string) (ids []string, tenants []any) {
		for _, m := range c.XRange(ctx, stream, "-", "+").Val() {
			ids = append(ids, m.Values[entry.FieldOutboxID].(string))
			tenants = append(tenants, m.Values["tenant"])
		}
		return ids, tenants
	}
	ids, tenants := got("outbox:order")
	if want := []string{"1", "3", "6", "7"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("outbox:order outbox ids = %v, want %v", ids, want)
	}
	if want := []any{nil, nil, "b", nil}; !reflect.DeepEqual(tenants, want) {
		t.Errorf("outbox:order tenant fields = %v, want %v", tenants, want)
	}
	if ids, _ := got("outbox:invoice"); !reflect.DeepEqual(ids, []string{"4"}) {
		t.Errorf("outbox:invoice outbox ids = %v, want [4]", ids)
	}
}
