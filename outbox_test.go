package outbox

import (
	"math"
	"strings"
	"testing"
)

func TestEvent_Size(t *testing.T) {
	tests := []struct {
		name string
		e    Event
		want int
	}{
		{"empty", Event{}, 128},
		{"every field", Event{OutboxID: 7, MessageID: "m1", AggregateType: "order", AggregateID: "42", EventType: "created",
			Payload: []byte(`{"a":1}`), Headers: []byte(`{}`), Invalid: "payload is NULL"}, 128 + 2 + 5 + 2 + 7 + 7 + 2 + 15},
		{"carried fields", Event{Fields: []Field{{"schema_version", "2"}, {"tenant", "acme"}}}, 128 + (48 + 14 + 1) + (48 + 6 + 4)},
		{"large payload", Event{Payload: []byte(strings.Repeat("x", 1<<20))}, 128 + 1<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Size(); got != tt.want {
				t.Errorf("Size() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestEventSize(t *testing.T) {
	tests := []struct {
		name       string
		fieldBytes int64
		want       int
	}{
		{"none", 0, 128},
		{"some", 1000, 1128},
		{"saturates", math.MaxInt64 - 128, math.MaxInt32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EventSize(tt.fieldBytes); got != tt.want {
				t.Errorf("EventSize(%d) = %d, want %d", tt.fieldBytes, got, tt.want)
			}
		})
	}
}
