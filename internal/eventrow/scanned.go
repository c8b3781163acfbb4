package eventrow

import "database/sql"

// Scanned is a row of the outbox table as a text-protocol query reads it
// (poll mode's batches, dead-letters replay): the values of the columns
// the table has, the absent ones left zero.
type Scanned struct {
	ID                                               uint64
	MessageID, AggregateType, AggregateID, EventType sql.NullString
	// Payload is the payload as read; HasPayload is false for NULL.
	Payload    []byte
	HasPayload bool
	Headers    []byte
	// Fields are the values of Layout.Fields, in their order.
	Fields []sql.NullString
}

// Layout is which of the optional columns a table has, and the columns
// carried as fields of their own, as both readers of Scanned rows need to
// know them.
type Layout struct {
	MessageID, AggregateType bool
	// Fields are the entry field names of the columns carried as fields
	// of their own (schema.FieldColumns), in their order.
	Fields []string
}

// Fill sets the columns of r on b in column order, all but occurred_at and
// the checks of the payload (its size, its JSON), which differ between the
// callers and come after: poll mode and replay build an entry from the same
// row alike, so that a replayed event is the one run would have appended.
func (l Layout) Fill(b *Builder, r *Scanned) {
	b.ID(r.ID)
	if l.MessageID {
		b.MessageID(r.MessageID.String, r.MessageID.Valid)
	} else {
		b.MessageIDFromID()
	}
	if l.AggregateType {
		b.AggregateType(r.AggregateType.String, r.AggregateType.Valid)
	}
	b.AggregateID(r.AggregateID.String, r.AggregateID.Valid)
	b.EventType(r.EventType.String, r.EventType.Valid)
	b.Payload(r.Payload, r.HasPayload)
	b.Headers(r.Headers)
	for i, f := range l.Fields {
		var v any
		if r.Fields[i].Valid {
			v = r.Fields[i].String
		}
		b.Field(f, v)
	}
}
