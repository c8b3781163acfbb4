package canal

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// TestDecodeRow_Charsets checks that text columns become UTF-8 from the
// character set of their collation in the table map, or of the proven
// layout for rows without one, that binary columns pass untouched, and
// that a character set the relay cannot convert makes a dead letter that
// says so rather than an entry of raw bytes.
func TestDecodeRow_Charsets(t *testing.T) {
	collations := map[uint64]string{8: "latin1", 13: "sjis", 45: "utf8mb4", 63: "binary"}
	row := func() []any {
		return []any{int64(1), "m-1", "order", "Z\xfcrich", "prix\x99", []byte("caf\xe9"), []byte("{\"k\":\"\x99\"}"), "2024-05-06 07:08:09"}
	}
	// DefaultCharset: the default collation, then (index among the
	// character columns, collation) pairs; JSON is none on MySQL.
	// Character columns: message_id, aggregate_type, aggregate_id,
	// event_type, payload.
	named := func() *rowDecoder {
		d := newRowDecoder(schema.DefaultMapping(), nil, nil, nil)
		d.collations = collations
		return d
	}
	tests := []struct {
		name        string
		dec         *rowDecoder
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
		{"no collations in the table map: the proven layout's", func() *rowDecoder {
			cols := tableColumns()
			cols[3].Charset, cols[4].Charset, cols[5].Charset = "latin1", "latin1", "binary"
			d := newRowDecoder(schema.DefaultMapping(), nil, cols, nil)
			d.collations = collations
			return d
		}(), nil, false, "Zürich", "prix™", "caf\xe9", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := outboxTableMap(tt.withNames)
			tm.ColumnMeta = make([]uint16, len(tm.ColumnType))
			tm.DefaultCharset = tt.defaults
			l, err := tt.dec.layoutFor(tm)
			if err != nil {
				t.Fatal(err)
			}
			e := decodeRow(l, row())
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

// The tenants of a pattern share a decoder, whose layout cache must not
// carry one tenant's character sets over to another whose table map has
// the same names and types: latin1 and utf8mb4 tenants, in turn, each
// decoded with its own.
func TestTableSet_SharedDecoderKeepsEachTablesCharsets(t *testing.T) {
	src := newSourceSet([]Source{{Pattern: schema.Pattern{Database: "tenant_*", Table: "outbox"}}}, 0, nil)
	ts := newTableSet(src, layoutProof{}, map[uint64]string{8: "latin1", 45: "utf8mb4"})
	tenant := func(db string, collation uint64) *replication.TableMapEvent {
		tm := tenantTableMap(db, true)
		tm.ColumnMeta = make([]uint16, len(tm.ColumnType))
		tm.DefaultCharset = []uint64{collation}
		return tm
	}
	latin, utf8 := tenant("tenant_01", 8), tenant("tenant_02", 45)
	fl, fu := ts.lookup(latin), ts.lookup(utf8)
	if fl == nil || fu == nil || fl.dec != fu.dec {
		t.Fatalf("tenants followed %v, %v: want both, with one decoder", fl != nil, fu != nil)
	}
	row := []any{int64(1), "m-1", "order", "Z\xfcrich", "created", []byte("caf\xe9"), nil, "2024-05-06 07:08:09"}
	for i, c := range []struct {
		tm          *replication.TableMapEvent
		f           *followed
		aggregateID string
	}{{latin, fl, "Zürich"}, {utf8, fu, "Z\xfcrich"}, {tenant("tenant_01", 8), fl, "Zürich"}, {tenant("tenant_02", 45), fu, "Z\xfcrich"}} {
		l, err := c.f.dec.layoutFor(c.tm)
		if err != nil {
			t.Fatal(err)
		}
		if e := decodeRow(l, row); e.AggregateID != c.aggregateID {
			t.Errorf("table map %d (%s): aggregate_id %q, want %q", i, c.tm.Schema, e.AggregateID, c.aggregateID)
		}
	}
}
