// Package outbox holds the domain of binlog-outbox: the Event that travels from
// a MySQL outbox table to a Redis Stream, the small interfaces the relay
// pipeline consumes, and the errors shared by its components.
//
// The sub-packages implement the pieces: canal reads committed events from the
// binlog, poller reads them with SELECT ... FOR UPDATE SKIP LOCKED, redisstream
// appends them to Redis Streams together with the position, position encodes
// where a relay stands, and schema describes the outbox table.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Event is one committed row of the outbox table, as a consumer sees it.
//
// An Event can be kept after the reader moved on: its strings are copies, and
// Payload and Headers are either copies or the bytes of the binlog event they
// were read from, which go-mysql allocates for each event and never reuses.
// Nothing writes into Payload or Headers: they may be shared.
type Event struct {
	// OutboxID is the primary key value of the row.
	OutboxID uint64
	// MessageID identifies the event for consumer-side deduplication. When the
	// table has no message_id column it is OutboxID in decimal.
	MessageID string
	// AggregateType is empty when the table has no aggregate_type column.
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is the state serialised in the producer's transaction.
	Payload []byte
	// Headers is nil when the table has no headers column or the value is NULL.
	Headers []byte
	// OccurredAt is in UTC.
	OccurredAt time.Time
	// Fields are the entry's fields beyond the built-in ones, in order:
	// the schema_version column's, then those of --extra-column. A column
	// that is NULL in the row has no field.
	Fields []Field
	// Envelope is the entry format's encoding of the event when the format
	// has one (redisstream's symfony-messenger format: Messenger's JSON
	// envelope), set by Sink.Prepare as the event is read so that Size
	// counts it; nil otherwise.
	Envelope []byte
	// Database and Table name the outbox table the row is in, as the server
	// names it: the stream template's {database} and {table}. They share
	// the reader's strings, so Size leaves them out.
	Database, Table string
	// Invalid, when not empty, says why the row cannot be delivered as an
	// event (a NULL in a required column, a payload that is not JSON). Such a
	// row goes to the dead-letter stream with the reason instead of blocking
	// the relay or vanishing.
	Invalid string
}

// Field is one entry field that a column of the table carries beside the
// built-in ones (schema_version, --extra-column), as text.
type Field struct {
	Name  string
	Value string
}

// eventOverhead is the fixed part of an event's size: the Event struct, the
// field names of its stream entry, the request framing.
const eventOverhead = 128

// Size estimates the bytes e holds in memory and takes in the request that
// appends it. The read-ahead, batch and transaction limits of both modes are
// counted with it, so that --max-batch-bytes means the same in each.
func (e *Event) Size() int {
	n := int64(len(e.Payload) + len(e.Headers) + len(e.MessageID) + len(e.AggregateType) +
		len(e.AggregateID) + len(e.EventType) + len(e.Invalid) + len(e.Envelope))
	for _, f := range e.Fields {
		n += FieldSize(f.Name, len(f.Value))
	}
	return EventSize(n)
}

// fieldOverhead is what a Field costs beside its name and value: its two
// string headers in memory, the framing of two more arguments in the request.
const fieldOverhead = 48

// FieldSize is what a Field named name with a value of valueLen bytes adds to
// an event's Size, for a reader that sizes rows before it holds the values.
func FieldSize(name string, valueLen int) int64 {
	return int64(fieldOverhead + len(name) + valueLen)
}

// EventSize is Size for an event whose variable-length fields (payload,
// headers, ids, types, the Invalid reason, the FieldSize of each Field) hold
// fieldBytes in all, for a
// reader that knows the lengths before it holds the values: the poller sizes
// the rows it locked before it fetches their payloads. It saturates at
// math.MaxInt32 rather than overflow on a corrupt length.
func EventSize(fieldBytes int64) int {
	return int(min(eventOverhead+fieldBytes, math.MaxInt32))
}

// Error is an error an operator has to act on. Hint says how.
type Error struct {
	// Err is the underlying error; errors.Is and errors.As see through Error.
	Err error
	// Hint is one or more sentences telling the operator how to fix the problem.
	Hint string
}

// Error implements error. It leaves the hint out: the hint is for the
// operator, printed once and on its own (a log attribute, the CLI's "hint:"
// line), while the error text may be wrapped, logged and repeated.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap gives errors.Is and errors.As access to the cause.
func (e *Error) Unwrap() error { return e.Err }

// WithHint wraps err with an operator hint. It returns nil when err is nil.
func WithHint(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Hint: fmt.Sprintf(format, args...)}
}

// HintOf returns the first operator hint in err's chain, or "".
func HintOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

var (
	// ErrFenced means another relay advanced the stored position since this
	// relay last read it. The stale relay must stop; continuing would append
	// the same events twice.
	ErrFenced = errors.New("stored position was advanced by another relay")

	// ErrPositionRolledBack means the stored position is older than the one
	// this relay wrote last, e.g. Redis lost acknowledged writes on a restart.
	// The reader restarts from the stored position; streams rolled back with it.
	ErrPositionRolledBack = errors.New("stored position is older than the last one written")

	// ErrLeaseLost means another relay holds the lease of the position, or
	// this relay's lease expired before it was renewed: the relay appends
	// nothing more, stops reading and waits to take the lease again. It is
	// never final: the relay that lost the lease stands by.
	ErrLeaseLost = errors.New("the lease of the position is not held by this relay")

	// ErrPositionGone means the binlog the stored position points into is no
	// longer on the server (purged) or belongs to another server.
	ErrPositionGone = errors.New("stored binlog position is not available on the server")

	// ErrRepairing means `binlog-outbox repair --apply` marked the stored
	// position as its own: no relay starts on it, and a running one stops
	// at its next append, so that none appends the rows repair appends.
	ErrRepairing = errors.New("a repair holds the stored position")

	// ErrConfig marks an invalid configuration; retrying does not help.
	// Sentinels of the sub-packages for problems of the same kind (an unfit
	// table, a server without a feature) are made with NewConfigError, so
	// that errors.Is(err, ErrConfig) alone tells a final error.
	ErrConfig = errors.New("invalid configuration")
)

// NewConfigError returns a sentinel error with the given text that errors.Is
// also matches as ErrConfig.
func NewConfigError(text string) error { return &configError{text} }

type configError struct{ text string }

func (e *configError) Error() string { return e.text }

func (e *configError) Unwrap() error { return ErrConfig }

// Sink appends events to their streams together with the relay's position.
// The binlog reader consumes it; package redisstream implements it.
type Sink interface {
	// Append appends events to their streams in order and replaces the stored
	// position prev (nil: none stored) with next, in one atomic step: either
	// all of it happens or none. When the stored position is not prev it
	// appends nothing and returns a *PositionMismatchError. After an error
	// whose outcome is unknown (the connection broke before the reply),
	// Append reads the position back to tell whether the step happened, so a
	// nil error always means "appended once" and any other error means
	// "nothing appended".
	Append(ctx context.Context, events []Event, prev, next []byte) error
	// Position returns the stored position, or nil when none is stored.
	Position(ctx context.Context) ([]byte, error)
	// Prepare finishes an event for the sink's entry format as soon as it
	// is read, before it is sized and counted: it sets Envelope, or marks
	// the event Invalid when the format cannot carry it (it then goes to
	// the dead-letter stream with the reason). It is idempotent; Append
	// prepares the events that were not.
	Prepare(e *Event)
}

// PositionMismatchError reports that the stored position is not the one the
// relay expected; Stored is what is stored (nil: nothing).
type PositionMismatchError struct {
	Stored []byte
}

// Error implements error.
func (e *PositionMismatchError) Error() string {
	return "stored position changed under the relay"
}
