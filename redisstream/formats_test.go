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
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestSink_MessengerEntries(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{Stream: "messages", Format: entry.Format{Name: entry.FormatMessenger, Classes: map[string]string{"order.created": `App\Message\OrderCreated`}}})
	ctx := context.Background()
	batch := []outbox.Event{event(1, "order", "o-1"), event(2, "invoice", "i-1"), event(3, "order", "o-1")}
	if err := s.Append(ctx, batch, nil, []byte("p1")); err != nil {
		t.Fatal(err)
	}
	if batch[1].Invalid == "" {
		t.Error("Append left the unmapped event's Invalid empty; the caller's dead-letter count would miss it")
	}
	got := c.XRange(ctx, "messages", "-", "+").Val()
	if len(got) != 2 {
		t.Fatalf("messages has %d entries, want the 2 mapped ones", len(got))
	}
	for i, m := range got {
		if _, ok := m.Values[entry.FieldPayload]; ok {
			t.Errorf("entry %d has a payload field besides the message", i)
		}
		for _, f := range []string{entry.FieldMessageID, entry.FieldAggregateType, entry.FieldAggregateID, entry.FieldEventType, entry.FieldOccurredAt, entry.FieldOutboxID, entry.FieldHeaders} {
			if _, ok := m.Values[f]; !ok {
				t.Errorf("entry %d lacks the flat field %s", i, f)
			}
		}
		msg, _ := m.Values[entry.FieldMessage].(string)
		var env struct {
			Body    string            `json:"body"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal([]byte(msg), &env); err != nil || env.Headers["type"] != `App\Message\OrderCreated` || env.Body != string(batch[2*i].Payload) {
			t.Errorf("entry %d: message %s", i, msg)
		}
	}
	dead := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dead) != 1 {
		t.Fatalf("dead-letter stream has %d entries, want 1", len(dead))
	}
	if v := dead[0].Values; v[entry.FieldPayload] != string(batch[1].Payload) || !strings.Contains(v[entry.FieldReason].(string), "no Messenger message class") || v[entry.FieldMessage] != nil {
		t.Errorf("dead letter %v: want the flat fields with the payload and the reason", v)
	}
}

// doctrineRow is a messenger_messages row as the symfony-doctrine preset
// reads it, available at available.
func doctrineRow(id uint64, headers string, available time.Time) outbox.Event {
	return outbox.Event{OutboxID: id, Table: "messenger_messages", AggregateType: "default", AggregateID: "default", EventType: "default",
		Payload: []byte(`O:8:"stdClass":0:{}` + "\n\"x\""), Headers: []byte(headers), OccurredAt: available}
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
			(&entry.Format{Name: entry.FormatDoctrine}).Prepare(&e, true)
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
				m.Headers[entry.HeaderOutboxID] != fmt.Sprint(id) {
				t.Errorf("row %d: member %s (%v)", id, e.Envelope, err)
			}
		}
	}
	for _, multiMin := range []int{0, 1} {
		t.Run(fmt.Sprintf("multi-min=%d", multiMin), func(t *testing.T) {
			s, c := newSink(t, r.NewDB(t), Config{Format: entry.Format{Name: entry.FormatDoctrine}, MultiMin: multiMin, Groups: []string{"app"}})
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
		s, c := newSink(t, r.NewDB(t), Config{Format: entry.Format{Name: entry.FormatDoctrine}, Dedupe: Dedupe{Window: time.Hour}})
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
		s, c := newSink(t, r.NewDB(t), Config{Format: entry.Format{Name: entry.FormatDoctrine}})
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
	for i := 0; Slot(prefix+":default") == Slot(prefix+":default"+entry.DelayedSetSuffix); i++ {
		prefix = fmt.Sprintf("t%d-%d", time.Now().UnixNano(), i)
	}
	s, err := New(c, Config{Stream: prefix + ":{aggregate_type}", PositionKey: "binlog-outbox:position:" + prefix, Cluster: true, Format: entry.Format{Name: entry.FormatDoctrine}})
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
	if p := c.Get(ctx, SlotPositionKey("binlog-outbox:position:"+prefix, Slot(prefix+":default"+entry.DelayedSetSuffix))).Val(); p != string(clusterPos(200, 2)) {
		t.Errorf("the delayed set's slot holds position %q, want the batch's", p)
	}
}

// A dead letter of a row still delayed when replayed (a delayed message an
// older relay dead-lettered) goes to the delayed set, once, however often
// it is replayed.
func TestSink_ReplayDoctrineDelayed(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{Format: entry.Format{Name: entry.FormatDoctrine}, Groups: []string{"app"}})
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

// jobsRow is a row of Laravel's jobs table as the laravel-jobs preset reads
// it: the queue as aggregate type and id, available_at as occurred_at.
func jobsRow(id uint64, queue, payload string, available time.Time) outbox.Event {
	return outbox.Event{OutboxID: id, Table: "jobs", AggregateType: queue, AggregateID: queue, EventType: queue, Payload: []byte(payload), OccurredAt: available}
}

// jobPayload is a job as Laravel's DatabaseQueue writes one.
func jobPayload(uuid string) string {
	return `{"uuid":"` + uuid + `","displayName":"App\\Jobs\\Bill","job":"Illuminate\\Queue\\CallQueuedHandler@call","data":{"commandName":"App\\Jobs\\Bill","command":"O:13:\"App\\Jobs\\Bill\":0:{}"}}`
}

// TestSink_LaravelQueue pushes jobs as RedisQueue::pushRaw and laterRaw do,
// with the position in the same step: each job's payload on its queue's
// list with one notification each, the delayed ones in the delayed set
// scored by available_at, a dead letter to the dead-letter stream; with
// MultiMin 1 too (the script takes every batch), and never twice however
// often Publish runs with a dedupe window. A notify key of another type
// refuses the batch before anything is written.
func TestSink_LaravelQueue(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	const stream = "app_database_queues:{aggregate_type}"
	batch := func() []outbox.Event {
		return []outbox.Event{
			jobsRow(1, "default", jobPayload("a"), now.Add(-time.Minute)),
			jobsRow(2, "emails", jobPayload("b"), now),
			jobsRow(3, "default", jobPayload("c"), now.Add(time.Hour)),
			jobsRow(4, "default", "not json", now),
			jobsRow(5, "default", jobPayload("e"), now.Add(-time.Second)),
		}
	}
	check := func(t *testing.T, s *Sink) {
		t.Helper()
		c := s.client
		var ids []string
		for _, m := range c.LRange(ctx, "app_database_queues:default", 0, -1).Val() {
			var p struct {
				ID       string `json:"id"`
				Attempts *int   `json:"attempts"`
				Job      string `json:"job"`
			}
			if err := json.Unmarshal([]byte(m), &p); err != nil || p.Attempts == nil || *p.Attempts != 0 || p.Job == "" {
				t.Errorf("list member %s (%v)", m, err)
			}
			ids = append(ids, p.ID)
		}
		if fmt.Sprint(ids) != "[a e]" {
			t.Errorf("queues:default holds %v, want [a e] in order", ids)
		}
		if n := c.LLen(ctx, "app_database_queues:default:notify").Val(); n != 2 {
			t.Errorf("queues:default:notify has %d, want 2", n)
		}
		if n, m := c.LLen(ctx, "app_database_queues:emails").Val(), c.LLen(ctx, "app_database_queues:emails:notify").Val(); n != 1 || m != 1 {
			t.Errorf("queues:emails has %d jobs and %d notifications, want 1 and 1", n, m)
		}
		z := c.ZRangeWithScores(ctx, "app_database_queues:default:delayed", 0, -1).Val()
		if len(z) != 1 || int64(z[0].Score) != now.Add(time.Hour).Unix() || !strings.Contains(z[0].Member.(string), `"id":"c","attempts":0}`) {
			t.Errorf("delayed set %v, want job c scored by its available_at", z)
		}
		if n := c.XLen(ctx, DefaultDeadLetterStream).Val(); n != 1 {
			t.Errorf("dead-letter stream has %d entries, want 1", n)
		}
	}
	for _, multiMin := range []int{0, 1} {
		t.Run(fmt.Sprintf("multi-min=%d", multiMin), func(t *testing.T) {
			s, _ := newSink(t, r.NewDB(t), Config{Stream: stream, Format: entry.Format{Name: entry.FormatLaravelQueue}, MultiMin: multiMin})
			if err := s.Append(ctx, batch(), nil, []byte("p1")); err != nil {
				t.Fatal(err)
			}
			check(t, s)
			// A retry with the old position is refused, writing nothing.
			var pm *outbox.PositionMismatchError
			if err := s.Append(ctx, batch(), nil, []byte("p1")); !errors.As(err, &pm) {
				t.Errorf("append again from the old position: %v, want a position mismatch", err)
			}
			check(t, s)
		})
	}
	t.Run("publish", func(t *testing.T) {
		s, _ := newSink(t, r.NewDB(t), Config{Stream: stream, Format: entry.Format{Name: entry.FormatLaravelQueue}, Dedupe: Dedupe{Window: time.Hour}})
		for range 2 {
			if _, err := s.Publish(ctx, batch()); err != nil {
				t.Fatal(err)
			}
		}
		check(t, s)
	})
	t.Run("wrong type", func(t *testing.T) {
		s, c := newSink(t, r.NewDB(t), Config{Stream: stream, Format: entry.Format{Name: entry.FormatLaravelQueue}})
		c.Set(ctx, "app_database_queues:default:notify", "x", 0)
		var wt *WrongTypeError
		if err := s.Append(ctx, batch(), nil, []byte("p1")); !errors.As(err, &wt) || wt.Want != "list" || wt.Key != "app_database_queues:default:notify" {
			t.Errorf("append over a string notify key: %v, want a WrongTypeError for it", err)
		}
		if n := c.LLen(ctx, "app_database_queues:emails").Val(); n != 0 {
			t.Errorf("%d jobs pushed by a refused batch", n)
		}
	})
	t.Run("cluster refused", func(t *testing.T) {
		err := Config{Stream: stream, Format: entry.Format{Name: entry.FormatLaravelQueue}, Cluster: true, PositionKey: "p"}.Validate()
		if !errors.Is(err, outbox.ErrConfig) {
			t.Errorf("laravel-queue on a cluster: %v, want a configuration error", err)
		}
	})
}

// TestSink_LaravelStream appends jobs as entries of the outbox connector,
// the payload in the job field, and a delayed job as a member of the
// stream's delayed set holding the entry's fields, in MULTI/EXEC's batches
// as in the script's.
func TestSink_LaravelStream(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	for _, multiMin := range []int{0, 1} {
		t.Run(fmt.Sprintf("multi-min=%d", multiMin), func(t *testing.T) {
			s, c := newSink(t, r.NewDB(t), Config{Stream: "outbox:jobs:{aggregate_type}", Format: entry.Format{Name: entry.FormatLaravelStream}, MultiMin: multiMin, Groups: []string{"laravel"}})
			b := []outbox.Event{jobsRow(1, "default", jobPayload("a"), now), jobsRow(2, "default", jobPayload("b"), now.Add(time.Hour))}
			if err := s.Append(ctx, b, nil, []byte("p1")); err != nil {
				t.Fatal(err)
			}
			entries := c.XRange(ctx, "outbox:jobs:default", "-", "+").Val()
			if len(entries) != 1 || entries[0].Values[entry.FieldJob] != jobPayload("a") || entries[0].Values[entry.FieldMessageID] != "jobs:1" ||
				entries[0].Values[entry.FieldEventType] != `App\Jobs\Bill` {
				t.Errorf("entries %v, want job a", entries)
			}
			if _, ok := entries[0].Values[entry.FieldPayload]; len(entries) == 1 && ok {
				t.Error("the entry has a payload field besides the job")
			}
			z := c.ZRangeWithScores(ctx, "outbox:jobs:default"+entry.LaravelDelayedSuffix, 0, -1).Val()
			if len(z) != 1 || int64(z[0].Score) != now.Add(time.Hour).Unix() {
				t.Fatalf("delayed set %v, want job b", z)
			}
			var m map[string]string
			if err := json.Unmarshal([]byte(z[0].Member.(string)), &m); err != nil || m[entry.FieldJob] != jobPayload("b") || m[entry.FieldOutboxID] != "2" || m[entry.FieldMessageID] != "jobs:2" {
				t.Errorf("member %v (%v)", z[0].Member, err)
			}
			if g := c.XInfoGroups(ctx, "outbox:jobs:default").Val(); len(g) != 1 {
				t.Errorf("groups %v, want laravel", g)
			}
		})
	}
}
