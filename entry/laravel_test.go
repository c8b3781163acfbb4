package entry

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
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
			f.Prepare(&e, true)
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
			if got := string(JobBody(&e)); !delayed && got != tc.body {
				t.Errorf("body\n got %s\nwant %s", got, tc.body)
			}
			if delayed != tc.delayed || e.MessageID != "jobs:5" {
				t.Errorf("delayed %v, message id %q; want %v, jobs:5", delayed, e.MessageID, tc.delayed)
			}
			if tc.payload == jobPayload("u-1") && e.EventType != `App\Jobs\Bill` {
				t.Errorf("event type %q, want the displayName", e.EventType)
			}
			var m map[string]any
			if err := json.Unmarshal(JobBody(&e), &m); err != nil {
				t.Errorf("what is written is no JSON object: %v", err)
			}
			// Decided once: prepared again, it stays.
			before := string(e.Envelope)
			if f.Prepare(&e, true); string(e.Envelope) != before {
				t.Errorf("prepared again: %s, was %s", e.Envelope, before)
			}
		})
	}
	if err := (&Format{Name: FormatLaravelQueue, Stamp: `App\Stamp`}).Validate(); err == nil {
		t.Error("--messenger-stamp with laravel-queue accepted")
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
			f.Prepare(&e, true)
			if e.Invalid != "" {
				if e.Envelope != nil {
					t.Fatalf("%s: invalid %q with an envelope", name, e.Invalid)
				}
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(JobBody(&e), &m); err != nil {
				t.Fatalf("%s: %q becomes %q, no JSON object: %v", name, payload, JobBody(&e), err)
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
				t.Fatalf("%s: %s lacks the id or attempts 0", name, JobBody(&e))
			}
		}
	})
}
