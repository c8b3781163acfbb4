package schema

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Pattern is one --table value: the tables a relay follows. Either part may
// hold '*', which matches any run of characters, so that `tenant_*.outbox`
// names the outbox table of every tenant database (the database-per-tenant
// layout of Laravel multi-tenancy), those created later included.
type Pattern struct {
	// Database is "" until the DSN's database is filled in for a value
	// without one (WithDatabase).
	Database, Table string
}

// Wildcard is the character of a Pattern that matches any run of characters.
const Wildcard = "*"

// ParsePattern parses `table`, `database.table` or either with '*'.
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	hint := "give the table as table, database.table or a pattern with *, e.g. --table outbox, --table app.outbox or --table 'tenant_*.outbox'; without quotes or backticks"
	db, table, qualified := strings.Cut(s, ".")
	if !qualified {
		db, table = "", s
	}
	switch {
	case s == "":
		return Pattern{}, outbox.WithHint(fmt.Errorf("%w: --table is empty", outbox.ErrConfig), "%s", hint)
	case strings.Contains(table, "."):
		return Pattern{}, outbox.WithHint(fmt.Errorf("%w: --table %q has more than one '.'", outbox.ErrConfig, s), "%s", hint)
	case qualified && !validIdent(strings.ReplaceAll(db, Wildcard, "x")),
		!validIdent(strings.ReplaceAll(table, Wildcard, "x")),
		strings.ContainsAny(s, ":,"):
		return Pattern{}, outbox.WithHint(fmt.Errorf("%w: --table %q is not a table name", outbox.ErrConfig, s), "%s", hint)
	}
	return Pattern{Database: db, Table: table}, nil
}

// WithDatabase fills in db for a pattern that names no database.
func (p Pattern) WithDatabase(db string) Pattern {
	if p.Database == "" {
		p.Database = db
	}
	return p
}

// Exact reports whether the pattern names one table: it has no '*'.
func (p Pattern) Exact() bool {
	return !strings.Contains(p.Database, Wildcard) && !strings.Contains(p.Table, Wildcard)
}

// String returns database.table (table alone while no database is filled in).
func (p Pattern) String() string {
	if p.Database == "" {
		return p.Table
	}
	return p.Database + "." + p.Table
}

// Name is the table an exact pattern names.
func (p Pattern) Name(lowerCaseTableNames int) Name {
	return Name{Database: p.Database, Table: p.Table, LowerCaseTableNames: lowerCaseTableNames}
}

// Matches reports whether the server takes database.table for a table of
// the pattern: names compare as written with lower_case_table_names 0, in
// any letter case otherwise (see Name).
func (p Pattern) Matches(database, table string, lowerCaseTableNames int) bool {
	fold := lowerCaseTableNames != 0
	return globMatch(p.Database, database, fold) && globMatch(p.Table, table, fold)
}

// MatchesFold is Matches in any letter case, for the places that must err on
// the side of yes (a DDL statement that may name a followed table).
func (p Pattern) MatchesFold(database, table string) bool {
	return globMatch(p.Database, database, true) && globMatch(p.Table, table, true)
}

// globMatch matches s against pattern, where '*' matches any run of
// characters, comparing in any letter case when fold is set.
func globMatch(pattern, s string, fold bool) bool {
	if fold {
		pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	}
	parts := strings.Split(pattern, Wildcard)
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// Like turns a pattern part into a LIKE pattern, escaping LIKE's own
// wildcards: '_' is common in table names.
func Like(part string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, Wildcard, `%`)
	return r.Replace(part)
}

// Patterns are the --table values of a relay, in the order given.
type Patterns []Pattern

// Index returns the index of the first pattern that matches
// database.table, or -1: a table that two values match belongs to the
// first, whose column mapping it is relayed with.
func (ps Patterns) Index(database, table string, lowerCaseTableNames int) int {
	for i, p := range ps {
		if p.Matches(database, table, lowerCaseTableNames) {
			return i
		}
	}
	return -1
}

// Several reports whether the values may name more than one table: more
// than one value, or a pattern.
func (ps Patterns) Several() bool {
	return len(ps) > 1 || (len(ps) == 1 && !ps[0].Exact())
}

// String joins the values with ", ", for messages.
func (ps Patterns) String() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// Match is a table that a pattern of Patterns matches.
type Match struct {
	Name
	// Pattern is the index of the first pattern that matches it.
	Pattern int
}

// ListMatching returns the tables of the server (base tables and views, as
// information_schema lists those the user may see) that the patterns match,
// ordered by database and table. An exact pattern is resolved as ResolveName
// resolves a name, and one that matches no table is an error wrapping
// ErrTableNotFound; a pattern may match none: tables created later are
// followed when they appear.
func ListMatching(ctx context.Context, db *sql.DB, ps Patterns) ([]Match, error) {
	lctn, err := LowerCaseTableNames(ctx, db)
	if err != nil {
		return nil, err
	}
	seen := map[Name]bool{}
	var out []Match
	for i, p := range ps {
		var found []Name
		if p.Exact() {
			n, err := ResolveName(ctx, db, p.Database, p.Table)
			if err != nil {
				return nil, err
			}
			found = []Name{n}
		} else {
			found, err = listTables(ctx, db, `TABLE_SCHEMA LIKE ? AND TABLE_NAME LIKE ?`, Like(p.Database), Like(p.Table))
			if err != nil {
				return nil, fmt.Errorf("list the tables of --table %s: %w", p, err)
			}
		}
		for _, n := range found {
			n.LowerCaseTableNames = lctn
			// LIKE compares by the collation of information_schema,
			// which need not be the server's comparison of names.
			if !seen[n] && ps.Index(n.Database, n.Table, lctn) == i {
				seen[n] = true
				out = append(out, Match{Name: n, Pattern: i})
			}
		}
	}
	slices.SortFunc(out, func(a, b Match) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// LowerCaseTableNames returns the server's lower_case_table_names.
func LowerCaseTableNames(ctx context.Context, db *sql.DB) (int, error) {
	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ @@lower_case_table_names").Scan(&lctn); err != nil {
		return 0, fmt.Errorf("lower_case_table_names: %w", err)
	}
	return lctn, nil
}

// Source is one --table value with the column mapping its tables are relayed
// with: the --column flags without a table, then those that name this value.
type Source struct {
	// Spec is the value as given.
	Spec    string
	Pattern Pattern
	// Mapping and Declared are as ParseMapping and DeclaredColumns give
	// them for the source's flags.
	Mapping  Mapping
	Declared []string
}

// ErrUnknownScope is the error for a --column flag whose table is none of
// the --table values.
var ErrUnknownScope = outbox.NewConfigError("--column names a table that is not a --table value")

// ParseSources parses the --table values and the --column flags. A flag
// `value:logical=physical` applies to the tables of the --table value
// written exactly so, on top of the flags without a table, which apply to
// every table: one mapping for all, or one per table. Table names hold no
// ':', logical names neither, so the last ':' before the '=' ends the table.
func ParseSources(tables, columns []string) ([]Source, error) {
	var out []Source
	for _, spec := range tables {
		spec = strings.TrimSpace(spec)
		p, err := ParsePattern(spec)
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			if o.Spec == spec {
				return nil, outbox.WithHint(fmt.Errorf("%w: --table %s is given twice", outbox.ErrConfig, spec), "give each table once")
			}
		}
		out = append(out, Source{Spec: spec, Pattern: p})
	}
	if len(out) == 0 {
		return nil, outbox.WithHint(fmt.Errorf("%w: no --table", outbox.ErrConfig), "name the outbox table, e.g. --table outbox")
	}
	var global []string
	scoped := make([][]string, len(out))
	for _, f := range columns {
		left, _, _ := strings.Cut(f, "=")
		cut := strings.LastIndexByte(left, ':')
		if cut < 0 {
			global = append(global, f)
			continue
		}
		spec := strings.TrimSpace(f[:cut])
		i := slices.IndexFunc(out, func(s Source) bool { return s.Spec == spec })
		if i < 0 {
			specs := make([]string, len(out))
			for j, s := range out {
				specs[j] = s.Spec
			}
			return nil, outbox.WithHint(fmt.Errorf("%w: --column %q is for table %s, and --table gives %s", ErrUnknownScope, f, spec, strings.Join(specs, ", ")),
				"write the table before ':' exactly as one --table value, e.g. --column '%s:payload=body', or drop it to map the column of every table", out[0].Spec)
		}
		scoped[i] = append(scoped[i], f[cut+1:])
	}
	for i := range out {
		flags := append(slices.Clone(global), scoped[i]...)
		m, err := ParseMapping(flags)
		if err != nil {
			if len(out) > 1 && len(scoped[i]) > 0 {
				return nil, fmt.Errorf("the columns of --table %s: %w", out[i].Spec, err)
			}
			return nil, err
		}
		out[i].Mapping, out[i].Declared = m, DeclaredColumns(flags)
	}
	return out, nil
}

// PatternsOf returns the patterns of sources.
func PatternsOf(sources []Source) Patterns {
	ps := make(Patterns, len(sources))
	for i, s := range sources {
		ps[i] = s.Pattern
	}
	return ps
}
