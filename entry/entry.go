// Package entry says what an outbox event becomes in Redis: the stream its
// template names (template.go), the fields of its entry (entry.go), and the
// format those take for its consumers (format.go: flat or Symfony
// Messenger; doctrine.go: Messenger's Doctrine transport table; laravel.go:
// Laravel's jobs table), including the delayed set or queue list a delayed
// message or a Laravel job goes to. It encodes and decides without I/O;
// redisstream writes what it encodes, redisadmin and the admin commands read
// it back by its names.
package entry

// An entry is what one event becomes in its stream: the fields below, in a
// fixed order (redisstream appends them), in the format of a Format
// (format.go), in the stream a Template names or the dead-letter stream.

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
