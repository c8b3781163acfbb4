package binlogrow

import (
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// TestLayout_EventCharsets checks that text columns become UTF-8 from the
// character set of their collation in the table map, or of the proven
// layout for rows without one, that binary columns pass untouched, and
// that a character set the relay cannot convert makes a dead letter that
// says so rather than an entry of raw bytes.
func TestLayout_EventCharsets(t *testing.T) {
	collations := map[uint64]string{8: "latin1", 13: "sjis", 45: "utf8mb4", 63: "binary"}
	row := func() []any {
		return []any{int64(1), "m-1", "order", "Z\xfcrich", "prix\x99", []byte("caf\xe9"), []byte("{\"k\":\"\x99\"}"), "2024-05-06 07:08:09"}
	}
	// DefaultCharset: the default collation, then (index among the
	// character columns, collation) pairs; JSON is none on MySQL.
	// Character columns: message_id, aggregate_type, aggregate_id,
	// event_type, payload.
	named := func() *Decoder { return NewDecoder(schema.DefaultMapping(), nil, nil, nil, collations) }
	tests := []struct {
		name        string
		dec         *Decoder
		defaults    []uint64
		withNames   bool
		aggregateID string
		eventType   string
		payload     string
		invalid     string
	}{
		{"latin1 text, a binary payload", named(), []uint64{8, 4, 63}, true, "Zürich", "prix™", "caf\xe9", ""},
		{"latin1 payload", named(), []uint64{8}, true, "Zürich", "prix™", "café", ""},
		{"utf8mb4 passes", named(), []uint64{45}, true, "Z\xfcrich", "prix\x99", "caf\xe9", ""},
		{"a character set without a conversion", named(), []uint64{8, 3, 13, 4, 63}, true, "", "", "",
			"event_type is in character set sjis, which the relay cannot convert to UTF-8"},
		{"a collation the server did not list", named(), []uint64{8, 3, 999, 4, 63}, true, "", "", "",
			"event_type is in character set unknown (collation id 999)"},
		{"no collations in the table map: the proven layout's", func() *Decoder {
			cols := tableColumns()
			cols[3].Charset, cols[4].Charset, cols[5].Charset = "latin1", "latin1", "binary"
			return NewDecoder(schema.DefaultMapping(), nil, cols, nil, collations)
		}(), nil, false, "Zürich", "prix™", "caf\xe9", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := binlogtest.OutboxTableMap(tt.withNames)
			tm.ColumnMeta = make([]uint16, len(tm.ColumnType))
			tm.DefaultCharset = tt.defaults
			l, err := tt.dec.Layout(tm)
			if err != nil {
				t.Fatal(err)
			}
			e := l.Event(row())
			if tt.invalid != "" {
				if !strings.Contains(e.Invalid, tt.invalid) || !strings.Contains(e.Invalid, "CONVERT TO CHARACTER SET utf8mb4") {
					t.Errorf("Invalid = %q, want it to say %q and the fix", e.Invalid, tt.invalid)
				}
				return
			}
			if e.Invalid != "" {
				t.Fatalf("Invalid = %q", e.Invalid)
			}
			if e.AggregateID != tt.aggregateID || e.EventType != tt.eventType || string(e.Payload) != tt.payload || e.MessageID != "m-1" {
				t.Errorf("got %q %q %q %q, want %q %q %q %q", e.MessageID, e.AggregateID, e.EventType, e.Payload, "m-1", tt.aggregateID, tt.eventType, tt.payload)
			}
			// JSON carries no collation: as it is.
			if string(e.Headers) != `{"k":"`+"\x99"+`"}` {
				t.Errorf("headers %q changed", e.Headers)
			}
		})
	}
}
