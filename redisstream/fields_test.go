package redisstream

import (
	"encoding"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
)

// The payload and the headers go to go-redis as they lie in the event, not
// boxed copies: each box was an allocation per entry of every append. The
// one allocation left is occurred_at's text, and its box.
func TestBase_AppendFieldsPassesBytesUnboxed(t *testing.T) {
	s := &base{}
	e := &outbox.Event{MessageID: "01J0000000000000000000000A", AggregateType: "order", AggregateID: "o-1", EventType: "order.created",
		Payload: []byte(`{"total":4200}`), Headers: []byte(`{"trace":"t-1"}`), OccurredAt: time.Unix(1700000000, 123456000), OutboxID: 7}
	args := s.appendFields(nil, e)
	for i := 0; i+1 < len(args); i += 2 {
		want, ok := map[string][]byte{entry.FieldPayload: e.Payload, entry.FieldHeaders: e.Headers}[args[i].(string)]
		if !ok {
			continue
		}
		m, isM := args[i+1].(encoding.BinaryMarshaler)
		if !isM {
			t.Fatalf("%s passed as %T, want a BinaryMarshaler of the event's bytes", args[i], args[i+1])
		}
		got, err := m.MarshalBinary()
		if err != nil || string(got) != string(want) || &got[0] != &want[0] {
			t.Errorf("%s: MarshalBinary = %q, %v; want the event's own %q", args[i], got, err, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { args = s.appendFields(args[:0], e) }); n > 2 {
		t.Errorf("appendFields allocates %.0f times per entry, want at most 2 (occurred_at)", n)
	}
}
