package canal

import (
	"context"
	"fmt"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// columnError stops the reader at rows of a followed table that have a
// column the relay did not expect, or lack one it maps
// (binlogrow.ColumnError). Which step goes on depends on the table as it is
// now: a column added since the start is relayed after a restart, but after
// one dropped since the rows were written, or dropped and added again, a
// restart stops at the same rows again. So the reader asks the table
// (explainColumn) before it stops.
type columnError struct {
	*binlogrow.ColumnError
	// at is the start of the transaction of the rows.
	at position.Point
}

func (e *columnError) Unwrap() error { return e.ColumnError }

// explainColumn returns ce with the hint that goes on from where the table
// is now. It runs after the session ended: the scan for the DDL that
// restored a column uses the session's server id.
func (r *Reader) explainColumn(ctx context.Context, ce *columnError) error {
	has, err := r.hasColumn(ctx, ce.Database, ce.Table, ce.Physical)
	if err != nil {
		return fmt.Errorf("%w (whether %s.%s has the column %s now is unknown: %v)", ce, ce.Database, ce.Table, ce.Physical, err)
	}
	absent := "--column " + ce.Logical + "=-"
	switch {
	case ce.Appeared && has:
		return outbox.WithHint(ce, "restart the relay: it resumes at this transaction (%s) and relays the column from here on; or keep entries without it with %s", ce.at.String(), absent)
	case ce.Appeared:
		return outbox.WithHint(ce, "the column was dropped after these rows were written, so a plain restart stops here again: restart with %s, "+
			"which relays these rows and all later ones without %s, as the table has it no more", absent, ce.Logical)
	case !has && ce.Extra:
		return outbox.WithHint(ce, "restore the column, or drop --extra-column %s and restart", ce.Physical)
	case !has:
		return outbox.WithHint(ce, "if the column was renamed, map it with --column %s=<name>; if it was dropped, restore it", ce.Logical)
	}
	return r.restoredColumnError(ctx, ce)
}

// restoredColumnError is the stop at rows written while the table had no
// column the relay needs, which it has again: the rows cannot become
// entries, a restart reads them again, and no flag maps a column they lack.
// The way on is the one past rows of an unknown layout: resume after the DDL
// that restored the column, and republish the rows in between.
func (r *Reader) restoredColumnError(ctx context.Context, ce *columnError) error {
	why := fmt.Sprintf("%s.%s has the column %s again, but the rows from %s on were written while it had none", ce.Database, ce.Table, ce.Physical, ce.at.String())
	file, pos, err := r.currentPosition(ctx)
	if err != nil {
		return fmt.Errorf("%w; %s (finding where it came back: %w)", ce, why, err)
	}
	ddls, err := r.scanForDDL(ctx, ce.at, file, pos)
	if err != nil {
		return fmt.Errorf("%w; %s (finding where it came back: %w)", ce, why, err)
	}
	var d *ddlEvent
	for _, x := range ddls {
		if strings.EqualFold(x.db, ce.Database) && strings.EqualFold(x.table, ce.Table) {
			d = x
		}
	}
	if d == nil {
		return outbox.WithHint(fmt.Errorf("%w; %s", ce, why),
			"find the ALTER TABLE that added it again with `mysqlbinlog --start-position=%d %s`, then `binlog-outbox position set --start-from <file:pos after it>`, "+
				"and republish the outbox rows committed in between, which the relay skips: then, with the relay stopped, `binlog-outbox repair --apply` appends those rows, which no stream holds, once each (docs/incidents.md)", ce.at.Pos, ce.at.File)
	}
	resume := fmt.Sprintf("%s:%d", d.file, d.end)
	if !d.gset.IsZero() {
		resume = d.gset.String()
	}
	return outbox.WithHint(fmt.Errorf("%w; %s, up to `%s` at %s:%d (%s)", ce, why, logging.Truncate(d.query, 200), d.file, d.start,
		time.Unix(int64(d.when), 0).UTC().Format(time.RFC3339)),
		"1) `binlog-outbox position set --start-from %s` to resume right after that DDL; "+
			"2) republish the outbox rows committed from %s:%d to %s:%d, which the relay skips: "+
			"then, with the relay stopped, `binlog-outbox repair --apply` appends those rows, which no stream holds, once each (docs/incidents.md)",
		resume, ce.at.File, ce.at.Pos, d.file, d.end)
}

// hasColumn reports whether database.table has the column now.
func (r *Reader) hasColumn(ctx context.Context, database, table, column string) (bool, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT /* binlog-outbox */ COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`, database, table, column).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read the columns of %s.%s: %w", database, table, err)
	}
	return n > 0, nil
}
