package entry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// orderEvent is an order.created event of aggregate agg, as a reader
// hands it over.
func orderEvent(id uint64, agg string) outbox.Event {
	return outbox.Event{OutboxID: id, MessageID: "01J" + strconv.FormatUint(id, 10), AggregateType: "order", AggregateID: agg, EventType: "order.created",
		Payload: []byte(`{"id":` + strconv.FormatUint(id, 10) + `}`), Headers: []byte(`{"trace":"x"}`), OccurredAt: time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)}
}

// messengerFormat maps the event type orderEvent makes.
func messengerFormat() Format {
	return Format{Name: FormatMessenger, Classes: map[string]string{"order.created": `App\Message\OrderCreated`}, Stamp: `App\Messenger\OutboxStamp`}
}

// decodedEnvelope is Messenger's envelope as PHP's json_decode($m, true) reads it.
type decodedEnvelope struct {
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

func decodeEnvelope(t *testing.T, b []byte) decodedEnvelope {
	t.Helper()
	var env decodedEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("envelope %s is no JSON object of strings: %v", b, err)
	}
	return env
}

func TestFormat_Validate(t *testing.T) {
	classes := map[string]string{"order.placed": `\App\Message\OrderPlaced`}
	tests := []struct {
		name    string
		in      Format
		wantErr string
	}{
		{"zero is flat", Format{}, ""},
		{"flat with classes", Format{Name: FormatFlat, Classes: classes}, "--format is flat"},
		{"unknown", Format{Name: "cloudevents"}, "not an entry format"},
		{"messenger", Format{Name: FormatMessenger, Classes: classes}, ""},
		{"messenger without classes", Format{Name: FormatMessenger}, "maps no event type"},
		{"fallback class alone", Format{Name: FormatMessenger, Unmapped: `class:App\Message\Any`}, ""},
		{"bad unmapped", Format{Name: FormatMessenger, Classes: classes, Unmapped: "drop"}, "neither dead-letter nor class"},
		{"bad fallback class", Format{Name: FormatMessenger, Unmapped: "class:App.Message"}, "not a PHP class name"},
		{"bad stamp", Format{Name: FormatMessenger, Classes: classes, Stamp: "Outbox Stamp"}, "not a PHP class name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.in
			err := f.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			case tt.wantErr != "" && outbox.HintOf(err) == "":
				t.Errorf("Validate: %v has no hint", err)
			}
		})
	}
}

func TestParseClasses(t *testing.T) {
	got := map[string]string{}
	if err := ParseClasses([]string{`order.placed=\App\Message\OrderPlaced`, ` order.paid = App\Message\OrderPaid `}, got, "--messenger-class"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"order.placed": `App\Message\OrderPlaced`, "order.paid": `App\Message\OrderPaid`}
	if len(got) != len(want) || got["order.placed"] != want["order.placed"] || got["order.paid"] != want["order.paid"] {
		t.Errorf("ParseClasses = %v, want %v", got, want)
	}
	for _, bad := range []string{"order.placed", "=App\\X", `order.placed=App\Other`, "x=1Class"} {
		if err := ParseClasses([]string{bad}, got, "--messenger-class"); err == nil {
			t.Errorf("ParseClasses(%q) = nil, want an error", bad)
		}
	}
}

func TestReadClassesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "classes")
	if err := os.WriteFile(path, []byte("# event types of the shop\n\norder.placed=App\\Message\\OrderPlaced\n  order.paid=App\\Message\\OrderPaid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := ReadClassesFile(path, got); err != nil {
		t.Fatal(err)
	}
	if got["order.placed"] != `App\Message\OrderPlaced` || got["order.paid"] != `App\Message\OrderPaid` || len(got) != 2 {
		t.Errorf("ReadClassesFile = %v", got)
	}
	if err := os.WriteFile(path, []byte("order.placed App\\Message\\OrderPlaced\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ReadClassesFile(path, map[string]string{}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("ReadClassesFile of a line without '=': %v, want an error naming line 1", err)
	}
}

func TestFormat_PrepareEnvelope(t *testing.T) {
	f := messengerFormat()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	e := orderEvent(7, "o-7")
	e.Fields = []outbox.Field{{Name: "schema_version", Value: "3"}, {Name: "tenant", Value: "acme"}}
	e.Payload = []byte("{\"note\":\"a \\\"quoted\\\" <b>\\u00e9t\u00e9</b>\\n\",\"n\":1}")
	before := e.Size()
	f.Prepare(&e, true)
	if e.Invalid != "" {
		t.Fatalf("Invalid %q, want a message", e.Invalid)
	}
	if e.Size() != before+len(e.Envelope) {
		t.Errorf("Size %d after prepare, want %d: the envelope counts", e.Size(), before+len(e.Envelope))
	}
	env := decodeEnvelope(t, e.Envelope)
	if env.Body != string(e.Payload) {
		t.Errorf("body %q, want the payload %q byte for byte", env.Body, e.Payload)
	}
	want := map[string]string{
		"type": `App\Message\OrderCreated`, "Content-Type": "application/json", "message_id": e.MessageID,
		"aggregate_type": "order", "aggregate_id": "o-7", "event_type": "order.created", "occurred_at": "2026-11-29T10:00:00.123456Z",
		"schema_version": "3", "tenant": "acme",
	}
	for k, v := range want {
		if env.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, env.Headers[k], v)
		}
	}
	var stamps []map[string]string
	if err := json.Unmarshal([]byte(env.Headers[`X-Message-Stamp-App\Messenger\OutboxStamp`]), &stamps); err != nil || len(stamps) != 1 {
		t.Fatalf("stamp header %q: %v, want one serialized stamp", env.Headers[`X-Message-Stamp-App\Messenger\OutboxStamp`], err)
	}
	if s := stamps[0]; s["messageId"] != e.MessageID || s["aggregateId"] != "o-7" || s["eventType"] != "order.created" || s["outboxId"] != "7" {
		t.Errorf("stamp %v does not carry the outbox fields", s)
	}

	again := e.Envelope
	f.Prepare(&e, true)
	if &again[0] != &e.Envelope[0] {
		t.Error("a second prepare encoded the envelope again")
	}
}

func TestFormat_PrepareDeadLetters(t *testing.T) {
	f := messengerFormat()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		edit       func(*outbox.Event)
		wantReason string
	}{
		{"unmapped event type", func(e *outbox.Event) { e.EventType = "order.shipped" }, `event_type "order.shipped" has no Messenger message class`},
		{"payload not JSON", func(e *outbox.Event) { e.Payload = []byte("{oops") }, "not valid JSON"},
		{"payload empty to PHP", func(e *outbox.Event) { e.Payload = []byte("0") }, "empty to PHP"},
		{"payload not UTF-8", func(e *outbox.Event) { e.Payload = []byte("\"\xff\"") }, "not valid UTF-8"},
		{"aggregate id not UTF-8", func(e *outbox.Event) { e.AggregateID = "o-\xff" }, "aggregate_id is not valid UTF-8"},
		{"extra field not UTF-8", func(e *outbox.Event) { e.Fields = []outbox.Field{{Name: "tenant", Value: "\xfe"}} }, "tenant is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := orderEvent(1, "o-1")
			tt.edit(&e)
			f.Prepare(&e, true)
			if !strings.Contains(e.Invalid, tt.wantReason) || e.Envelope != nil {
				t.Errorf("Invalid %q, envelope %q; want a reason containing %q and no envelope", e.Invalid, e.Envelope, tt.wantReason)
			}
		})
	}

	e := orderEvent(1, "o-1")
	e.EventType = "order.shipped"
	f.Unmapped = `class:App\Message\OutboxEvent`
	f.Prepare(&e, true)
	if e.Invalid != "" || decodeEnvelope(t, e.Envelope).Headers["type"] != `App\Message\OutboxEvent` {
		t.Errorf("with a fallback class: Invalid %q, envelope %s; want the fallback class", e.Invalid, e.Envelope)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", `{"a":"b\"c"}`, "\x00\x1f\u2028\\", "été", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encodes as %s, which is no JSON string: %v", s, b, err)
		}
		if got != s {
			t.Fatalf("%q encodes as %s, which decodes to %q", s, b, got)
		}
	})
}
