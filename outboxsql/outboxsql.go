// Package outboxsql builds every statement over the outbox table: poll
// mode's rounds, and cleanup, verify and mark-appended beside the relay. It
// is the one place that knows how a mapping names the columns, how a
// TIMESTAMP column is compared and read whatever the session's time zone,
// and how MariaDB's CHECK constraints are kept from failing a mark, so that
// each workaround is written once. Every statement carries the
// /* binlog-outbox */ comment, so that DBAs can find it.
//
// The statements take ids inlined as integers rather than as parameters:
// each is one round trip in the text protocol whatever the DSN says about
// interpolateParams. Other values (times, limits) are parameters.
package outboxsql

import (
	"strconv"
	"strings"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Table is the outbox table as the statements name it.
type Table struct {
	// Database is empty for the connection's default database.
	Database, Name string
	// Mapping names the physical columns of the logical ones.
	Mapping schema.Mapping
	// Info is the inspected table, nil when it was not inspected: then
	// every column is taken for a DATETIME and the server for no MariaDB.
	Info *schema.Table
}

// Ref is the table as the statements name it: `db`.`table`, or `table`.
func (t Table) Ref() string {
	if t.Database == "" {
		return schema.QuoteIdent(t.Name)
	}
	return schema.QuoteIdent(t.Database) + "." + schema.QuoteIdent(t.Name)
}

// Col is the quoted physical column of a logical one.
func (t Table) Col(logical string) string {
	name, _ := t.Mapping.Physical(logical)
	return schema.QuoteIdent(name)
}

// isTimestamp reports whether the column of logical is a TIMESTAMP, which
// the server renders and compares in the session's time zone.
func (t Table) isTimestamp(logical string) bool {
	if t.Info == nil {
		return false
	}
	c, ok := t.Info.Column(t.Mapping[logical])
	return ok && c.DataType == "timestamp"
}

// isUnixSeconds reports whether the column of logical is an integer, which
// holds Unix seconds (Laravel's jobs.available_at).
func (t Table) isUnixSeconds(logical string) bool {
	if t.Info == nil {
		return false
	}
	c, ok := t.Info.Column(t.Mapping[logical])
	return ok && (c.DataType == "int" || c.DataType == "bigint")
}

// readTime is the expression that reads the time column of logical: a
// TIMESTAMP as its epoch value, the same in any session time zone (binlog
// mode sends it in UTC); a DATETIME as it is, which holds UTC as the relay
// reads it (eventrow.ToTime).
func (t Table) readTime(logical string) string {
	if t.isTimestamp(logical) {
		return "UNIX_TIMESTAMP(" + t.Col(logical) + ")"
	}
	return t.Col(logical)
}

// messageID is the message_id column, or the id as text when the table has
// none (what the entries carry then).
func (t Table) messageID() string {
	if t.Mapping.Has(schema.ColMessageID) {
		return t.Col(schema.ColMessageID)
	}
	return "CAST(" + t.Col(schema.ColID) + " AS CHAR)"
}

// unsent is the condition of a row not marked sent; "" for a table without
// sent_at, whose rows are all unsent (poll mode deletes what it sends).
func (t Table) unsent() string {
	if t.Mapping.Has(schema.ColSentAt) {
		return t.Col(schema.ColSentAt) + " IS NULL"
	}
	return ""
}

// unsentValue is unsent as a value a SELECT returns: 1 for every row of a
// table without sent_at.
func (t Table) unsentValue() string {
	if u := t.unsent(); u != "" {
		return u
	}
	return "1"
}

// markPrefix is the statement that marks relayed rows sent (or deletes
// them, deleteRows), without the id list.
func (t Table) markPrefix(deleteRows bool) string {
	if deleteRows {
		return "DELETE /* binlog-outbox */ FROM " + t.Ref() + " WHERE " + t.Col(schema.ColID) + " IN ("
	}
	q := "UPDATE /* binlog-outbox */ " + t.Ref() + " SET " + t.Col(schema.ColSentAt) + " = NOW(6) WHERE " + t.Col(schema.ColID) + " IN ("
	if t.Info != nil && t.Info.MariaDB {
		// MariaDB checks every CHECK constraint of a row on UPDATE, also
		// the json_valid one of a JSON payload the producer wrote with
		// check_constraint_checks=0 (a dead letter's). Failing the mark
		// after the append would append the rows again every round, for
		// ever; the payload's problem is reported by its dead letter, and
		// setting sent_at cannot break a constraint.
		q = "SET STATEMENT check_constraint_checks=0 FOR " + q
	}
	return q
}

// inList completes prefix with the ids, comma-separated, and suffix.
func inList(prefix string, ids []uint64, suffix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 21*len(ids) + len(suffix))
	b.WriteString(prefix)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	b.WriteString(suffix)
	return b.String()
}
