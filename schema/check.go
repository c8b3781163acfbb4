package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// ErrTableUnfit means the outbox table exists but the relay cannot use it as
// mapped. It is a configuration error (outbox.ErrConfig): retrying does not
// help.
var ErrTableUnfit = outbox.NewConfigError("outbox table does not fit the relay")

// Severity says whether a Problem stops the relay.
type Severity int

const (
	// SeverityError is a problem the relay cannot run with.
	SeverityError Severity = iota
	// SeverityWarning is a problem the relay runs with, at a cost the
	// message names (skipped rows, full scans, an id that runs out).
	SeverityWarning
)

// String returns "error" or "warning".
func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// Problem is one way a table does not fit the relay.
type Problem struct {
	Severity Severity
	// Column is the logical column concerned, "" for the table as a whole.
	Column string
	// Message is one sentence that says what is wrong and how to fix it.
	Message string
}

// String returns the message prefixed with the severity.
func (p Problem) String() string { return p.Severity.String() + ": " + p.Message }

// Type sets that the relay accepts, by information_schema DATA_TYPE.
var (
	stringTypes  = []string{"char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext"}
	integerTypes = []string{"tinyint", "smallint", "mediumint", "int", "bigint"}
	// documentTypes hold payload and headers: the relay copies the bytes.
	documentTypes = []string{"json", "text", "mediumtext", "longtext", "blob", "mediumblob", "longblob", "varchar", "varbinary"}
	timeTypes     = []string{"datetime", "timestamp"}
	// fieldTypes are the types of the columns carried as fields of their
	// own (schema_version, --extra-column): integers and text, whose values
	// both modes render alike. Binlog rows give others another form than a
	// query does (an ENUM's index, a DATETIME without its zone, a JSON
	// document re-serialised, BINARY padding).
	fieldTypes = append([]string{"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}, integerTypes...)
)

// fieldTypesWant names fieldTypes in messages.
const fieldTypesWant = "an integer type (TINYINT to BIGINT) or a text type (CHAR, VARCHAR, TEXT)"

// typeRule is what Check demands of one logical column's type.
type typeRule struct {
	types []string
	want  string // the allowed types as the message names them
}

var typeRules = map[string]typeRule{
	ColMessageID:     {stringTypes, "a string type (CHAR(26) for a ULID)"},
	ColAggregateType: {stringTypes, "a string type such as VARCHAR(255)"},
	// Integer aggregate ids are common (an order's BIGINT id); the relay
	// renders them in decimal.
	ColAggregateID:   {append(slices.Clone(stringTypes), integerTypes...), "a string or integer type"},
	ColEventType:     {stringTypes, "a string type such as VARCHAR(255)"},
	ColSchemaVersion: {fieldTypes, fieldTypesWant},
	ColPayload:       {documentTypes, "JSON, TEXT, LONGTEXT, MEDIUMTEXT, BLOB, MEDIUMBLOB, LONGBLOB, VARCHAR or VARBINARY"},
	ColHeaders:       {documentTypes, "JSON, TEXT, LONGTEXT, MEDIUMTEXT, BLOB, MEDIUMBLOB, LONGBLOB, VARCHAR or VARBINARY"},
	// An integer occurred_at holds Unix seconds, as Laravel's jobs table's
	// available_at does.
	ColOccurredAt: {append(slices.Clone(timeTypes), "int", "bigint"), "DATETIME, TIMESTAMP, or INT or BIGINT of Unix seconds"},
	ColSentAt:     {timeTypes, "DATETIME or TIMESTAMP"},
}

// nullWarnings are the columns whose NULLs the relay cannot turn into an
// event field: a row with NULL there is a dead letter (package eventrow),
// which consumers do not get until it is fixed and replayed.
var nullWarnings = []string{ColMessageID, ColAggregateID, ColEventType, ColPayload, ColOccurredAt}

// Check compares the table with what the relay needs under mapping m and
// returns the problems, errors first, in a stable order. A nil result means
// the table fits.
func (t *Table) Check(m Mapping) []Problem {
	var ps []Problem
	add := func(sev Severity, logical, format string, args ...any) {
		ps = append(ps, Problem{Severity: sev, Column: logical, Message: fmt.Sprintf(format, args...)})
	}
	if t.View {
		add(SeverityError, "", "%s is a view; map the relay to the base table, whose rows the binlog logs", t.Name)
	} else if !strings.EqualFold(t.Engine, "InnoDB") {
		add(SeverityError, "", "engine %s: use InnoDB (the binlog only marks transaction boundaries with XID for transactional engines); run ALTER TABLE %s ENGINE=InnoDB",
			t.Engine, QuoteIdent(t.Name))
	}
	t.checkPrimaryKey(m, add)
	for _, l := range LogicalColumns {
		p, ok := m.Physical(l)
		if !ok || l == ColID {
			continue
		}
		c, ok := t.Column(p)
		what := describe(l, p)
		if !ok {
			if Optional(l) {
				add(SeverityError, l, "%s is missing; map it with --column %s=<name>, or declare the table has none with --column %s=-", what, l, l)
			} else {
				// Only a table that calls the column otherwise has
				// anything to map: one that lacks it needs it added.
				add(SeverityError, l, "%s is missing; map it with --column %s=<name> if the table calls it otherwise, or add it (`binlog-outbox schema print` shows its definition)", what, l)
			}
			continue
		}
		if r := typeRules[l]; !slices.Contains(r.types, c.DataType) {
			add(SeverityError, l, "%s has type %s; it must be %s", what, strings.ToUpper(c.DataType), r.want)
			continue
		}
		if msg := t.charsetProblem(c, what); msg != "" {
			add(SeverityError, l, "%s", msg)
		}
		switch {
		case l == ColSentAt && !c.Nullable:
			add(SeverityError, l, "%s is NOT NULL; it must allow NULL, which marks a row as unsent: ALTER TABLE %s MODIFY %s %s NULL",
				what, QuoteIdent(t.Name), QuoteIdent(c.Name), strings.ToUpper(c.ColumnType))
		case slices.Contains(nullWarnings, l) && c.Nullable:
			add(SeverityWarning, l, "%s allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL", what)
		}
		if l == ColMessageID && !t.View && !t.hasUniqueKeyOn(c.Name) {
			// Two rows with one id are both relayed; consumers that
			// deduplicate by it drop the second event without a word.
			add(SeverityWarning, l, "%s has no unique key, so two rows may share an id and consumers that deduplicate by it drop the second event; add one: ALTER TABLE %s ADD UNIQUE KEY (%s) (`binlog-outbox verify` reports ids the table holds twice)",
				what, QuoteIdent(t.Name), QuoteIdent(c.Name))
		}
		if l == ColSentAt && !t.hasIndexStartingWith(c.Name) {
			add(SeverityWarning, l, "no index starts with %s, so the poller's WHERE %s IS NULL ORDER BY id scans the whole table; add KEY (%s, %s)",
				what, QuoteIdent(c.Name), QuoteIdent(c.Name), QuoteIdent(m.name(ColID)))
		}
	}
	slices.SortStableFunc(ps, func(a, b Problem) int { return int(a.Severity) - int(b.Severity) })
	return ps
}

// checkPrimaryKey checks that the mapped id is the single-column
// AUTO_INCREMENT primary key: the relay orders and resumes by it, and the
// poller pages through it.
func (t *Table) checkPrimaryKey(m Mapping, add func(Severity, string, string, ...any)) {
	id := m.name(ColID)
	what := describe(ColID, id)
	switch {
	case len(t.PrimaryKey) == 0:
		add(SeverityError, ColID, "table %s has no AUTO_INCREMENT primary key; add one with ALTER TABLE %s ADD %s BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY FIRST",
			t.Name, QuoteIdent(t.Name), QuoteIdent(id))
		return
	case len(t.PrimaryKey) > 1:
		add(SeverityError, ColID, "table %s has the composite primary key (%s); the relay needs a single-column AUTO_INCREMENT primary key",
			t.Name, strings.Join(t.PrimaryKey, ", "))
		return
	case t.AutoIncrementPK == "":
		add(SeverityError, ColID, "primary key column %s of table %s is not AUTO_INCREMENT; the relay needs ids that grow with every insert",
			t.PrimaryKey[0], t.Name)
		return
	case !strings.EqualFold(t.AutoIncrementPK, id):
		add(SeverityError, ColID, "%s is not the AUTO_INCREMENT primary key %s; map it with --column id=%s",
			what, t.AutoIncrementPK, t.AutoIncrementPK)
		return
	}
	c, _ := t.Column(id)
	if !slices.Contains(integerTypes, c.DataType) {
		add(SeverityError, ColID, "%s has type %s; it must be an integer type, ideally BIGINT UNSIGNED", what, strings.ToUpper(c.DataType))
	} else if c.DataType != "bigint" {
		add(SeverityWarning, ColID, "%s has type %s; use BIGINT UNSIGNED so that the AUTO_INCREMENT counter cannot run out", what, strings.ToUpper(c.ColumnType))
	}
}

// hasUniqueKeyOn reports whether a unique key (or the primary key) has col
// as its only column: a key over more columns lets col's values repeat.
func (t *Table) hasUniqueKeyOn(col string) bool {
	for _, ix := range t.Indexes {
		if ix.Unique && len(ix.Columns) == 1 && strings.EqualFold(ix.Columns[0], col) {
			return true
		}
	}
	return false
}

func (t *Table) hasIndexStartingWith(col string) bool {
	for _, ix := range t.Indexes {
		if len(ix.Columns) > 0 && strings.EqualFold(ix.Columns[0], col) {
			return true
		}
	}
	return false
}

// describe names a column in messages by its logical name, adding the
// physical one when the mapping renames it.
func describe(logical, physical string) string {
	if strings.EqualFold(logical, physical) {
		return "column " + physical
	}
	return "column " + physical + " (mapped as " + logical + ")"
}

// Validate inspects database.table and checks it against m (see Inspect and
// Table.Check). A missing table is reported as a Problem, with a nil Table,
// rather than as an error; err is for failures to ask the server.
func Validate(ctx context.Context, db *sql.DB, database, table string, m Mapping) (*Table, []Problem, error) {
	database, err := resolveDatabase(ctx, db, database, table)
	if err != nil {
		return nil, nil, err
	}
	t, err := Inspect(ctx, db, database, table)
	if errors.Is(err, ErrTableNotFound) {
		return nil, []Problem{{Severity: SeverityError, Message: fmt.Sprintf(
			"table %s does not exist in database %s; create it with `binlog-outbox schema apply` or `binlog-outbox schema print`",
			table, database)}}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return t, t.Check(m), nil
}

// ProblemsError returns nil when no problem is an error, and otherwise an
// error wrapping ErrTableUnfit whose message lists the error-level problems.
func ProblemsError(table string, problems []Problem) error {
	var msgs []string
	for _, p := range problems {
		if p.Severity == SeverityError {
			msgs = append(msgs, p.Message)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: table %s: %s", ErrTableUnfit, table, strings.Join(msgs, "; ")),
		"each problem says how to fix it; `binlog-outbox schema print` shows the table the relay expects")
}

// Resolution is an outbox table and the mapping the relay uses on it.
type Resolution struct {
	// Table is the table as inspected; nil when it does not exist.
	Table *Table
	// Mapping is the mapping given, with every optional column in Absent
	// mapped to nothing. Both modes relay with it.
	Mapping Mapping
	// Absent lists, in LogicalColumns order, the optional logical columns
	// the table lacks and no --column named: fields the entries go without
	// (message_id is then the row id).
	Absent []string
	// Fields are the columns the entries carry as fields of their own
	// (FieldColumns of Mapping and the extra columns given).
	Fields []ExtraColumn
	// Problems are Check's problems with Mapping, then CheckExtra's.
	Problems []Problem
}

// Resolve inspects database.table and checks it against m, as Validate does,
// except that an optional column the table lacks is taken as absent rather
// than reported, unless declared names it: declared lists the logical columns
// the user mapped with --column, and a column the user named explicitly and
// the table lacks is a mistake to report, not to guess around. Tables built
// before this relay existed (a `type` column and no aggregate_type or
// headers, an outbox_messages table without message_id) then need only the
// --column flags that rename. The extra columns (--extra-column) must all be
// there: the user named each.
func Resolve(ctx context.Context, db *sql.DB, database, table string, m Mapping, declared []string, extra []ExtraColumn) (Resolution, error) {
	t, problems, err := Validate(ctx, db, database, table, m)
	if err != nil || t == nil {
		return Resolution{Mapping: m, Fields: FieldColumns(m, extra), Problems: problems}, err
	}
	r := Resolution{Table: t, Mapping: make(Mapping, len(m))}
	for l, p := range m {
		r.Mapping[l] = p
	}
	for _, l := range LogicalColumns {
		p, mapped := m.Physical(l)
		if !mapped || !Optional(l) || slices.Contains(declared, l) {
			continue
		}
		if _, ok := t.Column(p); !ok {
			r.Mapping[l] = ""
			r.Absent = append(r.Absent, l)
		}
	}
	r.Fields = FieldColumns(r.Mapping, extra)
	r.Problems = append(t.Check(r.Mapping), t.CheckExtra(extra)...)
	slices.SortStableFunc(r.Problems, func(a, b Problem) int { return int(a.Severity) - int(b.Severity) })
	return r, nil
}

// DescribeAbsent says in one phrase what entries lack because the table has
// no such columns, for `check` and the start-up log; "" when nothing is absent.
func DescribeAbsent(absent []string) string {
	var parts []string
	var lack []string
	for _, l := range absent {
		switch l {
		case ColMessageID:
			parts = append(parts, "message_id is the row id (no message_id column)")
		case ColSentAt:
			parts = append(parts, "poll mode can only delete relayed rows (no sent_at column; --on-sent delete)")
		default:
			lack = append(lack, l)
		}
	}
	if n := len(lack); n > 0 {
		names := lack[n-1]
		if n > 1 {
			names = strings.Join(lack[:n-1], ", ") + " or " + names
		}
		parts = append([]string{"entries have no " + names + " field (no such column)"}, parts...)
	}
	return strings.Join(parts, "; ")
}
