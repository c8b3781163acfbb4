package eventrow

import (
	"math"
	"slices"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/charset"
)

func TestBuilder_Event(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	full := func(b *Builder) {
		b.ID(7)
		b.MessageID("m-7", true)
		b.AggregateType("order", true)
		b.AggregateID("42", true)
		b.EventType("created", true)
		b.Payload([]byte(`{}`), true)
		b.Headers([]byte(`{"k":"v"}`))
		b.OccurredAt(at)
	}
	const noTime = "occurred_at is NULL or a zero date; the relay does not invent a time"
	tests := []struct {
		name  string
		build func(b *Builder)
		want  outbox.Event
	}{
		{"full row", full, outbox.Event{OutboxID: 7, MessageID: "m-7", AggregateType: "order", AggregateID: "42", EventType: "created",
			Payload: []byte(`{}`), Headers: []byte(`{"k":"v"}`), OccurredAt: at}},
		{"no message_id column: decimal id", func(b *Builder) {
			b.ID(math.MaxUint64)
			b.MessageIDFromID()
			b.AggregateID("a", true)
			b.EventType("e", true)
			b.Payload([]byte{}, true)
			b.OccurredAt(at)
		}, outbox.Event{OutboxID: math.MaxUint64, MessageID: "18446744073709551615", AggregateID: "a", EventType: "e", Payload: []byte{}, OccurredAt: at}},
		{"NULL message_id", func(b *Builder) { full(b); b.MessageID("", false) },
			outbox.Event{Invalid: "message_id is NULL or empty"}},
		{"empty message_id", func(b *Builder) { full(b); b.MessageID("", true) },
			outbox.Event{Invalid: "message_id is NULL or empty"}},
		{"NULL aggregate_type", func(b *Builder) { full(b); b.AggregateType("", false) },
			outbox.Event{Invalid: "aggregate_type is NULL"}},
		{"NULL payload", func(b *Builder) { full(b); b.Payload(nil, false) },
			outbox.Event{Invalid: "payload is NULL"}},
		{"problems in call order", func(b *Builder) {
			b.Problem("id x is not an unsigned integer")
			b.MessageID("m", true)
			b.AggregateID("", false)
			b.EventType("", false)
			b.Payload(nil, false)
			b.Problem("payload is not valid JSON")
			b.OccurredAt(nil)
		}, outbox.Event{Invalid: "id x is not an unsigned integer; aggregate_id is NULL; event_type is NULL; payload is NULL; payload is not valid JSON; " + noTime}},
		{"zero occurred_at", func(b *Builder) { full(b); b.OccurredAt("0000-00-00 00:00:00") }, outbox.Event{Invalid: noTime}},
		{"zero occurred_at(6)", func(b *Builder) { full(b); b.OccurredAt("0000-00-00 00:00:00.000000") }, outbox.Event{Invalid: noTime}},
		{"zero time.Time", func(b *Builder) { full(b); b.OccurredAt(time.Time{}) }, outbox.Event{Invalid: noTime}},
		{"empty aggregate_type", func(b *Builder) { full(b); b.AggregateType("", true) }, outbox.Event{Invalid: "aggregate_type is empty"}},
		{"empty event_type", func(b *Builder) { full(b); b.EventType("", true) }, outbox.Event{Invalid: "event_type is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Builder
			tt.build(&b)
			got := b.Event()
			if got.Invalid != tt.want.Invalid {
				t.Fatalf("Invalid: got %q, want %q", got.Invalid, tt.want.Invalid)
			}
			if tt.want.Invalid != "" {
				return
			}
			if got.OutboxID != tt.want.OutboxID || got.MessageID != tt.want.MessageID || got.AggregateType != tt.want.AggregateType ||
				got.AggregateID != tt.want.AggregateID || got.EventType != tt.want.EventType ||
				string(got.Payload) != string(tt.want.Payload) || (got.Payload == nil) != (tt.want.Payload == nil) ||
				string(got.Headers) != string(tt.want.Headers) || !got.OccurredAt.Equal(tt.want.OccurredAt) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestToUint64(t *testing.T) {
	tests := []struct {
		v      any
		want   uint64
		wantOK bool
	}{
		{int8(-1), math.MaxUint8, true},
		{int16(-1), math.MaxUint16, true},
		{int32(-1), math.MaxUint32, true},
		{int64(-1), math.MaxUint64, true},
		{uint64(math.MaxUint64), math.MaxUint64, true},
		{int(5), 5, true},
		{"18446744073709551615", math.MaxUint64, true},
		{[]byte("99"), 99, true},
		{"-3", 0, false},
		{1.5, 0, false},
		{nil, 0, false},
	}
	for _, tt := range tests {
		got, ok := ToUint64(tt.v)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ToUint64(%#v) = %d, %v; want %d, %v", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestToString(t *testing.T) {
	tests := []struct {
		v      any
		want   string
		wantOK bool
	}{
		{nil, "", false},
		{"", "", true},
		{"abc", "abc", true},
		{[]byte("abc"), "abc", true},
		{int64(-4), "-4", true},
		{int32(12), "12", true},
		{uint64(math.MaxUint64), "18446744073709551615", true},
		{1.5, "1.5", true},
	}
	for _, tt := range tests {
		got, ok := ToString(tt.v)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ToString(%#v) = %q, %v; want %q, %v", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestToBytes(t *testing.T) {
	tests := []struct {
		v      any
		want   []byte
		wantOK bool
	}{
		{nil, nil, false},
		{[]byte{}, []byte{}, true},
		{[]byte("x"), []byte("x"), true},
		{"x", []byte("x"), true},
		{int64(3), []byte("3"), true},
	}
	for _, tt := range tests {
		got, ok := ToBytes(tt.v)
		if string(got) != string(tt.want) || (got == nil) != (tt.want == nil) || ok != tt.wantOK {
			t.Errorf("ToBytes(%#v) = %#v, %v; want %#v, %v", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

// The values copy: the binlog decoder's []byte alias its packet buffer.
func TestToBytes_Copies(t *testing.T) {
	buf := []byte("payload")
	got, _ := ToBytes(buf)
	buf[0] = 'X'
	if string(got) != "payload" {
		t.Errorf("after the buffer changed: got %q, want %q", got, "payload")
	}
}

// ToTextBytesShared returns a []byte that needs no conversion as it is,
// capped at its length; whatever it converts or reads from another type is
// a new slice, as ToTextBytes returns it.
func TestToTextBytesShared(t *testing.T) {
	latin1, _ := charset.Lookup("latin1")
	ascii := []byte("{\"a\":1}xyz")[:7]
	accented := []byte{'{', '"', 0xe9, '"', '}'}
	tests := []struct {
		name   string
		v      any
		c      charset.Charset
		want   string
		wantOK bool
		shared bool
	}{
		{"utf8mb4 bytes", ascii, charset.Charset{}, `{"a":1}`, true, true},
		{"latin1 bytes, all ASCII", ascii, latin1, `{"a":1}`, true, true},
		{"latin1 bytes to convert", accented, latin1, "{\"\u00e9\"}", true, false},
		{"empty", []byte{}, charset.Charset{}, "", true, false},
		{"string", "{}", charset.Charset{}, "{}", true, false},
		{"NULL", nil, charset.Charset{}, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ToTextBytesShared(tt.v, tt.c)
			if string(got) != tt.want || ok != tt.wantOK {
				t.Fatalf("got %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
			in, _ := tt.v.([]byte)
			shared := len(got) > 0 && len(in) > 0 && &got[0] == &in[0]
			if shared != tt.shared {
				t.Errorf("shares the value's bytes: %v, want %v", shared, tt.shared)
			}
			if shared && cap(got) != len(got) {
				t.Errorf("cap %d, want the length %d: an append would write into the bytes after the value", cap(got), len(got))
			}
		})
	}
}

func TestToTime(t *testing.T) {
	want := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	tests := []struct {
		name   string
		v      any
		want   time.Time
		wantOK bool
	}{
		{"time.Time", want, want, true},
		{"time.Time in another zone", want.In(time.FixedZone("CEST", 2*3600)), want, true},
		{"DATETIME(6) text", []byte("2026-11-29 10:00:00.123456"), want, true},
		{"DATETIME(6) string", "2026-11-29 10:00:00.123456", want, true},
		{"DATETIME", "2026-11-29 10:00:00", want.Truncate(time.Second), true},
		{"UNIX_TIMESTAMP text", []byte("1795946400.123456"), want, true},
		{"UNIX_TIMESTAMP integer", int64(1795946400), want.Truncate(time.Second), true},
		{"UNIX_TIMESTAMP float", 1795946400.123456, want, true},
		{"NULL", nil, time.Time{}, false},
		{"zero time.Time", time.Time{}, time.Time{}, false},
		{"zero DATETIME", "0000-00-00 00:00:00", time.Time{}, false},
		{"zero DATETIME(6)", []byte("0000-00-00 00:00:00.000000"), time.Time{}, false},
		{"empty", []byte(""), time.Time{}, false},
		{"garbage", "yesterday", time.Time{}, false},
		{"zero UNIX_TIMESTAMP", int64(0), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ToTime(tt.v)
			if ok != tt.wantOK || (ok && !got.Equal(tt.want)) {
				t.Fatalf("ToTime(%#v) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.wantOK)
			}
			if ok && got.Location() != time.UTC {
				t.Errorf("location %v, want UTC", got.Location())
			}
		})
	}
}

// Carried columns render alike from a binlog row (Go integers, strings
// aliasing the packet) and a text-protocol result (decimal bytes); a NULL
// leaves its field out, an empty value keeps it.
func TestBuilder_Field(t *testing.T) {
	packet := []byte("acme")
	var b Builder
	b.Field("schema_version", int32(3))
	b.Field("tenant", string(packet))
	b.Field("trace_id", nil)
	b.Field("note", []byte{})
	b.Field("version", []byte("18446744073709551615"))
	b.Field("seq", uint64(math.MaxUint64))
	b.Field("delta", int8(-1))
	b.Payload(nil, false)
	packet[0] = 'X'
	got := b.Event()
	want := []outbox.Field{{Name: "schema_version", Value: "3"}, {Name: "tenant", Value: "acme"}, {Name: "note", Value: ""}, {Name: "version", Value: "18446744073709551615"},
		{Name: "seq", Value: "18446744073709551615"}, {Name: "delta", Value: "-1"}}
	if !slices.Equal(got.Fields, want) {
		t.Errorf("Fields = %v, want %v", got.Fields, want)
	}
	if got.Invalid != "payload is NULL" {
		t.Errorf("Invalid = %q, want the payload problem (a dead letter keeps its fields)", got.Invalid)
	}
}

// parseDatetime answers as time.ParseInLocation does wherever it answers.
func FuzzParseDatetime(f *testing.F) {
	for _, s := range []string{
		"2026-11-29 10:00:00.123456", "2026-11-29 10:00:00", "2026-11-29 10:00:00.1", "2024-02-29 23:59:59.999",
		"2023-02-29 10:00:00", "2026-13-01 00:00:00", "2026-11-29 24:00:00", "2026-11-29 10:60:00", "2026-11-29 10:00:60",
		"0001-01-01 00:00:00", "2026-11-29 10:00:00.", "2026-11-29 10:00:00.1234567", "2026-11-29T10:00:00", "2026-1-29 10:00:00",
		"2026-11-29 10:00:0x", "+026-11-29 10:00:00", "2026-11-29 10:00:00,5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseDatetime(s)
		want, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
		if ok && (err != nil || !got.Equal(want) || got.Location() != time.UTC) {
			t.Fatalf("parseDatetime(%q) = %v; time.ParseInLocation: %v, %v", s, got, want, err)
		}
	})
}

func TestParseDatetime(t *testing.T) {
	for _, tt := range []struct {
		s      string
		wantOK bool
	}{
		{"2026-11-29 10:00:00.123456", true}, {"2026-11-29 10:00:00", true}, {"2026-11-29 10:00:00.5", true},
		{"2024-02-29 00:00:00", true}, {"2023-02-29 00:00:00", false}, {"2026-11-31 00:00:00", false},
		{"2026-11-29 10:00:00.1234567", false}, {"2026-11-29 24:00:00", false}, {"2026-11-29T10:00:00", false},
		{"1795946400.123456", false},
	} {
		got, ok := parseDatetime(tt.s)
		want, err := time.ParseInLocation(datetimeLayout, tt.s, time.UTC)
		if ok != tt.wantOK || (ok && (err != nil || !got.Equal(want))) {
			t.Errorf("parseDatetime(%q) = %v, %v; want ok %v (time.ParseInLocation: %v, %v)", tt.s, got, ok, tt.wantOK, want, err)
		}
	}
}
