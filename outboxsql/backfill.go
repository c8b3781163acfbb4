package outboxsql

import (
	"strings"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Backfill holds the statements of backfill, which walks the rows of a
// window of occurred_at in id order.
type Backfill struct {
	t    Table
	cols string
}

// NewBackfill renders backfill's statements over t; fields are the columns
// carried as fields of their own (schema.FieldColumns).
func NewBackfill(t Table, fields []schema.ExtraColumn) *Backfill {
	// The columns of dead-letters replay and poll mode's Fetch: one
	// reading, hence one encoding, of a row for all.
	return &Backfill{t: t, cols: strings.Join(fetchColumns(t, PollOptions{DeleteRows: true, Fields: fields}), ", ")}
}

// MaxID reads the highest id of the table (NULL when empty): where a
// backfill stops, so that it ends while producers write.
func (b *Backfill) MaxID() string {
	return "SELECT /* binlog-outbox */ MAX(" + b.t.Col(schema.ColID) + ") FROM " + b.t.Ref()
}

// Rows reads, without locking, at most limit rows with after < id <= upTo
// whose occurred_at is at or after since and before until (either bound
// off when zero), in id order, in the columns of Replay.Rows.
func (b *Backfill) Rows(after, upTo uint64, since, until time.Time, limit int) (string, []any) {
	id := b.t.Col(schema.ColID)
	where, args := id+" > ? AND "+id+" <= ?", []any{after, upTo}
	if !since.IsZero() {
		cond, arg := b.t.timeBound(schema.ColOccurredAt, ">=", since)
		where += " AND " + cond
		args = append(args, arg)
	}
	if !until.IsZero() {
		cond, arg := b.t.timeBound(schema.ColOccurredAt, "<", until)
		where += " AND " + cond
		args = append(args, arg)
	}
	return "SELECT /* binlog-outbox */ " + b.cols + " FROM " + b.t.Ref() + " WHERE " + where + " ORDER BY " + id + " LIMIT ?", append(args, limit)
}
