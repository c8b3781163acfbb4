package binlogrow

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/charset"
	"github.com/binlog-outbox/binlog-outbox/internal/eventrow"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// tableColumns is the default outbox table's layout as the reader reads it
// at start-up.
func tableColumns() (cols []Column) {
	for _, c := range binlogtest.Columns {
		cols = append(cols, Column{Name: c.Name, DataType: c.DataType})
	}
	return cols
}

func defaultLayout(t testing.TB) Layout {
	t.Helper()
	l, err := NewDecoder(schema.DefaultMapping(), nil, nil, nil, nil).Layout(binlogtest.OutboxTableMap(true))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecoder_LayoutByName(t *testing.T) {
	full := Layout{id: 0, messageID: 1, aggregateType: 2, aggregateID: 3, eventType: 4, payload: 5, headers: 6, occurredAt: 7, columnCount: 8}
	tests := []struct {
		name    string
		mapping []string // --column flags
		columns []string
		want    Layout
	}{
		{
			name:    "default",
			columns: []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "occurred_at"},
			want:    full,
		},
		{
			name:    "case-insensitive names",
			columns: []string{"ID", "Message_Id", "AGGREGATE_TYPE", "aggregate_ID", "Event_Type", "PAYLOAD", "Headers", "Occurred_At"},
			want:    full,
		},
		{
			name:    "renamed and reordered columns",
			mapping: []string{"id=outbox_id", "payload=body", "event_type=kind", "occurred_at=created_at"},
			columns: []string{"body", "kind", "outbox_id", "aggregate_id", "created_at", "extra", "message_id", "aggregate_type", "headers"},
			want:    Layout{id: 2, messageID: 6, aggregateType: 7, aggregateID: 3, eventType: 1, payload: 0, headers: 8, occurredAt: 4, columnCount: 9},
		},
		{
			name:    "optional columns mapped away",
			mapping: []string{"message_id=-", "aggregate_type=", "headers=-"},
			columns: []string{"id", "aggregate_id", "event_type", "payload", "occurred_at"},
			want:    Layout{id: 0, messageID: -1, aggregateType: -1, aggregateID: 1, eventType: 2, payload: 3, headers: -1, occurredAt: 4, columnCount: 5},
		},
		{
			// An event written before ALTER TABLE ... ADD COLUMN headers.
			name:    "optional column missing from an old event",
			columns: []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "occurred_at"},
			want:    Layout{id: 0, messageID: 1, aggregateType: 2, aggregateID: 3, eventType: 4, payload: 5, headers: -1, occurredAt: 6, columnCount: 7},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := schema.ParseMapping(tt.mapping)
			if err != nil {
				t.Fatal(err)
			}
			types := make([]byte, len(tt.columns))
			for i := range types {
				types[i] = mysql.MYSQL_TYPE_VARCHAR
			}
			got, err := NewDecoder(m, nil, nil, nil, nil).Layout(binlogtest.TableMap("app", "outbox", tt.columns, types))
			if err != nil {
				t.Fatalf("Layout: %v", err)
			}
			// None of the tables has schema_version: it reads as NULL.
			tt.want.fields = []fieldIndex{{name: schema.ColSchemaVersion, index: -1}}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("layout:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDecoder_AbsentColumnAdded checks that an optional column the table
// lacked at start-up stops the reader once an event carries it (ALTER TABLE
// added it), instead of being left out of the entries unnoticed.
func TestDecoder_AbsentColumnAdded(t *testing.T) {
	m, err := schema.ParseMapping([]string{"aggregate_type=-", "headers=-"})
	if err != nil {
		t.Fatal(err)
	}
	before := []string{"id", "message_id", "aggregate_id", "event_type", "payload", "occurred_at"}
	after := append(slices.Clone(before), "Aggregate_Type")
	d := NewDecoder(m, nil, nil, []string{schema.ColAggregateType}, nil)
	if _, err := d.Layout(binlogtest.TableMap("app", "outbox", before, make([]byte, len(before)))); err != nil {
		t.Fatalf("Layout before the ALTER: %v", err)
	}
	_, err = d.Layout(binlogtest.TableMap("app", "outbox", after, make([]byte, len(after))))
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "Aggregate_Type") || !strings.Contains(outbox.HintOf(err), "restart") {
		t.Fatalf("Layout after the ALTER: got %v (hint %q), want an ErrConfig naming the column, with a hint to restart", err, outbox.HintOf(err))
	}
	// Declared absent by the user (--column headers=-): a headers column
	// stays ignored.
	withHeaders := append(slices.Clone(before), "headers")
	if _, err := d.Layout(binlogtest.TableMap("app", "outbox", withHeaders, make([]byte, len(withHeaders)))); err != nil {
		t.Fatalf("Layout with a declared-absent column: %v", err)
	}
}

func TestDecoder_LayoutByNameMissingRequired(t *testing.T) {
	m, err := schema.ParseMapping([]string{"payload=body"})
	if err != nil {
		t.Fatal(err)
	}
	// The table still calls it payload: the mapping is wrong, or the event
	// predates a rename.
	names := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "occurred_at"}
	_, err = NewDecoder(m, nil, nil, nil, nil).Layout(binlogtest.TableMap("app", "outbox", names, make([]byte, len(names))))
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("error: got %v, want one wrapping ErrConfig", err)
	}
	for _, want := range []string{`"body"`, "payload", "app.outbox"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if hint := outbox.HintOf(err); !strings.Contains(hint, "--column payload=") {
		t.Errorf("hint: got %q, want it to say --column payload=<name>", hint)
	}
}

func TestDecoder_LayoutByPosition(t *testing.T) {
	good := binlogtest.OutboxTableMap(false)
	tests := []struct {
		name    string
		tm      *replication.TableMapEvent
		wantErr string // in the error text; "" for success
	}{
		{name: "same count and types", tm: good},
		{
			name:    "fewer columns",
			tm:      binlogtest.TableMap("app", "outbox", nil, good.ColumnType[:7]),
			wantErr: "have 7 columns but the table has 8",
		},
		{
			name:    "more columns",
			tm:      binlogtest.TableMap("app", "outbox", nil, append(append([]byte{}, good.ColumnType...), mysql.MYSQL_TYPE_LONG)),
			wantErr: "have 9 columns but the table has 8",
		},
		{
			name: "type changed",
			tm: binlogtest.TableMap("app", "outbox", nil, func() []byte {
				ts := append([]byte{}, good.ColumnType...)
				ts[5] = mysql.MYSQL_TYPE_LONGLONG // payload was a blob
				return ts
			}()),
			wantErr: "binlog column 6",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewDecoder(schema.DefaultMapping(), nil, tableColumns(), nil, nil).Layout(tt.tm)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Layout: %v", err)
				}
				if want := defaultLayout(t); !reflect.DeepEqual(l, want) {
					t.Errorf("layout:\n got %+v\nwant %+v", l, want)
				}
				return
			}
			if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error: got %v, want ErrConfig mentioning %q", err, tt.wantErr)
			}
			if hint := outbox.HintOf(err); !strings.Contains(hint, "binlog_row_metadata=FULL") {
				t.Errorf("hint: got %q, want it to mention binlog_row_metadata=FULL", hint)
			}
		})
	}
}

// The positional layout is cached for identical table maps, but a changed
// table map (after an ALTER) must be checked again.
func TestDecoder_LayoutCache(t *testing.T) {
	d := NewDecoder(schema.DefaultMapping(), nil, tableColumns(), nil, nil)
	if _, err := d.Layout(binlogtest.OutboxTableMap(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Layout(binlogtest.OutboxTableMap(false)); err != nil {
		t.Fatalf("identical table map: %v", err)
	}
	altered := binlogtest.OutboxTableMap(false)
	altered.ColumnType[0] = mysql.MYSQL_TYPE_VARCHAR
	if _, err := d.Layout(altered); err == nil {
		t.Fatal("a table map with another column type reused the cached layout")
	}

	// By name: reordered columns with the same types give another layout.
	d = NewDecoder(schema.DefaultMapping(), nil, nil, nil, nil)
	types := make([]byte, 8)
	a := binlogtest.TableMap("app", "outbox", []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "occurred_at"}, types)
	b := binlogtest.TableMap("app", "outbox", []string{"id", "message_id", "aggregate_type", "event_type", "aggregate_id", "payload", "headers", "occurred_at"}, types)
	la, err := d.Layout(a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := d.Layout(b)
	if err != nil {
		t.Fatal(err)
	}
	if la.aggregateID != 3 || lb.aggregateID != 4 || lb.eventType != 3 {
		t.Errorf("layouts after a column swap: got %+v then %+v", la, lb)
	}
}

func TestLayout_Compatible(t *testing.T) {
	tests := []struct {
		binlog   byte
		dataType string
		want     bool
	}{
		{mysql.MYSQL_TYPE_LONGLONG, "bigint", true},
		{mysql.MYSQL_TYPE_LONG, "INT", true},
		{mysql.MYSQL_TYPE_STRING, "char", true},
		{mysql.MYSQL_TYPE_STRING, "enum", true},
		{mysql.MYSQL_TYPE_VARCHAR, "varbinary", true},
		{mysql.MYSQL_TYPE_BLOB, "longtext", true}, // MariaDB JSON
		{mysql.MYSQL_TYPE_JSON, "json", true},
		{mysql.MYSQL_TYPE_DATETIME2, "datetime", true},
		{mysql.MYSQL_TYPE_TIMESTAMP2, "timestamp", true},
		{mysql.MYSQL_TYPE_NEWDECIMAL, "decimal", true},
		{mysql.MYSQL_TYPE_LONGLONG, "varchar", false},
		{mysql.MYSQL_TYPE_BLOB, "varchar", false},
		{mysql.MYSQL_TYPE_VARCHAR, "datetime", false},
	}
	for _, tt := range tests {
		if got := compatible(tt.binlog, tt.dataType); got != tt.want {
			t.Errorf("compatible(%d, %q): got %v, want %v", tt.binlog, tt.dataType, got, tt.want)
		}
	}
}

// TestLayout_Columns: a row fits its layout when it has as many values as
// the table map the layout was made for has columns; the reader stops at any
// other (canal's TestMachine_RowCountMismatchStops).
func TestLayout_Columns(t *testing.T) {
	full := binlogtest.OutboxTableMap(true)
	names := make([]string, len(full.ColumnName))
	for i, n := range full.ColumnName {
		names[i] = string(n)
	}
	withoutHeaders := slices.Delete(slices.Clone(names), 6, 7)
	for _, tt := range []struct {
		name    string
		columns []Column // the proven layout for rows without names
		tm      *replication.TableMapEvent
		want    int
	}{
		{"by name", nil, full, 8},
		{"by name, written before a column was added", nil, binlogtest.TableMap("app", "outbox", withoutHeaders, slices.Delete(slices.Clone(full.ColumnType), 6, 7)), 7},
		// A table map whose names disagree with its own count: the rows
		// come with the count, the layout with the names.
		{"by name, fewer names than columns", nil, binlogtest.TableMap("app", "outbox", withoutHeaders, full.ColumnType), 7},
		{"by position", tableColumns(), binlogtest.OutboxTableMap(false), 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewDecoder(schema.DefaultMapping(), nil, tt.columns, nil, nil).Layout(tt.tm)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Columns(); got != tt.want {
				t.Fatalf("Columns() = %d, want %d", got, tt.want)
			}
			for _, n := range []int{tt.want - 1, tt.want + 1} {
				row := make([]any, n)
				if e := l.Event(row); e.Invalid == "" {
					t.Errorf("Event of a row of %d values: valid, want it marked invalid", n)
				}
			}
		})
	}
}

// TestLayout_SkippedColumn: a column a row image leaves out
// (binlog_row_image=MINIMAL or NOBLOB) stops the relay when the relay reads
// it, and is no concern when it does not.
func TestLayout_SkippedColumn(t *testing.T) {
	l := defaultLayout(t)
	noMessageID := l
	noMessageID.messageID = -1
	for _, tt := range []struct {
		name    string
		l       Layout
		skipped []int
		column  string
		pos     int
	}{
		{"none", l, nil, "", 0},
		{"payload (NOBLOB)", l, []int{5}, "payload", 6},
		{"headers left out by the INSERT (MINIMAL)", l, []int{6}, "headers", 7},
		{"a column the relay does not read", noMessageID, []int{1}, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			column, pos, ok := tt.l.SkippedColumn(tt.skipped)
			if column != tt.column || pos != tt.pos || ok != (tt.column != "") {
				t.Errorf("SkippedColumn(%v) = %q, %d, %v; want %q, %d", tt.skipped, column, pos, ok, tt.column, tt.pos)
			}
		})
	}
}

func TestLayout_Event(t *testing.T) {
	l := defaultLayout(t)
	noMessageID := l
	noMessageID.messageID = -1
	const noTime = "occurred_at is NULL or a zero date"
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)

	with := func(i int, v any) []any {
		r := binlogtest.OutboxRow(7, `{"a":1}`)
		r[i] = v
		return r
	}
	tests := []struct {
		name string
		l    Layout
		row  []any
		want outbox.Event
	}{
		{
			name: "typical row",
			l:    l, row: binlogtest.OutboxRow(7, `{"a":1}`),
			want: outbox.Event{OutboxID: 7, MessageID: "m-7", AggregateType: "order", AggregateID: "42", EventType: "created",
				Payload: []byte(`{"a":1}`), Headers: []byte(`{"k":"v"}`), OccurredAt: at},
		},
		{
			// MariaDB without signedness in the table map.
			name: "BIGINT UNSIGNED as negative int64",
			l:    l, row: with(0, int64(-1)),
			want: outbox.Event{OutboxID: math.MaxUint64},
		},
		{name: "int32 id", l: l, row: with(0, int32(12)), want: outbox.Event{OutboxID: 12}},
		{name: "INT UNSIGNED as negative int32", l: l, row: with(0, int32(-1)), want: outbox.Event{OutboxID: math.MaxUint32}},
		{name: "uint64 id", l: l, row: with(0, uint64(math.MaxUint64)), want: outbox.Event{OutboxID: math.MaxUint64}},
		{name: "string id", l: l, row: with(0, "18446744073709551615"), want: outbox.Event{OutboxID: math.MaxUint64}},
		{name: "[]byte id", l: l, row: with(0, []byte("99")), want: outbox.Event{OutboxID: 99}},
		{
			name: "message_id absent: decimal id",
			l:    noMessageID, row: with(0, uint64(18446744073709551615)),
			want: outbox.Event{OutboxID: math.MaxUint64, MessageID: "18446744073709551615"},
		},
		{name: "string payload", l: l, row: with(5, `{"s":true}`), want: outbox.Event{Payload: []byte(`{"s":true}`)}},
		{name: "empty JSON payload", l: l, row: with(5, []byte{}), want: outbox.Event{Payload: []byte{}}},
		{name: "NULL headers", l: l, row: with(6, nil), want: outbox.Event{Headers: nil}},
		{name: "NULL payload", l: l, row: with(5, nil), want: outbox.Event{Invalid: "payload is NULL"}},
		{name: "NULL aggregate_id", l: l, row: with(3, nil), want: outbox.Event{Invalid: "aggregate_id is NULL"}},
		{name: "NULL event_type", l: l, row: with(4, nil), want: outbox.Event{Invalid: "event_type is NULL"}},
		{name: "NULL message_id", l: l, row: with(1, nil), want: outbox.Event{Invalid: "message_id is NULL or empty"}},
		{name: "empty message_id", l: l, row: with(1, ""), want: outbox.Event{Invalid: "message_id is NULL or empty"}},
		{name: "float id", l: l, row: with(0, 1.5), want: outbox.Event{Invalid: "id 1.5 is not an unsigned integer"}},
		{name: "negative string id", l: l, row: with(0, "-3"), want: outbox.Event{Invalid: "id -3 is not an unsigned integer"}},
		{name: "NULL occurred_at", l: l, row: with(7, nil), want: outbox.Event{Invalid: noTime}},
		{name: "zero DATETIME", l: l, row: with(7, "0000-00-00 00:00:00"), want: outbox.Event{Invalid: noTime}},
		{name: "zero DATETIME(6)", l: l, row: with(7, "0000-00-00 00:00:00.000000"), want: outbox.Event{Invalid: noTime}},
		{name: "zero time.Time", l: l, row: with(7, time.Time{}), want: outbox.Event{Invalid: noTime}},
		{name: "garbage occurred_at", l: l, row: with(7, "yesterday"), want: outbox.Event{Invalid: noTime}},
		{name: "DATETIME without fraction", l: l, row: with(7, "2024-05-06 07:08:09"), want: outbox.Event{OccurredAt: at.Truncate(time.Second)}},
		{name: "DATETIME(3)", l: l, row: with(7, "2024-05-06 07:08:09.120"), want: outbox.Event{OccurredAt: at.Truncate(time.Second).Add(120 * time.Millisecond)}},
		// Laravel's jobs.available_at: INT UNSIGNED of Unix seconds, which
		// the syncer decodes as a signed int32 (past 2038 negative).
		{name: "INT of Unix seconds", l: l, row: with(7, int32(at.Unix())), want: outbox.Event{OccurredAt: at.Truncate(time.Second)}},
		{name: "INT UNSIGNED past 2038", l: l, row: with(7, int32(-1)), want: outbox.Event{OccurredAt: time.Unix(1<<32-1, 0).UTC()}},
		{name: "BIGINT of Unix seconds", l: l, row: with(7, at.Unix()), want: outbox.Event{OccurredAt: at.Truncate(time.Second)}},
		{name: "zero INT", l: l, row: with(7, int32(0)), want: outbox.Event{Invalid: noTime}},
		{
			name: "time.Time in another zone",
			l:    l, row: with(7, at.In(time.FixedZone("CEST", 2*3600))),
			want: outbox.Event{OccurredAt: at},
		},
		{name: "short row", l: l, row: binlogtest.OutboxRow(7, "x")[:7], want: outbox.Event{Invalid: "row has 7 values, the table map 8 columns"}},
		{
			name: "several problems",
			l:    l, row: []any{int64(1), "m", "order", nil, nil, nil, nil, nil},
			want: outbox.Event{Invalid: "aggregate_id is NULL; event_type is NULL; payload is NULL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.Event(tt.row)
			// Only the fields a case sets are compared, plus Invalid always.
			if !strings.HasPrefix(got.Invalid, tt.want.Invalid) || (tt.want.Invalid == "" && got.Invalid != "") {
				t.Fatalf("Invalid: got %q, want %q", got.Invalid, tt.want.Invalid)
			}
			if tt.want.Invalid != "" {
				return
			}
			w := tt.want
			if w.OutboxID != 0 && got.OutboxID != w.OutboxID {
				t.Errorf("OutboxID: got %d, want %d", got.OutboxID, w.OutboxID)
			}
			if w.MessageID != "" && got.MessageID != w.MessageID {
				t.Errorf("MessageID: got %q, want %q", got.MessageID, w.MessageID)
			}
			if w.AggregateType != "" && got.AggregateType != w.AggregateType {
				t.Errorf("AggregateType: got %q, want %q", got.AggregateType, w.AggregateType)
			}
			if w.AggregateID != "" && got.AggregateID != w.AggregateID {
				t.Errorf("AggregateID: got %q, want %q", got.AggregateID, w.AggregateID)
			}
			if w.EventType != "" && got.EventType != w.EventType {
				t.Errorf("EventType: got %q, want %q", got.EventType, w.EventType)
			}
			if w.Payload != nil && string(got.Payload) != string(w.Payload) {
				t.Errorf("Payload: got %q, want %q", got.Payload, w.Payload)
			}
			if w.Payload != nil && got.Payload == nil {
				t.Errorf("Payload: got nil, want %q (a present empty payload is not NULL)", w.Payload)
			}
			if strings.HasPrefix(tt.name, "NULL headers") && got.Headers != nil {
				t.Errorf("Headers: got %q, want nil", got.Headers)
			}
			if w.Headers != nil && string(got.Headers) != string(w.Headers) {
				t.Errorf("Headers: got %q, want %q", got.Headers, w.Headers)
			}
			if !w.OccurredAt.IsZero() && !got.OccurredAt.Equal(w.OccurredAt) {
				t.Errorf("OccurredAt: got %v, want %v", got.OccurredAt, w.OccurredAt)
			}
			if got.OccurredAt.Location() != time.UTC {
				t.Errorf("OccurredAt location: got %v, want UTC", got.OccurredAt.Location())
			}
		})
	}
}

// TestLayout_EventCopiesStringsSharesPayload: the strings of an Event are
// copies (the decoder's alias the event's bytes, and a short string must not
// keep a whole event alive), the payload and headers are the event's own
// bytes, capped at their length, so that no append writes past them.
func TestLayout_EventCopiesStringsSharesPayload(t *testing.T) {
	l := defaultLayout(t)
	buf := []byte("m-1|order|agg-9|created|{\"p\":1}|{\"h\":2}")
	// Strings that alias buf, as the decoder produces them.
	str := func(from, to int) string { return unsafeString(buf[from:to]) }
	row := []any{int64(1), str(0, 3), str(4, 9), str(10, 15), str(16, 23), buf[24:31], buf[32:39], "2024-05-06 07:08:09"}
	e := l.Event(row)
	if e.Invalid != "" {
		t.Fatal(e.Invalid)
	}
	for _, c := range []struct {
		name string
		got  []byte
		at   int
	}{{"payload", e.Payload, 24}, {"headers", e.Headers, 32}} {
		if len(c.got) == 0 || &c.got[0] != &buf[c.at] || cap(c.got) != len(c.got) {
			t.Errorf("%s %q (cap %d): want the row's own bytes at %d, capped at their length", c.name, c.got, cap(c.got), c.at)
		}
	}
	want := outbox.Event{MessageID: "m-1", AggregateType: "order", AggregateID: "agg-9", EventType: "created"}
	for i := range buf {
		buf[i] = 'X'
	}
	if e.MessageID != want.MessageID || e.AggregateType != want.AggregateType || e.AggregateID != want.AggregateID || e.EventType != want.EventType {
		t.Errorf("after the buffer changed:\n got %q %q %q %q\nwant %q %q %q %q",
			e.MessageID, e.AggregateType, e.AggregateID, e.EventType,
			want.MessageID, want.AggregateType, want.AggregateID, want.EventType)
	}
}

// FuzzLayoutEvent decodes rows of arbitrary Go values of the kinds the binlog
// decoder produces: Layout.Event must not panic, and an event it calls valid
// must be deliverable. With latin1 every text column is in that character
// set, and a valid event's text must be UTF-8 whatever the bytes.
func FuzzLayoutEvent(f *testing.F) {
	f.Add([]byte{0, 7, 2, 'm', 2, 'o', 2, 'a', 2, 'e', 3, '{', 2, '{', 2, '2'}, uint8(0), false, false)
	f.Add([]byte{1, 0xff, 0xff, 4, 5, 3, 'x', 2, 2, 2, 2}, uint8(1), true, false)
	f.Add([]byte{}, uint8(2), false, true)
	f.Add([]byte{5, 5, 5, 5, 5, 5, 5, 5}, uint8(3), true, true)
	f.Add([]byte{0, 7, 2, 0xe9, 2, 0x80, 2, 0x99, 2, 0x81, 3, '{', 0xff, 2, '{', 2, '2'}, uint8(1), true, true)
	l := defaultLayout(f)
	noMessageID := l
	noMessageID.messageID = -1
	latin1, _ := charset.Lookup("latin1")
	f.Fuzz(func(t *testing.T, data []byte, skip uint8, withMessageID, inLatin1 bool) {
		lay := l
		if !withMessageID {
			lay = noMessageID
		}
		if inLatin1 {
			lay.text = textCharsets{latin1, latin1, latin1, latin1, latin1, latin1}
		}
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		take := func() []byte {
			n := int(next() % 24)
			n = min(n, len(data))
			s := data[:n]
			data = data[n:]
			return s
		}
		num := func() uint64 {
			var v uint64
			for range 8 {
				v = v<<8 | uint64(next())
			}
			return v
		}
		// Mostly full rows; sometimes one value more or less.
		n := lay.columnCount
		switch next() % 16 {
		case 0:
			n--
		case 1:
			n++
		}
		row := make([]any, n)
		for i := range row {
			switch next() % 7 {
			case 0:
				row[i] = int64(num())
			case 1:
				row[i] = num()
			case 2:
				row[i] = string(take())
			case 3:
				row[i] = take()
			case 4:
				row[i] = nil
			case 5:
				row[i] = math.Float64frombits(num())
			case 6:
				row[i] = int32(num())
			}
		}
		var skipped []int
		if skip%5 == 0 {
			skipped = []int{int(skip % 11)}
		}
		if _, _, ok := lay.SkippedColumn(skipped); ok {
			return // the reader stops at such a row
		}
		e := lay.Event(row)
		if e.Invalid != "" {
			return
		}
		if e.OccurredAt.IsZero() || e.OccurredAt.Location() != time.UTC {
			t.Errorf("valid event with OccurredAt %v", e.OccurredAt)
		}
		if e.Payload == nil {
			t.Errorf("valid event with a nil payload")
		}
		if lay.messageID < 0 {
			if want := strconv.FormatUint(e.OutboxID, 10); e.MessageID != want {
				t.Errorf("MessageID: got %q, want the decimal OutboxID %q", e.MessageID, want)
			}
		} else if e.MessageID == "" {
			t.Errorf("valid event with an empty MessageID")
		}
		if id, ok := eventrow.ToUint64(row[lay.id]); !ok || id != e.OutboxID {
			t.Errorf("OutboxID: got %d from %#v", e.OutboxID, row[lay.id])
		}
		if inLatin1 {
			for _, v := range []string{e.MessageID, e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), string(e.Headers)} {
				if !utf8.ValidString(v) {
					t.Errorf("latin1 text decoded to %q, no UTF-8", v)
				}
			}
		}
	})
}

// unsafeString returns a string that shares b's memory, like the strings the
// binlog decoder returns for VARCHAR and CHAR columns.
func unsafeString(b []byte) string { return unsafe.String(&b[0], len(b)) }

// carriedTable is an outbox table with a renamed schema_version column and
// three extra columns, one of them INT UNSIGNED, as information_schema shows
// it, with the binlog type codes.
var carriedTable = []struct {
	Column
	binlogType byte
}{
	{Column{Name: "id", DataType: "bigint", Unsigned: true}, mysql.MYSQL_TYPE_LONGLONG},
	{Column{Name: "tenant_id", DataType: "varchar"}, mysql.MYSQL_TYPE_VARCHAR},
	{Column{Name: "aggregate_id", DataType: "varchar"}, mysql.MYSQL_TYPE_VARCHAR},
	{Column{Name: "event_type", DataType: "varchar"}, mysql.MYSQL_TYPE_VARCHAR},
	{Column{Name: "v", DataType: "smallint"}, mysql.MYSQL_TYPE_SHORT},
	{Column{Name: "payload", DataType: "longblob"}, mysql.MYSQL_TYPE_BLOB},
	{Column{Name: "occurred_at", DataType: "datetime"}, mysql.MYSQL_TYPE_DATETIME2},
	{Column{Name: "trace", DataType: "text"}, mysql.MYSQL_TYPE_BLOB},
	{Column{Name: "aggregate_version", DataType: "mediumint", Unsigned: true}, mysql.MYSQL_TYPE_INT24},
}

func carriedDecoder(t *testing.T, positional bool) (*Decoder, *replication.TableMapEvent) {
	t.Helper()
	m, err := schema.ParseMapping([]string{"message_id=-", "aggregate_type=-", "headers=-", "schema_version=v"})
	if err != nil {
		t.Fatal(err)
	}
	extra, err := schema.ParseExtraColumns([]string{"tenant_id=tenant", "trace", "aggregate_version"}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var cols []Column
	types := make([]byte, len(carriedTable))
	for i, c := range carriedTable {
		types[i] = c.binlogType
		names = append(names, c.Name)
		cols = append(cols, c.Column)
	}
	if positional {
		// MariaDB's default: neither names nor signedness in the table map.
		return NewDecoder(m, extra, cols, nil, nil), binlogtest.TableMap("app", "outbox", nil, types)
	}
	return NewDecoder(m, extra, nil, nil, nil), binlogtest.TableMap("app", "outbox", names, types)
}

// The schema_version column and the extra columns are found as the logical
// columns are, by name or by the proven layout, and decode alike either way:
// integers in decimal (UNSIGNED ones too where the table map has no
// signedness), text copied, NULL left out.
func TestDecoder_CarriedColumns(t *testing.T) {
	wantFields := []fieldIndex{{name: "schema_version", index: 4}, {name: "tenant", index: 1}, {name: "trace", index: 7}, {name: "aggregate_version", index: 8}}
	for _, positional := range []bool{false, true} {
		name := map[bool]string{false: "by name", true: "by position"}[positional]
		t.Run(name, func(t *testing.T) {
			d, tm := carriedDecoder(t, positional)
			l, err := d.Layout(tm)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(wantFields)
			if positional {
				want[3].unsigned = mysql.MYSQL_TYPE_INT24
			}
			if !reflect.DeepEqual(l.fields, want) {
				t.Fatalf("fields:\n got %+v\nwant %+v", l.fields, want)
			}
			// The values as the syncer gives them without signedness:
			// MEDIUMINT UNSIGNED 16777215 sign-extended to -1.
			version := any(int32(-1))
			if !positional {
				version = uint32(16777215)
			}
			row := []any{int64(7), "acme", "42", "created", int16(2), []byte(`{}`), "2024-05-06 07:08:09", nil, version}
			e := l.Event(row)
			wantEvent := []outbox.Field{{Name: "schema_version", Value: "2"}, {Name: "tenant", Value: "acme"}, {Name: "aggregate_version", Value: "16777215"}}
			if e.Invalid != "" || !slices.Equal(e.Fields, wantEvent) {
				t.Errorf("event fields = %v (invalid %q), want %v", e.Fields, e.Invalid, wantEvent)
			}
			// An extra column missing from the row image is no NULL.
			if name, pos, ok := l.SkippedColumn([]int{7}); !ok || name != "trace" || pos != 8 {
				t.Errorf("skipped extra column: SkippedColumn = %q, %d, %v; want trace, 8, true", name, pos, ok)
			}
		})
	}
}

// An extra column the rows lack stops the reader with the columns the rows
// have, in both layouts; a schema_version column they lack reads as NULL.
func TestDecoder_CarriedColumnMissing(t *testing.T) {
	m, err := schema.ParseMapping([]string{"message_id=-", "aggregate_type=-", "headers=-"})
	if err != nil {
		t.Fatal(err)
	}
	extra, err := schema.ParseExtraColumns([]string{"tenant_id"}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"id", "aggregate_id", "event_type", "payload", "occurred_at"}
	types := []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_DATETIME2}
	cols := []Column{{Name: "id", DataType: "bigint"}, {Name: "aggregate_id", DataType: "varchar"}, {Name: "event_type", DataType: "varchar"},
		{Name: "payload", DataType: "blob"}, {Name: "occurred_at", DataType: "datetime"}}
	for _, tt := range []struct {
		name string
		d    *Decoder
		tm   *replication.TableMapEvent
	}{
		{"by name", NewDecoder(m, extra, nil, nil, nil), binlogtest.TableMap("app", "outbox", names, types)},
		{"by position", NewDecoder(m, extra, cols, nil, nil), binlogtest.TableMap("app", "outbox", nil, types)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.d.Layout(tt.tm)
			if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), `"tenant_id" for --extra-column (columns: id, aggregate_id, event_type, payload, occurred_at)`) ||
				!strings.Contains(outbox.HintOf(err), "--extra-column tenant_id") {
				t.Errorf("Layout = %v (hint %q), want an ErrConfig naming the column and the columns there are", err, outbox.HintOf(err))
			}
			without := NewDecoder(m, nil, tt.d.columns, nil, nil)
			l, err := without.Layout(tt.tm)
			if err != nil || !reflect.DeepEqual(l.fields, []fieldIndex{{name: "schema_version", index: -1}}) {
				t.Errorf("without the extra column: fields %+v, %v; want schema_version read as NULL", l.fields, err)
			}
		})
	}
}
