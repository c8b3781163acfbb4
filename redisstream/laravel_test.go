package redisstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// jobsRow is a jobs row as the laravel-jobs preset reads it: the queue as
// aggregate type, id and event type, available_at as occurred_at.
func jobsRow(id uint64, queue, payload string, available time.Time) outbox.Event {
	return outbox.Event{OutboxID: id, Table: "jobs", AggregateType: queue, AggregateID: queue, EventType: queue,
		Payload: []byte(payload), OccurredAt: available}
}

// jobPayload is a payload as Laravel 8's DatabaseQueue writes one.
func jobPayload(uuid string) string {
	return `{"uuid":"` + uuid + `","displayName":"App\\Jobs\\Bill","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{"commandName":"App\\Jobs\\Bill","command":"O:13:\"App\\Jobs\\Bill\":0:{}"}}`
}

// TestPrepareLaravel encodes jobs rows as Laravel's Redis queue and the
// stream connector take them, and dead-letters what no Laravel worker
// could run.
func TestPrepareLaravel(t *testing.T) {
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name, format, payload string
		at                    time.Time
		invalid               string // a part of the reason; "" for valid
		body                  string // what is written, without the kind byte
		delayed               bool
	}{
		{name: "queue", format: FormatLaravelQueue, payload: jobPayload("u-1"), at: past,
			body: strings.TrimSuffix(jobPayload("u-1"), "}") + `,"id":"u-1","attempts":0}`},
		{name: "queue delayed", format: FormatLaravelQueue, payload: jobPayload("u-2"), at: future, delayed: true,
			body: strings.TrimSuffix(jobPayload("u-2"), "}") + `,"id":"u-2","attempts":0}`},
		{name: "queue without uuid", format: FormatLaravelQueue, payload: `{"job":"X@handle","data":[]}` + "\n", at: past,
			body: `{"job":"X@handle","data":[],"id":"jobs:5","attempts":0}`},
		{name: "stream", format: FormatLaravelStream, payload: jobPayload("u-3"), at: past, body: jobPayload("u-3")},
		{name: "not json", format: FormatLaravelQueue, payload: `O:8:"stdClass"`, at: past, invalid: "not a JSON object"},
		{name: "no job", format: FormatLaravelStream, payload: `{"data":{}}`, at: past, invalid: `no "job"`},
		{name: "has id", format: FormatLaravelQueue, payload: `{"job":"X@handle","id":"r"}`, at: past, invalid: `already has an "id"`},
		{name: "has attempts", format: FormatLaravelQueue, payload: `{"job":"X@handle","attempts":1}`, at: past, invalid: `already has "attempts"`},
		{name: "not utf-8", format: FormatLaravelQueue, payload: "{\"job\":\"\xff\"}", at: past, invalid: "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Format{Name: tc.format}
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			e := jobsRow(5, "default", tc.payload, tc.at)
			f.prepare(&e, true)
			if tc.invalid != "" {
				if !strings.Contains(e.Invalid, tc.invalid) || e.Envelope != nil {
					t.Errorf("invalid %q, envelope %s; want a dead letter for %q", e.Invalid, e.Envelope, tc.invalid)
				}
				return
			}
			if e.Invalid != "" {
				t.Fatalf("invalid: %s", e.Invalid)
			}
			_, delayed := laravelDue(&e)
			if got := string(laravelBody(&e)); !delayed && got != tc.body {
				t.Errorf("body\n got %s\nwant %s", got, tc.body)
			}
			if delayed != tc.delayed || e.MessageID != "jobs:5" {
				t.Errorf("delayed %v, message id %q; want %v, jobs:5", delayed, e.MessageID, tc.delayed)
			}
			if tc.payload == jobPayload("u-1") && e.EventType != `App\Jobs\Bill` {
				t.Errorf("event type %q, want the displayName", e.EventType)
			}
			var m map[string]any
			if err := json.Unmarshal(laravelBody(&e), &m); err != nil {
				t.Errorf("what is written is no JSON object: %v", err)
			}
			// Decided once: prepared again, it stays.
			before := string(e.Envelope)
			if f.prepare(&e, true); string(e.Envelope) != before {
				t.Errorf("prepared again: %s, was %s", e.Envelope, before)
			}
		})
	}
	if err := (&Format{Name: FormatLaravelQueue, Stamp: `App\Stamp`}).Validate(); err == nil {
		t.Error("--messenger-stamp with laravel-queue accepted")
	}
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
			s, _ := newSink(t, r.NewDB(t), Config{Stream: stream, Format: Format{Name: FormatLaravelQueue}, MultiMin: multiMin})
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
		s, _ := newSink(t, r.NewDB(t), Config{Stream: stream, Format: Format{Name: FormatLaravelQueue}, Dedupe: Dedupe{Window: time.Hour}})
		for range 2 {
			if _, err := s.Publish(ctx, batch()); err != nil {
				t.Fatal(err)
			}
		}
		check(t, s)
	})
	t.Run("wrong type", func(t *testing.T) {
		s, c := newSink(t, r.NewDB(t), Config{Stream: stream, Format: Format{Name: FormatLaravelQueue}})
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
		err := Config{Stream: stream, Format: Format{Name: FormatLaravelQueue}, Cluster: true, PositionKey: "p"}.Validate()
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
			s, c := newSink(t, r.NewDB(t), Config{Stream: "outbox:jobs:{aggregate_type}", Format: Format{Name: FormatLaravelStream}, MultiMin: multiMin, Groups: []string{"laravel"}})
			b := []outbox.Event{jobsRow(1, "default", jobPayload("a"), now), jobsRow(2, "default", jobPayload("b"), now.Add(time.Hour))}
			if err := s.Append(ctx, b, nil, []byte("p1")); err != nil {
				t.Fatal(err)
			}
			entries := c.XRange(ctx, "outbox:jobs:default", "-", "+").Val()
			if len(entries) != 1 || entries[0].Values[FieldJob] != jobPayload("a") || entries[0].Values[FieldMessageID] != "jobs:1" ||
				entries[0].Values[FieldEventType] != `App\Jobs\Bill` {
				t.Errorf("entries %v, want job a", entries)
			}
			if _, ok := entries[0].Values[FieldPayload]; len(entries) == 1 && ok {
				t.Error("the entry has a payload field besides the job")
			}
			z := c.ZRangeWithScores(ctx, "outbox:jobs:default"+LaravelDelayedSuffix, 0, -1).Val()
			if len(z) != 1 || int64(z[0].Score) != now.Add(time.Hour).Unix() {
				t.Fatalf("delayed set %v, want job b", z)
			}
			var m map[string]string
			if err := json.Unmarshal([]byte(z[0].Member.(string)), &m); err != nil || m[FieldJob] != jobPayload("b") || m[FieldOutboxID] != "2" || m[FieldMessageID] != "jobs:2" {
				t.Errorf("member %v (%v)", z[0].Member, err)
			}
			if g := c.XInfoGroups(ctx, "outbox:jobs:default").Val(); len(g) != 1 {
				t.Errorf("groups %v, want laravel", g)
			}
		})
	}
}

// FuzzPrepareLaravel: whatever a jobs row's payload holds, the relay either
// dead-letters it with a reason or writes JSON that Laravel's worker
// decodes: for laravel-queue an object with the id and attempts 0 that
// RedisQueue adds, and the payload's own fields unchanged.
func FuzzPrepareLaravel(f *testing.F) {
	f.Add(jobPayload("u-1"), false)
	f.Add(`{"job":"X@handle","data":[]}`, true)
	f.Add(`{}`, false)
	f.Add(`{"job":"x"}  `, false)
	f.Fuzz(func(t *testing.T, payload string, delayed bool) {
		at := time.Now().Add(-time.Minute)
		if delayed {
			at = time.Now().Add(time.Hour)
		}
		for _, name := range []string{FormatLaravelQueue, FormatLaravelStream} {
			f := Format{Name: name}
			e := jobsRow(1, "default", payload, at)
			f.prepare(&e, true)
			if e.Invalid != "" {
				if e.Envelope != nil {
					t.Fatalf("%s: invalid %q with an envelope", name, e.Invalid)
				}
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(laravelBody(&e), &m); err != nil {
				t.Fatalf("%s: %q becomes %q, no JSON object: %v", name, payload, laravelBody(&e), err)
			}
			if _, d := laravelDue(&e); d != delayed {
				t.Fatalf("%s: delayed %v, want %v", name, d, delayed)
			}
			if name == FormatLaravelStream && delayed {
				continue // the member holds the entry's fields
			}
			var orig map[string]json.RawMessage
			_ = json.Unmarshal([]byte(payload), &orig)
			for k, v := range orig {
				if string(m[k]) != string(v) {
					t.Fatalf("%s: field %s is %s, was %s", name, k, m[k], v)
				}
			}
			if name == FormatLaravelQueue && (string(m["attempts"]) != "0" || len(m["id"]) < 3) {
				t.Fatalf("%s: %s lacks the id or attempts 0", name, laravelBody(&e))
			}
		}
	})
}
