package redisstream

import (
	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
)

// The sink's side of an entry: each event prepared for Config.Format, the
// key it goes to, and its fields in the order every strategy writes them.

// prepare applies Config.Format to e.
//
// An event whose stream would be the dead-letter stream goes there as a
// dead letter, with the reason: appended as an event it would mix with the
// dead letters, and whoever reads them would take it for one or miss it.
func (s *base) prepare(e *outbox.Event) {
	if s.deadLetterReachable && e.Invalid == "" && e.Envelope == nil && s.template.Renders(e, s.cfg.DeadLetterStream) {
		e.Invalid = deadLetterCollision(s.template, s.cfg.DeadLetterStream)
		return
	}
	s.cfg.Format.Prepare(e, !s.cfg.NoAggregateType)
	s.deadLetterWrongType(e)
}

// streamKey returns the key e goes to: its template's stream, the
// stream's delayed set (a delayed symfony-doctrine message), or the
// dead-letter stream.
func (s *base) streamKey(e *outbox.Event) string {
	return string(s.appendStreamKey(nil, e))
}

// appendStreamKey appends streamKey(e) to b, without allocating it.
func (s *base) appendStreamKey(b []byte, e *outbox.Event) []byte {
	if e.Invalid != "" {
		return append(b, s.cfg.DeadLetterStream...)
	}
	b = s.template.AppendTo(b, e)
	if _, ok := s.cfg.Format.Delayed(e); ok {
		b = append(b, s.cfg.Format.DelayedSuffix()...)
	}
	return b
}

// bytesArg is a []byte field of an Event passed to go-redis by pointer,
// which writes a BinaryMarshaler's bytes as they are: a slice boxed by
// value is an allocation per entry, two of the relay's per event with the
// payload and the headers.
type bytesArg []byte

// MarshalBinary returns the bytes themselves, not a copy.
func (b *bytesArg) MarshalBinary() ([]byte, error) { return *b, nil }

// appendFields appends an entry's field/value pairs in a fixed order. In
// entry.FormatMessenger the payload travels in the message field only; dead
// letters are flat in every format. The strings, the id, the payload and
// the headers are passed by pointer into e, which outlives the append:
// boxed by value, each would be an allocation per entry.
func (s *base) appendFields(args []any, e *outbox.Event) []any {
	messenger := e.Envelope != nil && e.Invalid == ""
	args = append(args, entry.FieldMessageID, &e.MessageID)
	if !s.cfg.NoAggregateType {
		args = append(args, entry.FieldAggregateType, &e.AggregateType)
	}
	args = append(args, entry.FieldAggregateID, &e.AggregateID, entry.FieldEventType, &e.EventType)
	switch {
	case messenger && s.cfg.Format.Name == entry.FormatLaravelStream:
		args = append(args, entry.FieldJob, entry.JobBody(e))
	case messenger:
		args = append(args, entry.FieldMessage, e.Envelope)
	default:
		args = append(args, entry.FieldPayload, (*bytesArg)(&e.Payload))
	}
	args = append(args,
		entry.FieldOccurredAt, e.OccurredAt.UTC().Format(entry.OccurredAtLayout),
		entry.FieldOutboxID, &e.OutboxID,
	)
	if !s.cfg.NoHeaders {
		args = append(args, entry.FieldHeaders, (*bytesArg)(&e.Headers))
	}
	for i := range e.Fields {
		f := &e.Fields[i]
		args = append(args, f.Name, &f.Value)
	}
	if e.Invalid != "" {
		args = append(args, entry.FieldTargetStream, s.template.Render(e), entry.FieldReason, &e.Invalid)
	}
	return args
}
