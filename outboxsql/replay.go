package outboxsql

import (
	"strings"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Replay holds the statement of dead-letters replay, which reads rows again
// by id to relay them under the current mapping and format.
type Replay struct {
	rows string
}

// NewReplay renders replay's statement over t; fields are the columns
// carried as fields of their own (schema.FieldColumns).
func NewReplay(t Table, fields []schema.ExtraColumn) *Replay {
	// The columns of poll mode's Fetch, the whole payload included: one
	// reading of a row for both.
	cols := fetchColumns(t, PollOptions{DeleteRows: true, Fields: fields})
	return &Replay{rows: "SELECT /* binlog-outbox */ " + strings.Join(cols, ", ") + " FROM " + t.Ref() + " WHERE " + t.Col(schema.ColID) + " IN ("}
}

// Rows reads the rows ids, without locking, in the columns of Poll.Fetch:
// id, message_id and aggregate_type (where the mapping has them),
// aggregate_id, event_type, payload, headers (where mapped), occurred_at (a
// TIMESTAMP as its epoch value), then the fields.
func (r *Replay) Rows(ids []uint64) string { return inList(r.rows, ids, ") ORDER BY 1") }
