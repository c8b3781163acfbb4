package outboxsql

import (
	"strconv"
	"strings"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// timeBound is the condition "the time column of logical op the instant
// at", and the parameter it takes: a DATETIME holds UTC, as the relay reads
// it (eventrow.ToTime), and compares with the instant as is; a TIMESTAMP
// compares in the session's time zone, in which FROM_UNIXTIME renders the
// instant; an integer column holds Unix seconds.
func (t Table) timeBound(logical, op string, at time.Time) (string, any) {
	if t.isTimestamp(logical) {
		return t.Col(logical) + " " + op + " FROM_UNIXTIME(?)", float64(at.UnixMicro()) / 1e6
	}
	if t.isUnixSeconds(logical) {
		return t.Col(logical) + " " + op + " ?", at.Unix()
	}
	return t.Col(logical) + " " + op + " ?", at
}

// Cleanup holds the statements of cleanup, which deletes old relayed rows
// by primary key.
type Cleanup struct {
	t                Table
	sentOnly         bool
	selectQ, deleteQ string
}

// NewCleanup renders cleanup's statements over t; sentOnly limits them to
// rows marked sent (poll mode).
func NewCleanup(t Table, sentOnly bool) *Cleanup {
	c := &Cleanup{t: t, sentOnly: sentOnly}
	id := t.Col(schema.ColID)
	c.deleteQ = "DELETE /* binlog-outbox */ FROM " + t.Ref() + " WHERE "
	if sentOnly {
		// Marked sent stays marked; the condition only guards the rule.
		c.deleteQ += "NOT (" + t.unsentValue() + ") AND "
	}
	c.deleteQ += id + " IN ("
	return c
}

// Candidates reads the ids of at most limit rows after the id after whose
// occurred_at is before cutoff (marked sent, with sentOnly), in id order.
func (c *Cleanup) Candidates(after uint64, cutoff time.Time, limit int) (string, []any) {
	id := c.t.Col(schema.ColID)
	older, arg := c.t.timeBound(schema.ColOccurredAt, "<", cutoff)
	where := id + " > ? AND " + older
	if c.sentOnly {
		where += " AND NOT (" + c.t.unsentValue() + ")"
	}
	return "SELECT /* binlog-outbox */ " + id + " FROM " + c.t.Ref() + " WHERE " + where + " ORDER BY " + id + " LIMIT ?",
		[]any{after, arg, limit}
}

// CountUnsent counts the unsent rows whose occurred_at is before cutoff.
func (c *Cleanup) CountUnsent(cutoff time.Time) (string, []any) {
	older, arg := c.t.timeBound(schema.ColOccurredAt, "<", cutoff)
	return "SELECT /* binlog-outbox */ COUNT(*) FROM " + c.t.Ref() + " WHERE " + c.t.unsentValue() + " AND " + older, []any{arg}
}

// Delete deletes the rows ids (those marked sent, with sentOnly).
func (c *Cleanup) Delete(ids []uint64) string {
	return inList(c.deleteQ, ids, ")")
}

// Verify holds the statements of verify, which walks the rows in id order.
type Verify struct {
	t Table
}

// NewVerify renders verify's statements over t.
func NewVerify(t Table) *Verify { return &Verify{t: t} }

// Rows reads at most limit rows after the id after, in id order, whose
// occurred_at is not before since (any, when since is zero): id,
// message_id (the id as text without the column), and whether the row is
// unsent (every row without sent_at).
func (v *Verify) Rows(after uint64, since time.Time, limit int) (string, []any) {
	id := v.t.Col(schema.ColID)
	where, args := id+" > ?", []any{after}
	if !since.IsZero() {
		cond, arg := v.t.timeBound(schema.ColOccurredAt, ">=", since)
		where += " AND " + cond
		args = append(args, arg)
	}
	return "SELECT /* binlog-outbox */ " + id + ", " + v.t.messageID() + ", " + v.t.unsentValue() + " FROM " + v.t.Ref() +
		" WHERE " + where + " ORDER BY " + id + " LIMIT ?", append(args, limit)
}

// SharedMessageIDs reads the message ids that more than one row in range
// holds (after the id from, occurred_at not before since): the id, how
// many rows hold it, and the lowest and highest of their ids, at most
// limit of them; and the query counting all such ids. Without a unique key
// on message_id both rows are relayed, and consumers that deduplicate by
// it drop the second event. A table without message_id holds none.
func (v *Verify) SharedMessageIDs(from uint64, since time.Time, limit int) (examples, count string, args []any) {
	m, id := v.t.Col(schema.ColMessageID), v.t.Col(schema.ColID)
	where, args := id+" >= ?", []any{from}
	if !since.IsZero() {
		cond, arg := v.t.timeBound(schema.ColOccurredAt, ">=", since)
		where += " AND " + cond
		args = append(args, arg)
	}
	group := " FROM " + v.t.Ref() + " WHERE " + where + " GROUP BY " + m + " HAVING COUNT(*) > 1"
	return "SELECT /* binlog-outbox */ " + m + ", COUNT(*), MIN(" + id + "), MAX(" + id + ")" + group + " ORDER BY MIN(" + id + ") LIMIT " + strconv.Itoa(limit),
		"SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1" + group + ") AS t", args
}

// Recheck reads the rows ids as they are: id and message_id.
func (v *Verify) Recheck(ids []uint64) string {
	return inList("SELECT /* binlog-outbox */ "+v.t.Col(schema.ColID)+", "+v.t.messageID()+" FROM "+v.t.Ref()+" WHERE "+v.t.Col(schema.ColID)+" IN (", ids, ")")
}

// MinID reads the lowest id of the table (NULL when empty).
func (v *Verify) MinID() string {
	return "SELECT /* binlog-outbox */ MIN(" + v.t.Col(schema.ColID) + ") FROM " + v.t.Ref()
}

// Marker holds the statements of mark-appended, which marks the rows whose
// events are in the streams.
type Marker struct {
	lock, mark string
}

// NewMarker renders mark-appended's statements over t; deleteRows deletes
// the rows instead of marking them sent, as poll mode will.
func NewMarker(t Table, deleteRows bool) *Marker {
	id := t.Col(schema.ColID)
	return &Marker{
		lock: "SELECT /* binlog-outbox */ " + id + ", " + t.messageID() + ", " + t.unsentValue() + " FROM " + t.Ref() + " WHERE " + id + " IN (",
		mark: t.markPrefix(deleteRows),
	}
}

// Lock locks and reads the rows ids: id, message_id (the id as text
// without the column) and whether the row is unsent.
func (m *Marker) Lock(ids []uint64) string { return inList(m.lock, ids, ") FOR UPDATE") }

// Mark marks the rows ids sent, or deletes them, as poll mode does.
func (m *Marker) Mark(ids []uint64) string { return inList(m.mark, ids, ")") }

// CountRows counts the rows of the table, up to max+1: a relay that starts
// without a position says how many rows it leaves unrelayed.
func CountRows(t Table, max int) string {
	return "SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1 FROM " + t.Ref() + " LIMIT " + strconv.Itoa(max+1) + ") AS t"
}

// HoldsMessageIDs selects one of n message ids (the parameters) that the
// table holds, no row when it holds none: whether entries in Redis are of
// this table's rows.
func HoldsMessageIDs(t Table, n int) string {
	return "SELECT /* binlog-outbox */ " + t.messageID() + " FROM " + t.Ref() + " WHERE " + t.messageID() +
		" IN (?" + strings.Repeat(", ?", max(n-1, 0)) + ") LIMIT 1"
}
