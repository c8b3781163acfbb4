package preflight

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// checkTable checks SELECT on the outbox table, the table itself, and what
// poll mode needs: SKIP LOCKED and the right to mark or delete relayed rows.
func checkTable(ctx context.Context, db *sql.DB, srv mysqlserver.Server, database, acct string, cfg Config) (*schema.Resolution, []Result) {
	if database == "" {
		return nil, append([]Result{fail(NameSelect, "the MySQL DSN names no database",
			"add the database that holds the outbox table to the DSN: user:password@tcp(host:3306)/app", both)},
			skipAll(requirementsFrom(NameTable, NamePollWrite), "not checked: no database")...)
	}
	given := database + "." + cfg.Table
	qtable := schema.QuoteIdent(database) + "." + schema.QuoteIdent(cfg.Table)
	name := given
	var out []Result

	// A user without SELECT on the table is worse than an error in some
	// binlog tools: they drop its row events silently, for lack of the
	// column metadata. So prove SELECT with a statement rather than trust
	// the grants.
	selErr := probe(ctx, db, "SELECT /* binlog-outbox */ 1 FROM "+qtable+" LIMIT 0")
	readable := selErr == nil
	switch {
	case selErr == nil:
		out = append(out, pass(NameSelect, "SELECT on "+name+" works", both))
	case isMySQLError(selErr, errNoSuchTable, errNoSuchDB):
		out = append(out, skip(NameSelect, "not checked: "+name+" does not exist", both))
	case isAccessDenied(selErr):
		out = append(out, fail(NameSelect, "SELECT on "+name+" denied: "+selErr.Error(),
			"GRANT SELECT ON "+qtable+" TO "+acct+";", both))
	default:
		out = append(out, fail(NameSelect, "SELECT on "+name+" failed: "+selErr.Error(),
			"make sure the relay user can read "+name, both))
	}

	var res *schema.Resolution
	if isAccessDenied(selErr) {
		// information_schema hides tables the user has no privilege on, so
		// the validator would wrongly report the table missing.
		out = append(out, skip(NameTable, "not checked: no SELECT privilege on "+name, both))
	} else if n, err := schema.ResolveName(ctx, db, database, cfg.Table); err != nil {
		// The relay would compare the binlog with a name that matches no
		// table and skip every row: run refuses to start, so check fails.
		fix := outbox.HintOf(err)
		if fix == "" {
			fix = "make sure the relay user can read information_schema for " + name
		}
		out = append(out, fail(NameTable, "cannot resolve "+name+": "+err.Error(), fix, both))
	} else {
		// From here on the names the server uses, as run uses them.
		qtable = schema.QuoteIdent(n.Database) + "." + schema.QuoteIdent(n.Table)
		name = n.String()
		var r Result
		res, r = validateTable(ctx, db, n, cfg)
		switch {
		case name != given:
			r.Detail += fmt.Sprintf("; %s is %s on this server (%s), and the relay uses that name, also in its Redis keys", given, name, n.Folding())
		case n.LowerCaseTableNames != 0:
			r.Detail += " (" + n.Folding() + ")"
		}
		out = append(out, r)
		if res != nil {
			// Poll mode's privileges are those of the resolved columns:
			// a table without sent_at can only have its rows deleted.
			cfg.Mapping = res.Mapping
		}
	}

	out = append(out, checkSkipLocked(ctx, db, srv, qtable, readable, acct))
	out = append(out, checkPollWrite(ctx, db, qtable, name, acct, cfg))
	if cfg.ReservedColumn != "" && res != nil {
		out = append(out, checkOtherWorkers(ctx, db, qtable, name, cfg.ReservedColumn))
	}
	return res, out
}

// checkOtherWorkers warns when rows of the table are reserved by another
// worker (Config.ReservedColumn set): in binlog mode the relay reports
// such a worker's UPDATEs as they come, but poll mode cannot see them, and
// a worker that ran before the relay started left no trace but these rows.
func checkOtherWorkers(ctx context.Context, db *sql.DB, qtable, name, col string) Result {
	var n int
	q := "SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1 FROM " + qtable + " WHERE " + schema.QuoteIdent(col) + " IS NOT NULL LIMIT 1000) AS r"
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return skip(NameOtherWorkers, "not checked: "+err.Error(), both)
	}
	if n > 0 {
		rows := fmt.Sprintf("%d rows of %s have", n, name)
		switch n {
		case 1:
			rows = "a row of " + name + " has"
		case 1000:
			rows = "1000 or more rows of " + name + " have"
		}
		return warn(NameOtherWorkers, fmt.Sprintf("%s %s set: a worker of Laravel's database queue (queue:work database) has taken them, and it runs jobs the relay delivers as well: they run twice", rows, col),
			"stop every worker and Horizon supervisor whose connection is the database one (run them on the redis or outbox connection); docs/laravel.md, \"Your jobs, exactly once\"", both)
	}
	return pass(NameOtherWorkers, "no row of "+name+" is reserved by another worker ("+col+" is NULL in every row)", both)
}

// validateTable resolves the mapping against the table (schema.Resolve) and
// runs the schema package's checks: error-level problems fail, warnings warn.
// The detail says which fields the entries lack because the table has no
// such optional column, and which they carry beyond the built-in ones
// (schema_version, --extra-column). The resolution is nil when the table
// could not be inspected or does not exist.
func validateTable(ctx context.Context, db *sql.DB, n schema.Name, cfg Config) (*schema.Resolution, Result) {
	name := n.String()
	res, err := schema.Resolve(ctx, db, n.Database, n.Table, cfg.Mapping, cfg.Declared, cfg.Extra)
	if err != nil {
		fix := outbox.HintOf(err)
		if fix == "" {
			fix = "make sure the relay user can read information_schema for " + name
		}
		return nil, fail(NameTable, "cannot inspect "+name+": "+err.Error(), fix, both)
	}
	t, problems := res.Table, res.Problems
	resolved := &res
	if t == nil {
		resolved = nil // the table does not exist: one error problem says so
	}
	fields := ""
	if d := schema.DescribeAbsent(res.Absent); d != "" {
		fields = "; " + d
	}
	if d := schema.DescribeFields(res.Fields); d != "" {
		fields += "; " + d
	}
	var errs, warns []string
	for _, p := range problems {
		if p.Severity == schema.SeverityError {
			errs = append(errs, p.Message)
		} else {
			warns = append(warns, p.Message)
		}
	}
	const fix = "change the table as each problem says; `binlog-outbox schema print` shows the table the relay expects"
	switch {
	case len(errs) > 0:
		return resolved, fail(NameTable, name+": "+strings.Join(append(errs, warns...), "; ")+fields, fix, both)
	case len(warns) > 0:
		return resolved, warn(NameTable, name+": "+strings.Join(warns, "; ")+fields, fix, both)
	}
	return resolved, pass(NameTable, fmt.Sprintf("%s fits (%d columns, %s)%s", name, len(t.Columns), t.Engine, fields), both)
}

// checkSkipLocked checks that the server supports SELECT ... FOR UPDATE SKIP
// LOCKED, which lets several pollers share the table without waiting on each
// other's row locks. The statement runs in a transaction that is rolled back.
func checkSkipLocked(ctx context.Context, db *sql.DB, srv mysqlserver.Server, qtable string, readable bool, acct string) Result {
	if err := srv.SkipLocked(); err != nil {
		return fail(NameSkipLocked, err.Error(), outbox.HintOf(err), pollOnly)
	}
	if !readable {
		return pass(NameSkipLocked, srv.String()+" supports SKIP LOCKED (not tried: the table is not readable)", pollOnly)
	}
	err := inRollback(ctx, db, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT /* binlog-outbox */ 1 FROM "+qtable+" LIMIT 1 FOR UPDATE SKIP LOCKED")
		if err != nil {
			return err
		}
		return rows.Close()
	})
	switch {
	case err == nil:
		return pass(NameSkipLocked, "SELECT ... FOR UPDATE SKIP LOCKED works", pollOnly)
	case isAccessDenied(err):
		// MySQL 8.0.22+ requires UPDATE, DELETE or LOCK TABLES for FOR UPDATE.
		return fail(NameSkipLocked, "SELECT ... FOR UPDATE SKIP LOCKED denied: "+err.Error(),
			"GRANT UPDATE ON "+qtable+" TO "+acct+";", pollOnly)
	}
	return fail(NameSkipLocked, "SELECT ... FOR UPDATE SKIP LOCKED failed: "+err.Error(),
		"upgrade the server, or run with --mode binlog", pollOnly)
}

// checkPollWrite checks that poll mode may mark relayed rows (UPDATE of
// sent_at) or delete them, with statements that match no row, rolled back.
func checkPollWrite(ctx context.Context, db *sql.DB, qtable, name, acct string, cfg Config) Result {
	sentAt, hasSentAt := cfg.Mapping.Physical(schema.ColSentAt)
	var updErr error
	if hasSentAt {
		col := schema.QuoteIdent(sentAt)
		updErr = inRollback(ctx, db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE /* binlog-outbox */ "+qtable+" SET "+col+" = "+col+" WHERE 1 = 0")
			return err
		})
	} else {
		updErr = fmt.Errorf("the mapping has no %s column", schema.ColSentAt)
	}
	delErr := inRollback(ctx, db, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "DELETE /* binlog-outbox */ FROM "+qtable+" WHERE 1 = 0")
		return err
	})
	if isMySQLError(updErr, errNoSuchTable, errNoSuchDB) || isMySQLError(delErr, errNoSuchTable, errNoSuchDB) {
		return skip(NamePollWrite, "not checked: "+name+" does not exist", pollOnly)
	}
	updFix := "GRANT UPDATE (" + schema.QuoteIdent(sentAt) + ") ON " + qtable + " TO " + acct + ";"
	if !hasSentAt {
		// The table has no sent_at column: nothing to map unless it calls
		// it otherwise.
		updFix = "add a sent_at DATETIME(6) NULL column (or map the one the table calls otherwise with --column sent_at=<name>)"
	}
	delFix := "GRANT DELETE ON " + qtable + " TO " + acct + ";"
	switch strings.ToLower(cfg.OnSent) {
	case "mark":
		if updErr != nil && delErr == nil {
			updFix += ", or run with --on-sent delete"
		}
		if updErr != nil {
			return fail(NamePollWrite, "cannot mark rows as sent: "+updErr.Error(), updFix, pollOnly)
		}
		return pass(NamePollWrite, "UPDATE of sent_at on "+name+" works", pollOnly)
	case "delete":
		if delErr != nil {
			return fail(NamePollWrite, "cannot delete sent rows: "+delErr.Error(), delFix, pollOnly)
		}
		return pass(NamePollWrite, "DELETE on "+name+" works", pollOnly)
	}
	switch {
	case updErr == nil && delErr == nil:
		return pass(NamePollWrite, "UPDATE of sent_at and DELETE on "+name+" work", pollOnly)
	case updErr == nil:
		return pass(NamePollWrite, "UPDATE of sent_at on "+name+" works; DELETE does not, so relayed rows can only be marked", pollOnly)
	case delErr == nil:
		return pass(NamePollWrite, "DELETE on "+name+" works; UPDATE of sent_at does not, so relayed rows can only be deleted", pollOnly)
	}
	return fail(NamePollWrite, "poll mode can neither mark nor delete relayed rows: "+updErr.Error()+"; "+delErr.Error(),
		updFix+" or "+delFix, pollOnly)
}

// inRollback runs fn in a transaction that is always rolled back, so probes
// leave nothing behind, not even a binlog event.
func inRollback(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // nothing to keep
	return fn(tx)
}
