package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/sqlscan"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
)

// ErrTableNotFound means the outbox table does not exist, or the user has no
// privilege on it (information_schema hides tables a user cannot access).
// It is a configuration error (outbox.ErrConfig): retrying does not help.
var ErrTableNotFound = outbox.NewConfigError("outbox table not found")

// Table describes an existing outbox table as information_schema shows it.
type Table struct {
	// Database and Name identify the table.
	Database string
	Name     string
	// MariaDB is true on MariaDB, false on MySQL; VERSION() tells them apart.
	MariaDB bool
	// View is true when Name is a view, which the binlog never logs rows of.
	View bool
	// Engine is the storage engine, e.g. "InnoDB"; "" for a view.
	Engine string
	// Columns are all physical columns in ordinal order, as a row event of
	// the binlog carries them.
	Columns []Column
	// PrimaryKey lists the primary key's columns in key order; nil without
	// one.
	PrimaryKey []string
	// AutoIncrementPK is the physical name of the single-column AUTO_INCREMENT
	// primary key, "" when the table has none.
	AutoIncrementPK string
	// Indexes are the table's indexes, primary key included, by name.
	Indexes []Index
}

// Column is one physical column.
type Column struct {
	// Name is the physical column name.
	Name string
	// Position is the 0-based position of the column in a binlog row.
	Position int
	// DataType is the lower-case information_schema DATA_TYPE: "bigint",
	// "varchar", "json" (MySQL), "longtext" (also a MariaDB JSON column).
	DataType string
	// ColumnType is the full type, e.g. "bigint(20) unsigned".
	ColumnType string
	// Unsigned is true for an UNSIGNED numeric column: the binlog's table map
	// carries signedness only with binlog_row_metadata=FULL, so the reader
	// needs it to decode an id above 2^63.
	Unsigned bool
	// Nullable is true when the column allows NULL.
	Nullable bool
	// AutoIncrement is true for the AUTO_INCREMENT column.
	AutoIncrement bool
	// JSON is true for a MySQL JSON column, logged in the binlog in MySQL's
	// binary JSON format, and for a MariaDB JSON column (LONGTEXT with a
	// json_valid CHECK), logged as text. Either way the relay may pass the
	// value on as a JSON document.
	JSON bool
	// Charset is the character set of a string column ("binary" for BLOB
	// and VARBINARY), "" for other types.
	Charset string
}

// Index is one index of the table.
type Index struct {
	// Name is "PRIMARY" for the primary key.
	Name string
	// Unique is true for unique indexes and the primary key.
	Unique bool
	// Columns are the indexed columns in key order; "" stands for a
	// functional key part (MySQL 8.0.13+), which indexes no column as such.
	Columns []string
}

// Column returns the physical column named name, compared case-insensitively
// as MySQL compares column names.
func (t *Table) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Column{}, false
}

// Inspect reads the description of database.table from information_schema.
// An empty database means the connection's current one. Every query filters
// on the table itself, so a user with privileges on the outbox table alone
// sees all it needs. A missing table is an error wrapping ErrTableNotFound.
func Inspect(ctx context.Context, db *sql.DB, database, table string) (*Table, error) {
	database, err := resolveDatabase(ctx, db, database, table)
	if err != nil {
		return nil, err
	}
	t := &Table{Database: database, Name: table}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("inspect table %s.%s: server version: %w", database, table, err)
	}
	flavor, _, _, _, err := mysqlserver.ParseVersion(version)
	if err != nil {
		return nil, fmt.Errorf("inspect table %s.%s: %w", database, table, err)
	}
	t.MariaDB = flavor == mysqlserver.FlavorMariaDB

	var tableType string
	var engine sql.NullString
	err = db.QueryRowContext(ctx, `SELECT /* binlog-outbox */ TABLE_TYPE, ENGINE
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		database, table).Scan(&tableType, &engine)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, outbox.WithHint(fmt.Errorf("%w: table %s does not exist in database %s", ErrTableNotFound, table, database),
			"create it with `binlog-outbox schema apply` or `binlog-outbox schema print`; if it exists, grant the relay user SELECT on it")
	}
	if err != nil {
		return nil, fmt.Errorf("inspect table %s.%s: %w", database, table, err)
	}
	t.View = tableType == "VIEW" || tableType == "SYSTEM VIEW"
	t.Engine = engine.String

	if err := t.readColumns(ctx, db); err != nil {
		return nil, fmt.Errorf("inspect table %s.%s: columns: %w", database, table, err)
	}
	if err := t.readIndexes(ctx, db); err != nil {
		return nil, fmt.Errorf("inspect table %s.%s: indexes: %w", database, table, err)
	}
	// A view's CHECK options are not column checks, and SHOW CREATE TABLE
	// answers for a view with other columns.
	if t.MariaDB && !t.View {
		if err := t.readJSONChecks(ctx, db); err != nil {
			return nil, fmt.Errorf("inspect table %s.%s: check constraints: %w", database, table, err)
		}
	}
	return t, nil
}

// resolveDatabase returns database, or the connection's current database when
// it is "".
func resolveDatabase(ctx context.Context, db *sql.DB, database, table string) (string, error) {
	if database != "" {
		return database, nil
	}
	var cur sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ DATABASE()").Scan(&cur); err != nil {
		return "", fmt.Errorf("inspect table %s: current database: %w", table, err)
	}
	if !cur.Valid {
		return "", outbox.WithHint(fmt.Errorf("%w: inspect table %s: no database selected", outbox.ErrConfig, table),
			"name the database in the DSN, e.g. user:pass@tcp(host:3306)/app")
	}
	return cur.String, nil
}

func (t *Table) readColumns(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT /* binlog-outbox */ COLUMN_NAME, DATA_TYPE, COLUMN_TYPE,
		IS_NULLABLE, EXTRA, CHARACTER_SET_NAME
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		ORDER BY ORDINAL_POSITION`, t.Database, t.Name)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c Column
		var nullable, extra string
		var charset sql.NullString
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &nullable, &extra, &charset); err != nil {
			return err
		}
		c.Position = len(t.Columns)
		c.DataType = strings.ToLower(c.DataType)
		c.ColumnType = strings.ToLower(c.ColumnType)
		c.Unsigned = strings.Contains(c.ColumnType, "unsigned")
		c.Nullable = nullable == "YES"
		c.AutoIncrement = strings.Contains(strings.ToLower(extra), "auto_increment")
		c.JSON = c.DataType == "json"
		c.Charset = charset.String
		t.Columns = append(t.Columns, c)
	}
	return rows.Err()
}

func (t *Table) readIndexes(ctx context.Context, db *sql.DB) error {
	// COLUMN_NAME is NULL for a functional key part on MySQL 8.0.13+.
	rows, err := db.QueryContext(ctx, `SELECT /* binlog-outbox */ INDEX_NAME, NON_UNIQUE, COLUMN_NAME
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`, t.Database, t.Name)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var nonUnique int
		var col sql.NullString
		if err := rows.Scan(&name, &nonUnique, &col); err != nil {
			return err
		}
		if n := len(t.Indexes); n == 0 || t.Indexes[n-1].Name != name {
			t.Indexes = append(t.Indexes, Index{Name: name, Unique: nonUnique == 0})
		}
		ix := &t.Indexes[len(t.Indexes)-1]
		ix.Columns = append(ix.Columns, col.String)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// COLUMN_KEY = 'PRI' is no evidence: MySQL shows it for the first
	// UNIQUE NOT NULL index of a table without a primary key, which the
	// relay cannot use for ordering all the same.
	for _, ix := range t.Indexes {
		if ix.Name != "PRIMARY" {
			continue
		}
		t.PrimaryKey = ix.Columns
		if len(ix.Columns) == 1 {
			if c, ok := t.Column(ix.Columns[0]); ok && c.AutoIncrement {
				t.AutoIncrementPK = c.Name
			}
		}
	}
	return nil
}

// readJSONChecks marks the MariaDB JSON columns. MariaDB has no JSON type: a
// column declared JSON is LONGTEXT with the CHECK json_valid(`col`).
// information_schema.CHECK_CONSTRAINTS lists it (with TABLE_NAME, unlike
// MySQL's, which is why this runs on MariaDB only), but hides it from a user
// whose only privilege is SELECT on the table; SHOW CREATE TABLE shows that
// user the clauses too, so it is the fallback when no constraint is visible.
func (t *Table) readJSONChecks(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT /* binlog-outbox */ CHECK_CLAUSE
		FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`,
		t.Database, t.Name)
	if err != nil {
		return err
	}
	defer rows.Close()
	var clauses []string
	for rows.Next() {
		var clause string
		if err := rows.Scan(&clause); err != nil {
			return err
		}
		clauses = append(clauses, clause)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(clauses) == 0 && slices.ContainsFunc(t.Columns, func(c Column) bool { return c.DataType == "longtext" }) {
		var name, ddl string
		q := "SHOW /* binlog-outbox */ CREATE TABLE " + QuoteIdent(t.Database) + "." + QuoteIdent(t.Name)
		if err := db.QueryRowContext(ctx, q).Scan(&name, &ddl); err != nil {
			return fmt.Errorf("show create table: %w", err)
		}
		clauses = checkClauses(ddl)
	}
	for _, clause := range clauses {
		if name, ok := jsonValidColumn(clause); ok {
			for i := range t.Columns {
				if strings.EqualFold(t.Columns[i].Name, name) {
					t.Columns[i].JSON = true
				}
			}
		}
	}
	return nil
}

// checkClauses returns the clause inside every CHECK (...) of a CREATE TABLE
// statement, skipping over quoted names and strings so that a parenthesis or
// the word CHECK inside them does not count.
func checkClauses(ddl string) []string {
	var clauses []string
	for i := 0; i < len(ddl); i++ {
		c := ddl[i]
		switch {
		case sqlscan.IsQuote(c):
			i = sqlscan.QuoteEnd(ddl, i) - 1
		case (i == 0 || !isIdentByte(ddl[i-1])) && len(ddl)-i > 5 && strings.EqualFold(ddl[i:i+5], "check"):
			j := i + 5
			for j < len(ddl) && ddl[j] == ' ' {
				j++
			}
			if j < len(ddl) && ddl[j] == '(' {
				if end := sqlscan.MatchParen(ddl, j); end > 0 {
					clauses = append(clauses, ddl[j+1:end])
					i = end
				}
			}
		}
	}
	return clauses
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// jsonValidColumn returns the column of a check clause that is exactly
// json_valid(`col`) or json_valid(col). A clause that only contains a
// json_valid call, e.g. "json_valid(a) or a is null", is not taken: it does
// not guarantee JSON.
func jsonValidColumn(clause string) (string, bool) {
	s := strings.TrimSpace(clause)
	const fn = "json_valid("
	if len(s) < len(fn) || !strings.EqualFold(s[:len(fn)], fn) || !strings.HasSuffix(s, ")") {
		return "", false
	}
	arg := strings.TrimSpace(s[len(fn) : len(s)-1])
	// Backticks, or double quotes under sql_mode ANSI_QUOTES.
	for _, q := range []string{"`", `"`} {
		if len(arg) >= 2 && arg[:1] == q && arg[len(arg)-1:] == q {
			inner := arg[1 : len(arg)-1]
			if strings.Contains(strings.ReplaceAll(inner, q+q, ""), q) {
				return "", false
			}
			return strings.ReplaceAll(inner, q+q, q), inner != ""
		}
	}
	if arg == "" || strings.ContainsAny(arg, "`\"'() ,") {
		return "", false
	}
	return arg, true
}
