package outboxsql

import (
	"strconv"
	"strings"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// PollOptions say what the rounds of poll mode read and do.
type PollOptions struct {
	// DeleteRows deletes the relayed rows instead of marking them sent.
	DeleteRows bool
	// MaxPayloadBytes is the largest payload relayed; with DeleteRows
	// false, a larger one is not read at all (its row keeps it).
	MaxPayloadBytes int
	// Fields are the columns carried as fields of their own
	// (schema.FieldColumns), which Fetch returns last, in this order.
	Fields []schema.ExtraColumn
}

// Poll holds the statements of a poll round, rendered once.
type Poll struct {
	lock, fetch, unsentBelow, mark, id string
}

// NewPoll renders the statements of a poll round over t.
func NewPoll(t Table, o PollOptions) *Poll {
	m := t.Mapping
	id := t.Col(schema.ColID)
	table := t.Ref()
	unsent := t.unsent()
	where := func(extra string) string {
		switch {
		case unsent != "" && extra != "":
			return " WHERE " + unsent + " AND " + extra
		case unsent != "":
			return " WHERE " + unsent
		case extra != "":
			return " WHERE " + extra
		}
		return ""
	}
	aggType := "''"
	if m.Has(schema.ColAggregateType) {
		aggType = t.Col(schema.ColAggregateType)
	}
	other := []string{"COALESCE(LENGTH(" + t.Col(schema.ColEventType) + "), 0)"}
	for _, logical := range []string{schema.ColMessageID, schema.ColHeaders} {
		if m.Has(logical) {
			other = append(other, "COALESCE(LENGTH("+t.Col(logical)+"), 0)")
		}
	}
	for _, f := range o.Fields {
		other = append(other, "COALESCE(LENGTH("+schema.QuoteIdent(f.Column)+"), 0)")
	}
	p := &Poll{id: id, mark: t.markPrefix(o.DeleteRows)}
	p.lock = "SELECT /* binlog-outbox */ " + id + ", " + aggType + ", " + t.Col(schema.ColAggregateID) +
		", LENGTH(" + t.Col(schema.ColPayload) + "), " + strings.Join(other, " + ") +
		" FROM " + table + where("") + " ORDER BY " + id
	// FOR UPDATE on rows this transaction holds already: it waits for
	// nothing and reads their current version at any isolation level.
	p.fetch = "SELECT /* binlog-outbox */ " + strings.Join(fetchColumns(t, o), ", ") + " FROM " + table + " WHERE " + id + " IN ("
	p.unsentBelow = "SELECT /* binlog-outbox */ " + id + ", " + aggType + ", " + t.Col(schema.ColAggregateID) +
		" FROM " + table + where(id+" < ")
	return p
}

// Probe is a statement that returns one row, the value tag, when t holds an
// unsent row and none otherwise: a non-locking read that costs the server one
// index lookup, which a relay of many tables runs for all of them in one
// UNION ALL instead of a round per table. A row another relay has locked
// still counts as unsent; a round then finds nothing, which only costs it.
func Probe(t Table, tag int) string {
	where := ""
	if u := t.unsent(); u != "" {
		where = " WHERE " + u
	}
	return "SELECT " + strconv.Itoa(tag) + " FROM " + t.Ref() + where + " LIMIT 1"
}

// fetchColumns are the columns Fetch returns, in its order.
func fetchColumns(t Table, o PollOptions) []string {
	m := t.Mapping
	cols := []string{t.Col(schema.ColID)}
	for _, logical := range []string{schema.ColMessageID, schema.ColAggregateType} {
		if m.Has(logical) {
			cols = append(cols, t.Col(logical))
		}
	}
	payload := t.Col(schema.ColPayload)
	if !o.DeleteRows {
		// An oversize payload is left out of its dead letter (the row
		// keeps it), so it is not read either: a round reads at most
		// MaxPayloadBytes of a payload however large the row is.
		payload = "CASE WHEN LENGTH(" + payload + ") > " + strconv.Itoa(o.MaxPayloadBytes) + " THEN NULL ELSE " + payload + " END"
	}
	cols = append(cols, t.Col(schema.ColAggregateID), t.Col(schema.ColEventType), payload)
	if m.Has(schema.ColHeaders) {
		cols = append(cols, t.Col(schema.ColHeaders))
	}
	cols = append(cols, t.readTime(schema.ColOccurredAt))
	for _, f := range o.Fields {
		// Integers come as their decimal text, as binlog mode renders them.
		cols = append(cols, schema.QuoteIdent(f.Column))
	}
	return cols
}

// Lock locks the next limit unsent rows no other transaction holds, in id
// order, and reads per row only what the ordering rule and the byte budget
// need: id, aggregate_type (” without the column), aggregate_id,
// LENGTH(payload), and the sum of the other columns' lengths. It never
// reads a payload.
func (p *Poll) Lock(limit int) string {
	return p.lock + " LIMIT " + strconv.Itoa(limit) + " FOR UPDATE SKIP LOCKED"
}

// Fetch reads the full rows of ids, which the transaction holds locked:
// id, message_id and aggregate_type (where the mapping has them),
// aggregate_id, event_type, payload (NULL when over MaxPayloadBytes and
// marking), headers (where mapped), occurred_at (a TIMESTAMP as its epoch
// value), then the Fields.
func (p *Poll) Fetch(ids []uint64) string {
	return inList(p.fetch, ids, ") FOR UPDATE")
}

// UnsentBelow lists, without locking, the unsent rows with an id below
// below that are not among mine: id, aggregate_type, aggregate_id.
func (p *Poll) UnsentBelow(below uint64, mine []uint64) string {
	return inList(p.unsentBelow+strconv.FormatUint(below, 10)+" AND "+p.id+" NOT IN (", mine, ")")
}

// Mark marks the relayed rows ids sent, or deletes them.
func (p *Poll) Mark(ids []uint64) string {
	return inList(p.mark, ids, ")")
}

// Backlog renders the statements that measure poll mode's backlog: count
// counts the unsent rows up to max+1, oldest reads the occurred_at of the
// unsent row with the smallest id ("" without the column). Both read the
// index the lock reads (sent_at, id), without locking.
func Backlog(t Table, max int) (count, oldest string) {
	where := ""
	if u := t.unsent(); u != "" {
		where = " WHERE " + u
	}
	count = "SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1 FROM " + t.Ref() + where +
		" LIMIT " + strconv.Itoa(max+1) + ") AS unsent"
	if t.Mapping.Has(schema.ColOccurredAt) {
		oldest = "SELECT /* binlog-outbox */ " + t.readTime(schema.ColOccurredAt) + " FROM " + t.Ref() + where +
			" ORDER BY " + t.Col(schema.ColID) + " LIMIT 1"
	}
	return count, oldest
}
