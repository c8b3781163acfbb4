package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Name is a table's name as the server stores and compares it. The binlog
// names tables as the server stores them, so comparing the names a user
// typed with it can miss every row: with lower_case_table_names=1 (Windows,
// macOS, Azure Database for MySQL) `--table Outbox` is stored and logged as
// outbox.
type Name struct {
	// Database and Table are as information_schema lists them.
	Database, Table string
	// LowerCaseTableNames is the server's lower_case_table_names: 0
	// compares names as written; 1 stores them in lower case and 2 as
	// written, and both compare them in lower case.
	LowerCaseTableNames int
}

// String returns database.table.
func (n Name) String() string { return n.Database + "." + n.Table }

// Matches reports whether the server takes database.table for this table.
func (n Name) Matches(database, table string) bool {
	if n.LowerCaseTableNames == 0 {
		return database == n.Database && table == n.Table
	}
	return strings.EqualFold(database, n.Database) && strings.EqualFold(table, n.Table)
}

// Folding describes how the server compares names, for messages.
func (n Name) Folding() string {
	if n.LowerCaseTableNames == 0 {
		return "lower_case_table_names=0: names are case-sensitive"
	}
	return fmt.Sprintf("lower_case_table_names=%d: names compare in any letter case", n.LowerCaseTableNames)
}

// ResolveName returns the name the server uses for database.table, which
// may differ from it in letter case; Database and Table are then the names
// to compare binlog events with and to build keys from, so that `--table
// Outbox` and `--table outbox` are one table with one position. A name that
// matches no table is an error wrapping ErrTableNotFound, never a name that
// matches nothing: a relay with it would skip every row.
func ResolveName(ctx context.Context, db *sql.DB, database, table string) (Name, error) {
	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ @@lower_case_table_names").Scan(&lctn); err != nil {
		return Name{}, fmt.Errorf("resolve table %s.%s: lower_case_table_names: %w", database, table, err)
	}
	want := Name{Database: database, Table: table, LowerCaseTableNames: lctn}
	tries := [][2]string{{database, table}}
	if lctn != 0 && (strings.ToLower(database) != database || strings.ToLower(table) != table) {
		// Stored in lower case with 1: the equality the server looks
		// tables up by then finds them.
		tries = append(tries, [2]string{strings.ToLower(database), strings.ToLower(table)})
	}
	for _, try := range tries {
		found, err := listTables(ctx, db, "TABLE_SCHEMA = ? AND TABLE_NAME = ?", try[0], try[1])
		if err != nil {
			return Name{}, fmt.Errorf("resolve table %s.%s: %w", database, table, err)
		}
		var match []Name
		for _, f := range found {
			// The comparison of information_schema may not be the
			// server's comparison of table names; apply the latter.
			if want.Matches(f.Database, f.Table) {
				f.LowerCaseTableNames = lctn
				match = append(match, f)
			}
		}
		switch len(match) {
		case 1:
			return match[0], nil
		case 0:
			continue
		}
		return Name{}, fmt.Errorf("resolve table %s.%s: %d tables match it (%s)", database, table, len(match), want.Folding())
	}
	return Name{}, notFound(ctx, db, want)
}

// notFound explains a table that does not exist, naming the tables that
// differ from it in letter case only when the server compares names
// case-sensitively.
func notFound(ctx context.Context, db *sql.DB, want Name) error {
	err := fmt.Errorf("%w: table %s does not exist in database %s (%s)", ErrTableNotFound, want.Table, want.Database, want.Folding())
	hint := "create it with `binlog-outbox schema apply` or `binlog-outbox schema print`; if it exists, grant the relay user SELECT on it"
	if want.LowerCaseTableNames == 0 {
		// Only on this error path: the LOWER() comparison reads the names
		// of every table the user can see.
		near, lerr := listTables(ctx, db, "LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?)", want.Database, want.Table)
		if lerr == nil && len(near) > 0 {
			return outbox.WithHint(err, "this server compares table and database names case-sensitively, and %s exists: write --table and the DSN's database exactly as the server stores them (--table %s, DSN .../%s)",
				near[0], near[0].Table, near[0].Database)
		}
	}
	return outbox.WithHint(err, "%s", hint)
}

func listTables(ctx context.Context, db *sql.DB, where, database, table string) ([]Name, error) {
	rows, err := db.QueryContext(ctx, "SELECT /* binlog-outbox */ TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "+where, database, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Name
	for rows.Next() {
		var n Name
		if err := rows.Scan(&n.Database, &n.Table); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}
