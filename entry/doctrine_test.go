package entry

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
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
	f.Prepare(&e, true)
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
	if f.Prepare(&e, true); e.Invalid != "" || !strings.HasSuffix(string(e.Envelope), `"headers":[]}`) || e.EventType != "default" {
		t.Errorf("no headers: invalid %q, envelope %s, event type %q", e.Invalid, e.Envelope, e.EventType)
	}

	available := time.Now().Add(time.Minute).Truncate(time.Second)
	e = doctrineRow(8, `[]`, available)
	f.Prepare(&e, true)
	due, delayed := doctrineDue(&e)
	if e.Invalid != "" || !delayed || due != available.UnixMilli() ||
		!strings.HasSuffix(string(e.Envelope), `"headers":{"`+HeaderOutboxID+`":"8","`+HeaderMessageID+`":"messenger_messages:8"},"uniqid":"messenger_messages:8"}`) {
		t.Errorf("delayed: invalid %q, delayed %v due %d, envelope %s", e.Invalid, delayed, due, e.Envelope)
	}
	// Decided once: prepared again, it stays the member.
	if f.Prepare(&e, true); !strings.HasSuffix(string(e.Envelope), `"uniqid":"messenger_messages:8"}`) {
		t.Errorf("prepared again: envelope %s", e.Envelope)
	}

	e = doctrineRow(9, `"x"`, created)
	if f.Prepare(&e, true); !strings.Contains(e.Invalid, "not a JSON") || e.Envelope != nil {
		t.Errorf("headers not an object: invalid %q, envelope %s", e.Invalid, e.Envelope)
	}

	if err := (&Format{Name: FormatDoctrine, Stamp: "App\\Stamp"}).Validate(); err == nil {
		t.Error("--messenger-stamp with symfony-doctrine accepted")
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
