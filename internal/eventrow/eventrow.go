// Package eventrow holds the rules by which both relay modes turn a row of the
// outbox table into an outbox.Event: which NULLs make the row a dead letter
// and with what reason, the message ID of a table without a message_id
// column, that an occurred_at that is NULL or zero makes a dead letter too
// (no mode invents a time), the fields
// of the columns carried as fields of their own, and how the values MySQL
// sends (binlog row images, text-protocol results) convert.
//
// The binlog reader (package canal) and the poller read rows differently,
// but a consumer must not be able to tell which mode relayed an event: the
// rules live here once, and each mode only feeds its values in.
package eventrow

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/charset"
)

// Builder collects the fields of one row's Event and the problems that make
// it a dead letter. The zero value is ready; call the setters in column
// order (id first) so that the reasons read in that order, then Event.
//
// It holds no more than the Event and, only when a row has problems, their
// list: the binlog reader builds one per row on its hot path.
type Builder struct {
	e        outbox.Event
	problems []string
}

// ID sets the outbox id.
func (b *Builder) ID(id uint64) { b.e.OutboxID = id }

// MessageID sets the message_id column's value; ok false means NULL. A NULL
// or empty message ID cannot deduplicate anything: the row is a dead letter.
func (b *Builder) MessageID(s string, ok bool) {
	b.e.MessageID = s
	if !ok || s == "" {
		b.Problem("message_id is NULL or empty")
	}
}

// MessageIDFromID is MessageID for a table without a message_id column: the
// id in decimal, unique per row as consumers' deduplication needs. Call it
// after ID.
func (b *Builder) MessageIDFromID() { b.e.MessageID = strconv.FormatUint(b.e.OutboxID, 10) }

// AggregateType sets the aggregate_type column's value; ok false means NULL.
// Leave it unset for a table without the column.
// An empty one is a problem too: it would name a stream of its own
// ("outbox:") under the default template, and no consumer reads that.
func (b *Builder) AggregateType(s string, ok bool) {
	b.e.AggregateType = s
	switch {
	case !ok:
		b.Problem("aggregate_type is NULL")
	case s == "":
		b.Problem("aggregate_type is empty")
	}
}

// AggregateID sets the aggregate_id column's value; ok false means NULL.
func (b *Builder) AggregateID(s string, ok bool) {
	b.e.AggregateID = s
	if !ok {
		b.Problem("aggregate_id is NULL")
	}
}

// EventType sets the event_type column's value; ok false means NULL. An
// empty one names no event a consumer could dispatch: a problem as well.
func (b *Builder) EventType(s string, ok bool) {
	b.e.EventType = s
	switch {
	case !ok:
		b.Problem("event_type is NULL")
	case s == "":
		b.Problem("event_type is empty")
	}
}

// Payload sets the payload; ok false means NULL. A present empty payload is
// not NULL and stays non-nil.
func (b *Builder) Payload(p []byte, ok bool) {
	b.e.Payload = p
	if !ok {
		b.Problem("payload is NULL")
	}
}

// Headers sets the headers; nil means NULL or no column, which is no problem.
func (b *Builder) Headers(h []byte) { b.e.Headers = h }

// OccurredAt sets occurred_at from a value ToTime reads. A NULL or zero
// occurred_at ('0000-00-00 00:00:00', which a relaxed sql_mode lets in) is a
// problem: a stand-in would be the commit time in binlog mode and the read
// time in poll mode, a time the row never held, and consumers could not
// tell it from a real one. The dead letter's row can be corrected and
// replayed.
func (b *Builder) OccurredAt(v any) {
	t, ok := ToTime(v)
	if !ok {
		b.Problem("occurred_at is NULL or a zero date; the relay does not invent a time")
		return
	}
	b.e.OccurredAt = t
}

// Field adds the field of a column the entries carry as a field of its own
// (schema_version, --extra-column), from a value ToString reads, in the
// order of schema.FieldColumns. A NULL leaves the field out, so that a
// consumer can tell it from an empty string, and is no problem: the
// relay knows nothing the column must hold.
func (b *Builder) Field(name string, v any) {
	if s, ok := ToString(v); ok {
		b.e.Fields = append(b.e.Fields, outbox.Field{Name: name, Value: s})
	}
}

// Charset records as a problem that the logical column's character set c
// is one the relay cannot convert to UTF-8 as poll mode's connection does;
// it does nothing for any other c. Binlog rows give the bytes the table
// stores, and relayed as they are they would differ from the other mode's.
func (b *Builder) Charset(logical string, c charset.Charset) {
	if c.Unsupported() {
		b.Problem(fmt.Sprintf("%s is in character set %s, which the relay cannot convert to UTF-8 (it converts %s): convert the column with ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4",
			logical, c.Name(), charset.Supported))
	}
}

// Problem records why the row cannot be delivered as an event.
func (b *Builder) Problem(reason string) { b.problems = append(b.problems, reason) }

// Event returns the event, marked Invalid with every problem recorded.
func (b *Builder) Event() outbox.Event {
	e := b.e
	if len(b.problems) > 0 {
		e.Invalid = strings.Join(b.problems, "; ")
	}
	return e
}

// ToUint64 reads an id. Signed integers are reinterpreted as unsigned:
// MariaDB sends BIGINT UNSIGNED as int64 (and INT UNSIGNED as int32) when the
// table map has no signedness, and the bits are the value.
func ToUint64(v any) (uint64, bool) {
	switch x := v.(type) {
	case int8:
		return uint64(uint8(x)), true
	case int16:
		return uint64(uint16(x)), true
	case int32:
		return uint64(uint32(x)), true
	case int64:
		return uint64(x), true
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int:
		return uint64(x), true
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseUint(string(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// ToString reads a text column; ok is false for NULL. The result is a copy:
// the binlog decoder's strings alias the event's packet buffer, which the
// syncer reuses, and an Event outlives it.
func ToString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return strings.Clone(x), true
	case []byte:
		return string(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	}
	return fmt.Sprint(v), true
}

// ToText reads a text column whose bytes are in character set c as UTF-8,
// as ToString does for UTF-8 and binary columns; ok is false for NULL. The
// result is a copy, as with ToString.
func ToText(v any, c charset.Charset) (string, bool) {
	switch x := v.(type) {
	case string:
		return c.String(x), true
	case []byte:
		if !c.Converts() {
			return string(x), true
		}
		return string(c.Bytes(x)), true
	}
	return ToString(v)
}

// ToTextBytes is ToText for the payload and headers: ToBytes with the
// conversion from c.
func ToTextBytes(v any, c charset.Charset) ([]byte, bool) {
	switch x := v.(type) {
	case []byte:
		return c.Bytes(x), true
	case string:
		if !c.Converts() {
			return []byte(x), true
		}
		return []byte(c.String(x)), true
	}
	return ToBytes(v)
}

// ToTextBytesShared is ToTextBytes for a reader whose []byte values are
// its own and never reused: a value that needs no conversion is returned
// as it is, not copied. The binlog reader's are: go-mysql allocates every
// event afresh, and a BLOB, TEXT or JSON value is a slice of it. A 16 MiB
// payload was copied once more there, and both copies lived until the
// append. The result's capacity is its length, so that an append to it can
// never write into the bytes after it.
func ToTextBytesShared(v any, c charset.Charset) ([]byte, bool) {
	if x, ok := v.([]byte); ok && !c.Changes(x) {
		return x[:len(x):len(x)], true
	}
	return ToTextBytes(v, c)
}

// ToBytes reads a payload or headers column; ok is false for NULL. The result
// is a copy, as with ToString.
func ToBytes(v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return nil, false
	case []byte:
		return bytes.Clone(x), true
	case string:
		return []byte(x), true
	}
	s, ok := ToString(v)
	return []byte(s), ok
}

// ToTime reads occurred_at, in UTC; ok is false for NULL, a zero date and
// what it cannot read. It takes a time.Time (a DSN with parseTime=true), the
// text of a DATETIME or TIMESTAMP (the binlog syncer renders TIMESTAMPs in
// UTC), or a UNIX_TIMESTAMP() as integer, float or text (the poller reads a
// TIMESTAMP that way, as its value does not depend on the session time
// zone). A DATETIME has no zone and is taken as UTC, which is what a producer
// writing UTC_TIMESTAMP(6), or CURRENT_TIMESTAMP(6) on a UTC server, stores.
func ToTime(v any) (time.Time, bool) {
	switch x := v.(type) {
	case time.Time:
		return x.UTC(), !x.IsZero()
	case []byte:
		return parseTime(string(x))
	case string:
		return parseTime(x)
	case int64:
		return time.Unix(x, 0).UTC(), x > 0
	case uint64:
		return time.Unix(int64(x), 0).UTC(), x > 0 && x < 1<<62
	case float64:
		return time.UnixMicro(int64(x*1e6 + 0.5)).UTC(), x > 0
	}
	return time.Time{}, false
}

func parseTime(s string) (time.Time, bool) {
	if s == "" || strings.HasPrefix(s, "0000-00-00") {
		return time.Time{}, false
	}
	if t, ok := parseDatetime(s); ok {
		return t, true
	}
	if t, err := time.ParseInLocation(datetimeLayout, s, time.UTC); err == nil {
		return t, true
	}
	// UNIX_TIMESTAMP(col): seconds with up to six decimals.
	if sec, frac, _ := strings.Cut(s, "."); sec != "" {
		n, err := strconv.ParseInt(sec, 10, 64)
		if err == nil && n > 0 {
			frac = (frac + "000000")[:6]
			us, err := strconv.ParseInt(frac, 10, 64)
			if err == nil {
				return time.Unix(n, us*1000).UTC(), true
			}
		}
	}
	return time.Time{}, false
}

// datetimeLayout is how the binlog reader's syncer renders DATETIME and
// TIMESTAMP values, and how the poller's queries return them.
const datetimeLayout = "2006-01-02 15:04:05.999999"

// parseDatetime reads "YYYY-MM-DD hh:mm:ss" with up to six decimals, as
// time.ParseInLocation(datetimeLayout, s, time.UTC) does, a few times
// faster: every binlog row's occurred_at comes as such text. It answers
// only what it is sure of (ok false: leave it to time.ParseInLocation).
func parseDatetime(s string) (t time.Time, ok bool) {
	if len(s) < 19 || len(s) == 20 || len(s) > 26 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	nsec := 0
	if len(s) > 19 {
		if s[19] != '.' {
			return time.Time{}, false
		}
		nsec = num(20, len(s))
		for i := len(s); i < 29; i++ {
			nsec *= 10
		}
	}
	if year < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 || nsec < 0 {
		return time.Time{}, false
	}
	t = time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day {
		return time.Time{}, false // February 30th: time.Date moved it on
	}
	return t, true
}
