package redisstream

import (
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// TestPrepareDoctrine turns messenger_messages rows into the Redis
// transport's message: body and headers as they are, the class as the event
// type, the message id from table and id; a row delayed to the future or
// with headers that are no JSON object becomes a dead letter.
func TestPrepareDoctrine(t *testing.T) {
	f := Format{Name: FormatDoctrine}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Second)
	row := func(headers string, at time.Time) outbox.Event {
		return outbox.Event{OutboxID: 7, Table: "messenger_messages", AggregateType: "default", AggregateID: "default", EventType: "default",
			Payload: []byte(`O:8:"stdClass":0:{}` + "\n\"x\""), Headers: []byte(headers), OccurredAt: at}
	}

	e := row(`{"type":"App\\Message\\Ping","Content-Type":"application/json"}`, past)
	f.prepare(&e, true)
	if e.Invalid != "" {
		t.Fatalf("invalid: %s", e.Invalid)
	}
	want := `{"body":"O:8:\"stdClass\":0:{}\n\"x\"","headers":{"type":"App\\Message\\Ping","Content-Type":"application/json"}}`
	if string(e.Envelope) != want || e.MessageID != "messenger_messages:7" || e.EventType != `App\Message\Ping` {
		t.Errorf("envelope %s, message id %q, event type %q", e.Envelope, e.MessageID, e.EventType)
	}

	e = row(`[]`, past)
	if f.prepare(&e, true); e.Invalid != "" || !strings.HasSuffix(string(e.Envelope), `"headers":[]}`) || e.EventType != "default" {
		t.Errorf("no headers: invalid %q, envelope %s, event type %q", e.Invalid, e.Envelope, e.EventType)
	}

	for name, e := range map[string]outbox.Event{
		"delayed until": row(`[]`, time.Now().Add(time.Minute)),
		"not a JSON":    row(`"x"`, past),
	} {
		if f.prepare(&e, true); !strings.Contains(e.Invalid, name) || e.Envelope != nil {
			t.Errorf("%s: invalid %q, envelope %s", name, e.Invalid, e.Envelope)
		}
	}

	if err := (&Format{Name: FormatDoctrine, Stamp: "App\\Stamp"}).Validate(); err == nil {
		t.Error("--messenger-stamp with symfony-doctrine accepted")
	}
}
