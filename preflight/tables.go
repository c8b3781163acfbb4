package preflight

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Requirement names of a relay of several tables, as `check` prints them.
const (
	NameTables      = "outbox tables"
	NamePositionKey = "position key"
)

// TableMatch is a table that Config.Sources matched, with the mapping of its
// source resolved against it.
type TableMatch struct {
	schema.Match
	Resolution schema.Resolution
}

// listShown bounds the tables the tables line names; the table lines below
// it name each.
const listShown = 10

// checkTables checks the tables of a relay of several tables: how many each
// --table value matches (a pattern that matches none yet warns: its tables
// may be created later, and are followed from their first row), SELECT on
// and the fitness of each, that they agree on the optional columns that
// shape every entry, that binlog mode has a position key that the list of
// tables does not change, and what poll mode needs of every table
// (checkPollTables).
func checkTables(ctx context.Context, db *sql.DB, srv mysqlserver.Server, database, acct string, cfg Config) ([]TableMatch, []Result) {
	var out []Result
	if cfg.PositionKey == "" {
		out = append(out, refusal(NamePositionKey, NoPositionKey(schema.PatternsOf(cfg.Sources).String()), binlogOnly))
	} else {
		out = append(out, pass(NamePositionKey, cfg.PositionKey+" covers every table", binlogOnly))
	}
	ps := make(schema.Patterns, len(cfg.Sources))
	for i, s := range cfg.Sources {
		if s.Pattern.Database == "" && database == "" {
			return nil, append(out, fail(NameTables, "the MySQL DSN names no database, and --table "+s.Spec+" names none either",
				"add the database to the DSN (user:password@tcp(host:3306)/app) or write --table database.table", both))
		}
		ps[i] = s.Pattern.WithDatabase(database)
	}
	matches, err := schema.ListMatching(ctx, db, ps)
	if err != nil {
		fix := outbox.HintOf(err)
		if fix == "" {
			fix = "make sure the relay user can read information_schema for the tables"
		}
		return nil, append(out, fail(NameTables, "cannot list the tables of --table "+ps.String()+": "+err.Error(), fix, both))
	}
	counts := make([]int, len(ps))
	for _, m := range matches {
		counts[m.Pattern]++
	}
	var none []string
	var per []string
	for i, p := range ps {
		per = append(per, fmt.Sprintf("%s: %d", p, counts[i]))
		if counts[i] == 0 {
			none = append(none, p.String())
		}
	}
	names := make([]string, 0, listShown)
	for i, m := range matches {
		if i == listShown {
			names = append(names, fmt.Sprintf("and %d more", len(matches)-listShown))
			break
		}
		names = append(names, m.String())
	}
	detail := fmt.Sprintf("%d tables match (%s)", len(matches), strings.Join(per, ", "))
	if len(names) > 0 {
		detail += ": " + strings.Join(names, ", ")
	}
	if len(none) > 0 {
		out = append(out, warn(NameTables, detail+"; "+strings.Join(none, ", ")+" matches no table yet: its tables are followed from their first row once created",
			"if the tables exist, grant the relay user SELECT on them (information_schema hides tables a user cannot read), e.g. GRANT SELECT ON `tenant\\_%`.* TO "+acct+"; or correct the pattern", both))
	} else {
		out = append(out, pass(NameTables, detail, both))
	}

	var tables []TableMatch
	var unreadable []string
	for _, m := range matches {
		qtable := schema.QuoteIdent(m.Database) + "." + schema.QuoteIdent(m.Table)
		if err := probe(ctx, db, "SELECT /* binlog-outbox */ 1 FROM "+qtable+" LIMIT 0"); err != nil {
			unreadable = append(unreadable, m.String()+" ("+err.Error()+")")
			continue
		}
		src := cfg.Sources[m.Pattern]
		tcfg := cfg
		tcfg.Mapping, tcfg.Declared = src.Mapping, src.Declared
		res, r := validateTable(ctx, db, m.Name, tcfg)
		out = append(out, r)
		if res != nil {
			tables = append(tables, TableMatch{Match: m, Resolution: *res})
		}
	}
	switch {
	case len(unreadable) > 0:
		out = append(out, fail(NameSelect, "SELECT denied or failed on "+strings.Join(unreadable, "; "),
			"GRANT SELECT ON each of these tables (or on their databases, e.g. `tenant\\_%`.*) TO "+acct+";", both))
	case len(matches) > 0:
		out = append(out, pass(NameSelect, fmt.Sprintf("SELECT works on all %d tables", len(matches)), both))
	}
	if r, ok := checkEntryShape(tables); ok {
		out = append(out, r)
	}
	return tables, append(out, checkPollTables(ctx, db, srv, acct, cfg, tables)...)
}

// checkPollTables checks what poll mode needs of each table, as checkTable
// does for one (SKIP LOCKED, the right to mark or delete relayed rows), and
// sums each requirement up in one line that names every table failing it:
// twenty tenants' lines would bury the one that matters. A table the relay
// cannot read is not in tables: the select privilege line fails it, for
// both modes.
func checkPollTables(ctx context.Context, db *sql.DB, srv mysqlserver.Server, acct string, cfg Config, tables []TableMatch) []Result {
	if err := srv.SkipLocked(); err != nil {
		return []Result{fail(NameSkipLocked, err.Error(), outbox.HintOf(err), pollOnly),
			skip(NamePollWrite, "not checked: the server has no SKIP LOCKED", pollOnly)}
	}
	if len(tables) == 0 {
		return []Result{
			pass(NameSkipLocked, srv.String()+" supports SKIP LOCKED (not tried: no table matches yet)", pollOnly),
			pass(NamePollWrite, "not tried: no table matches yet (the relay user needs UPDATE of sent_at or DELETE on the tables to come, as it needs SELECT)", pollOnly),
		}
	}
	var locks, writes []Result
	for _, t := range tables {
		qtable := schema.QuoteIdent(t.Database) + "." + schema.QuoteIdent(t.Table)
		locks = append(locks, checkSkipLocked(ctx, db, srv, qtable, true, acct))
		tcfg := cfg
		tcfg.Mapping = t.Resolution.Mapping
		writes = append(writes, checkPollWrite(ctx, db, qtable, t.String(), acct, tcfg))
	}
	return []Result{
		sumUp(NameSkipLocked, tables, locks, fmt.Sprintf("SELECT ... FOR UPDATE SKIP LOCKED works on all %d tables", len(tables))),
		sumUp(NamePollWrite, tables, writes, fmt.Sprintf("%s on all %d tables", pollWriteWorks(cfg.OnSent), len(tables))),
	}
}

// pollWriteWorks says what checkPollWrite proved for on-sent, for the line
// of several tables.
func pollWriteWorks(onSent string) string {
	switch strings.ToLower(onSent) {
	case "mark":
		return "UPDATE of sent_at works"
	case "delete":
		return "DELETE works"
	}
	return "marking or deleting relayed rows works"
}

// sumUp folds the results of one requirement, one per table, into one:
// FAIL (or SKIP) naming each table that is not PASS, with its detail and
// the fixes, else PASS with passed.
func sumUp(name string, tables []TableMatch, rs []Result, passed string) Result {
	var details, fixes []string
	status := Pass
	for i, r := range rs {
		if r.Status == Pass {
			continue
		}
		if status != Fail {
			status = r.Status // a failure outweighs a warning or a skip
		}
		details = append(details, tables[i].String()+": "+r.Detail)
		if r.Fix != "" && !slices.Contains(fixes, r.Fix) {
			fixes = append(fixes, r.Fix)
		}
	}
	if status == Pass {
		return pass(name, passed, pollOnly)
	}
	detail := fmt.Sprintf("%d of %d tables: %s", len(details), len(tables), strings.Join(details, "; "))
	return Result{Name: name, Status: status, Detail: detail, Fix: strings.Join(fixes, " "), Modes: pollOnly}
}

// checkEntryShape fails tables that differ in the optional columns every
// entry has a field for or not (aggregate_type, headers): one relay writes
// entries of one shape, and a stream template with {aggregate_type} needs
// the column in every table.
func checkEntryShape(tables []TableMatch) (Result, bool) {
	var problems []string
	for _, col := range []string{schema.ColAggregateType, schema.ColHeaders} {
		var with, without []string
		for _, t := range tables {
			if t.Resolution.Mapping.Has(col) {
				with = append(with, t.String())
			} else {
				without = append(without, t.String())
			}
		}
		if len(with) > 0 && len(without) > 0 {
			problems = append(problems, fmt.Sprintf("%s is a column of %s but not of %s", col, shortList(with), shortList(without)))
		}
	}
	if len(problems) == 0 {
		return Result{}, false
	}
	return fail(NameTables, "the tables differ in the columns that shape every entry: "+strings.Join(problems, "; "),
		"add the column to the tables that lack it, or leave it out of every table's entries with --column aggregate_type=- (or headers=-)", both), true
}

func shortList(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	return strings.Join(names, ", ")
}
