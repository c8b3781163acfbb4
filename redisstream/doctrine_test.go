package redisstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// doctrineRow is a messenger_messages row as the preset reads it:
// available_at as occurred_at.
func doctrineRow(id uint64, headers string, available time.Time) outbox.Event {
	return outbox.Event{OutboxID: id, Table: "messenger_messages", AggregateType: "default", AggregateID: "default", EventType: "default",
		Payload: []byte(`O:8:"stdClass":0:{}` + "\n\"x\""), Headers: []byte(headers), OccurredAt: available}
}

// TestPrepareDoctrine turns messenger_messages rows into the Redis
// transport's message: body and headers as they are, the class as the event
// type, the message id from table and id; a row still delayed gets the
// member of the delayed set, with the message id as its uniqid, and is due
// at its available_at; headers that are no JSON object make a dead letter.
func TestPrepareDoctrine(t *testing.T) {
	f := Format{Name: FormatDoctrine}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	created := time.Now().Add(-time.Second)

	e := doctrineRow(7, `{"type":"App\\Message\\Ping","Content-Type":"application/json"}`, created)
	f.prepare(&e, true)
	if e.Invalid != "" {
		t.Fatalf("invalid: %s", e.Invalid)
	}
	want := `{"body":"O:8:\"stdClass\":0:{}\n\"x\"","headers":{"type":"App\\Message\\Ping","Content-Type":"application/json"}}`
	if string(e.Envelope) != want || e.MessageID != "messenger_messages:7" || e.EventType != `App\Message\Ping` {
		t.Errorf("envelope %s, message id %q, event type %q", e.Envelope, e.MessageID, e.EventType)
	}
	if _, delayed := doctrineDue(&e); delayed {
		t.Error("a row available when created is delayed")
	}

	e = doctrineRow(7, `[]`, created)
	if f.prepare(&e, true); e.Invalid != "" || !strings.HasSuffix(string(e.Envelope), `"headers":[]}`) || e.EventType != "default" {
		t.Errorf("no headers: invalid %q, envelope %s, event type %q", e.Invalid, e.Envelope, e.EventType)
	}

	available := time.Now().Add(time.Minute).Truncate(time.Second)
	e = doctrineRow(8, `[]`, available)
	f.prepare(&e, true)
	due, delayed := doctrineDue(&e)
	if e.Invalid != "" || !delayed || due != available.UnixMilli() ||
		!strings.HasSuffix(string(e.Envelope), `"headers":{"`+HeaderOutboxID+`":"8","`+HeaderMessageID+`":"messenger_messages:8"},"uniqid":"messenger_messages:8"}`) {
		t.Errorf("delayed: invalid %q, delayed %v due %d, envelope %s", e.Invalid, delayed, due, e.Envelope)
	}
	// Decided once: prepared again, it stays the member.
	if f.prepare(&e, true); !strings.HasSuffix(string(e.Envelope), `"uniqid":"messenger_messages:8"}`) {
		t.Errorf("prepared again: envelope %s", e.Envelope)
	}

	e = doctrineRow(9, `"x"`, created)
	if f.prepare(&e, true); !strings.Contains(e.Invalid, "not a JSON") || e.Envelope != nil {
		t.Errorf("headers not an object: invalid %q, envelope %s", e.Invalid, e.Envelope)
	}

	if err := (&Format{Name: FormatDoctrine, Stamp: "App\\Stamp"}).Validate(); err == nil {
		t.Error("--messenger-stamp with symfony-doctrine accepted")
	}
}

// TestSink_DoctrineDelayedSet appends delayed messages to the Redis
// transport's delayed set in the append's one step, with available_at as
// the score and the member Connection::get() decodes, in both the script's
// and the MULTI strategy's batches, with the position (binlog mode) and
// without it (Publish), once each however often a batch is published; the
// others to the stream.
func TestSink_DoctrineDelayedSet(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	batch := func(from uint64) []outbox.Event {
		return []outbox.Event{
			doctrineRow(from, `[]`, now.Add(-time.Minute)),
			doctrineRow(from+1, `[]`, now.Add(time.Hour)),
			doctrineRow(from+2, `[]`, now.Add(-time.Second)),
			doctrineRow(from+3, `[]`, now.Add(2*time.Hour)),
		}
	}
	check := func(t *testing.T, c *redis.Client, from uint64, entries int) {
		t.Helper()
		if n := c.XLen(ctx, "outbox:default").Val(); n != int64(entries) {
			t.Errorf("outbox:default has %d entries, want %d", n, entries)
		}
		rows := batch(from)
		for _, e := range []outbox.Event{rows[1], rows[3]} {
			id, due := e.OutboxID, e.OccurredAt
			prepareDoctrine(&e)
			score, err := c.ZScore(ctx, "outbox:default__queue", string(e.Envelope)).Result()
			if err != nil || int64(score) != due.UnixMilli() {
				t.Errorf("row %d: score %v (%v), want %d", id, score, err, due.UnixMilli())
			}
			var m struct {
				Body    string            `json:"body"`
				Headers map[string]string `json:"headers"`
				Uniqid  string            `json:"uniqid"`
			}
			if err := json.Unmarshal(e.Envelope, &m); err != nil || m.Uniqid != fmt.Sprintf("messenger_messages:%d", id) || m.Body != string(e.Payload) ||
				m.Headers[HeaderOutboxID] != fmt.Sprint(id) {
				t.Errorf("row %d: member %s (%v)", id, e.Envelope, err)
			}
		}
	}
	for _, multiMin := range []int{0, 1} {
		t.Run(fmt.Sprintf("multi-min=%d", multiMin), func(t *testing.T) {
			s, c := newSink(t, r.NewDB(t), Config{Format: Format{Name: FormatDoctrine}, MultiMin: multiMin, Groups: []string{"app"}})
			if err := s.Append(ctx, batch(1), nil, []byte("p1")); err != nil {
				t.Fatal(err)
			}
			check(t, c, 1, 2)
			if n := c.ZCard(ctx, "outbox:default__queue").Val(); n != 2 {
				t.Errorf("delayed set has %d members, want 2", n)
			}
			if g := c.XInfoGroups(ctx, "outbox:default").Val(); len(g) != 1 {
				t.Errorf("groups %v, want app on the stream", g)
			}
		})
	}
	t.Run("publish", func(t *testing.T) {
		s, c := newSink(t, r.NewDB(t), Config{Format: Format{Name: FormatDoctrine}, Dedupe: Dedupe{Window: time.Hour}})
		for range 2 {
			if _, err := s.Publish(ctx, batch(1)); err != nil {
				t.Fatal(err)
			}
		}
		check(t, c, 1, 2)
		if n := c.ZCard(ctx, "outbox:default__queue").Val(); n != 2 {
			t.Errorf("delayed set has %d members after publishing twice, want 2", n)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		s, c := newSink(t, r.NewDB(t), Config{Format: Format{Name: FormatDoctrine}})
		c.Set(ctx, "outbox:default__queue", "x", 0)
		var wt *WrongTypeError
		if err := s.Append(ctx, batch(1), nil, []byte("p1")); !errors.As(err, &wt) || wt.Want != "zset" {
			t.Errorf("append over a string key: %v, want a WrongTypeError for the delayed set", err)
		}
		if n := c.XLen(ctx, "outbox:default").Val(); n != 0 {
			t.Errorf("%d entries appended by a refused batch", n)
		}
	})
}

// On Redis Cluster the delayed set is a key of its own slot, here not its
// stream's, which the batch's script of that slot writes with the slot's
// position, as it does a stream.
func TestSink_DoctrineDelayedSetOnCluster(t *testing.T) {
	c := testsvc.SharedRedisCluster(t).Client(t)
	ctx := context.Background()
	// A stream whose delayed set lies in another slot.
	prefix := fmt.Sprintf("t%d", time.Now().UnixNano())
	for i := 0; Slot(prefix+":default") == Slot(prefix+":default"+DelayedSetSuffix); i++ {
		prefix = fmt.Sprintf("t%d-%d", time.Now().UnixNano(), i)
	}
	s, err := New(c, Config{Stream: prefix + ":{aggregate_type}", PositionKey: "binlog-outbox:position:" + prefix, Cluster: true, Format: Format{Name: FormatDoctrine}})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
	if err := s.Append(ctx, nil, nil, clusterPos(100, 1)); err != nil {
		t.Fatal(err)
	}
	b := []outbox.Event{doctrineRow(1, `[]`, due.Add(-2*time.Hour)), doctrineRow(2, `[]`, due)}
	if err := s.Append(ctx, b, clusterPos(100, 1), clusterPos(200, 2)); err != nil {
		t.Fatal(err)
	}
	if n := c.XLen(ctx, prefix+":default").Val(); n != 1 {
		t.Errorf("stream has %d entries, want 1", n)
	}
	if z := c.ZRangeWithScores(ctx, prefix+":default__queue", 0, -1).Val(); len(z) != 1 || int64(z[0].Score) != due.UnixMilli() {
		t.Errorf("delayed set %v, want the delayed message due in an hour", z)
	}
	if p := c.Get(ctx, SlotPositionKey("binlog-outbox:position:"+prefix, Slot(prefix+":default"+DelayedSetSuffix))).Val(); p != string(clusterPos(200, 2)) {
		t.Errorf("the delayed set's slot holds position %q, want the batch's", p)
	}
}

// A dead letter of a row still delayed when replayed (a delayed message an
// older relay dead-lettered) goes to the delayed set, once, however often
// it is replayed.
func TestSink_ReplayDoctrineDelayed(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{Format: Format{Name: FormatDoctrine}, Groups: []string{"app"}})
	ctx := context.Background()
	bad := doctrineRow(7, `"x"`, time.Now().Add(time.Hour))
	if err := s.Append(ctx, []outbox.Event{bad}, nil, []byte("p")); err != nil {
		t.Fatal(err)
	}
	dl := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dl) != 1 {
		t.Fatalf("dead letters %v, want 1", dl)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	for range 2 {
		e := doctrineRow(7, `[]`, due)
		if _, _, err := s.Replay(ctx, &e, []string{dl[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	z := c.ZRangeWithScores(ctx, "outbox:default__queue", 0, -1).Val()
	if len(z) != 1 || int64(z[0].Score) != due.UnixMilli() || !strings.Contains(fmt.Sprint(z[0].Member), `"uniqid":"messenger_messages:7"`) {
		t.Errorf("delayed set %v, want the replayed message once, due at %d", z, due.UnixMilli())
	}
	if n := c.XLen(ctx, DefaultDeadLetterStream).Val(); n != 0 {
		t.Errorf("%d dead letters left, want none", n)
	}
	if n := c.Exists(ctx, "outbox:default").Val(); n != 0 {
		t.Error("the replay created the stream; the delayed message must wait in the set")
	}
}

// TestDoctrineRow reads the row a delayed message's headers name, as the
// relay writes the member and as Messenger moves it to the stream (its
// message JSON, PHP-serialized by phpredis's default serializer), and
// refuses what names a row unreadably rather than taking it for none.
func TestDoctrineRow(t *testing.T) {
	e := outbox.Event{Table: "messenger_messages", OutboxID: 42, Payload: []byte(`O:4:"Ping":0:{}`),
		Headers: []byte(`{"type":"App\\Ping"}`), OccurredAt: time.Now().Add(time.Hour)}
	prepareDoctrine(&e)
	member := string(e.Envelope)
	var moved struct {
		Body    string            `json:"body"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(e.Envelope, &moved); err != nil {
		t.Fatalf("member %s: %v", member, err)
	}
	if moved.Headers["type"] != `App\Ping` {
		t.Errorf("member %s lost the message's own headers", member)
	}
	reAdded, _ := json.Marshal(moved)
	cases := []struct {
		name, message string
		id            uint64
		ok, err       bool
	}{
		{"the relay's member", member, 42, true, false},
		{"moved, as JSON", string(reAdded), 42, true, false},
		{"moved, PHP-serialized", fmt.Sprintf(`s:%d:"%s";`, len(reAdded), reAdded), 42, true, false},
		{"a message without the headers", `{"body":"x","headers":{"type":"App\\Ping"}}`, 0, false, false},
		{"PHP-serialized, length off", fmt.Sprintf(`s:%d:"%s";`, len(reAdded)+1, reAdded), 0, false, true},
		{"another serializer", "\x00\x00\x00\x02" + HeaderOutboxID + "\x0642", 0, false, true},
		{"headers that name no row", `{"body":"x","headers":{"` + HeaderOutboxID + `":"x","` + HeaderMessageID + `":""}}`, 0, false, true},
	}
	for _, c := range cases {
		id, mid, ok, err := DoctrineRow(c.message)
		if ok != c.ok || (err != nil) != c.err || id != c.id || ok && mid != "messenger_messages:42" {
			t.Errorf("%s: DoctrineRow = %d, %q, %v, %v; want %d, ok %v, error %v", c.name, id, mid, ok, err, c.id, c.ok, c.err)
		}
	}
	// No headers at all (PHP's []) still gets a valid object.
	e = outbox.Event{Table: "messenger_messages", OutboxID: 7, Payload: []byte("b"), Headers: []byte("[]"), OccurredAt: time.Now().Add(time.Hour)}
	prepareDoctrine(&e)
	if id, _, ok, err := DoctrineRow(string(e.Envelope)); !ok || err != nil || id != 7 {
		t.Errorf("member %s: DoctrineRow = %d, %v, %v; want 7", e.Envelope, id, ok, err)
	}
}
