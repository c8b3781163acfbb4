package redisstream

import (
	outbox "github.com/binlog-outbox/binlog-outbox"
)

// An entry is what one event becomes in its stream: the fields below, in a
// fixed order, in the format of Config.Format (format.go), in the stream
// the template names (template.go) or the dead-letter stream.

// Entry field names. Consumers depend on them: keep them.
const (
	FieldMessageID     = "message_id"
	FieldAggregateType = "aggregate_type"
	FieldAggregateID   = "aggregate_id"
	FieldEventType     = "event_type"
	FieldPayload       = "payload"
	FieldOccurredAt    = "occurred_at"
	FieldOutboxID      = "outbox_id"
	FieldHeaders       = "headers"
	// FieldReason is set on dead-letter entries only.
	FieldReason = "reason"
	// FieldTargetStream is set on dead-letter entries only: the stream the
	// template named for the row, which dead-letters replay appends to.
	// Entries written before this field existed lack it.
	FieldTargetStream = "target_stream"
)

// BuiltinFields returns the names of the fields every entry may have besides
// those of the columns it carries as fields of their own (schema_version,
// --extra-column), which must not take them.
func BuiltinFields() []string {
	return []string{FieldMessageID, FieldAggregateType, FieldAggregateID, FieldEventType, FieldPayload,
		FieldOccurredAt, FieldOutboxID, FieldHeaders, FieldReason, FieldTargetStream}
}

// OccurredAtLayout formats occurred_at: RFC 3339 in UTC with microseconds,
// which PHP's DateTimeImmutable and Go's time.Parse(time.RFC3339Nano) read.
const OccurredAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// prepare applies Config.Format to e.
//
// An event whose stream would be the dead-letter stream goes there as a
// dead letter, with the reason: appended as an event it would mix with the
// dead letters, and whoever reads them would take it for one or miss it.
func (s *base) prepare(e *outbox.Event) {
	if s.deadLetterReachable && e.Invalid == "" && e.Envelope == nil && s.template.renders(e, s.cfg.DeadLetterStream) {
		e.Invalid = deadLetterCollision(s.template, s.cfg.DeadLetterStream)
		return
	}
	s.cfg.Format.prepare(e, !s.cfg.NoAggregateType)
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
	if _, ok := s.delayed(e); ok {
		b = append(b, s.cfg.Format.delayedSuffix()...)
	}
	return b
}

// appendFields appends an entry's field/value pairs in a fixed order. In
// FormatMessenger the payload travels in the message field only; dead
// letters are flat in every format. The strings and the id are passed by
// pointer into e, which outlives the append: boxed by value, each would be
// an allocation per entry.
func (s *base) appendFields(args []any, e *outbox.Event) []any {
	messenger := e.Envelope != nil && e.Invalid == ""
	args = append(args, FieldMessageID, &e.MessageID)
	if !s.cfg.NoAggregateType {
		args = append(args, FieldAggregateType, &e.AggregateType)
	}
	args = append(args, FieldAggregateID, &e.AggregateID, FieldEventType, &e.EventType)
	switch {
	case messenger && s.cfg.Format.Name == FormatLaravelStream:
		args = append(args, FieldJob, laravelBody(e))
	case messenger:
		args = append(args, FieldMessage, e.Envelope)
	default:
		args = append(args, FieldPayload, e.Payload)
	}
	args = append(args,
		FieldOccurredAt, e.OccurredAt.UTC().Format(OccurredAtLayout),
		FieldOutboxID, &e.OutboxID,
	)
	if !s.cfg.NoHeaders {
		args = append(args, FieldHeaders, e.Headers)
	}
	for i := range e.Fields {
		f := &e.Fields[i]
		args = append(args, f.Name, &f.Value)
	}
	if e.Invalid != "" {
		args = append(args, FieldTargetStream, s.template.Render(e), FieldReason, &e.Invalid)
	}
	return args
}
