package canal

// Rows without column names (binlog_row_metadata=MINIMAL on MySQL, NO_LOG on
// MariaDB, both the defaults) can only be mapped by position, with a column
// layout read from information_schema. That layout is the current one, and a
// row may have been written under an older one: an ALTER TABLE that moves a
// column but keeps the count and types would swap fields silently. So a
// layout is used only for rows it is proven to be in force at:
//
//   - Read the layout L, then the end of the binlog E. A DDL becomes visible
//     in information_schema only once it is in the binlog (it holds its
//     metadata lock while it is logged; MySQL 8 commits the dictionary with
//     the binlog), so every DDL that L reflects lies before E.
//   - Scan the binlog from the session's start S to E for a DDL naming the
//     outbox table. With none, every DDL L reflects lies before S: L is the
//     layout of every row from S on, up to the next such DDL.
//   - The reader forgets L at the next DDL naming the outbox table in the
//     stream. The next row without names ends the session at the boundary
//     before its transaction (everything before it appended), and the next
//     session proves a new layout from there.
//   - A row without names before a DDL the scan found has no provable
//     layout: the reader stops with the range and the recovery.
//
// Rows with names never need any of this, nor the scan: it runs only in
// sessions after the first row without names.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/sqlscan"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// errNoLayout is the decoder's answer for a row without column names while no
// layout is proven.
var errNoLayout = errors.New("no column layout proven for rows without column names")

// errLayoutRestart asks the reader to prove the table's column layout and
// read again from the transaction that has the first row without names.
type errLayoutRestart struct{ start position.Point }

func (e *errLayoutRestart) Error() string {
	return fmt.Sprintf("rows without column names at %s:%d; proving the table's column layout", e.start.File, e.start.Pos)
}

// ddlEvent is a DDL statement on the outbox table in the binlog.
type ddlEvent struct {
	file       string
	start, end uint32 // the event's first byte and the position after it
	gset       position.GTIDSet
	query      string
	when       uint32
}

// layoutProof is the outcome of proving the layout at a session start:
// either columns, in force from the start on, or the DDL ahead before which
// no layout can be proven.
type layoutProof struct {
	columns  []Column
	ddlAhead *ddlEvent
}

// proveLayout proves the table's column layout for the rows from start on;
// see the comment at the top of this file.
func (r *Reader) proveLayout(ctx context.Context, start position.Point) (layoutProof, error) {
	cols, err := r.tableColumns(ctx)
	if err != nil {
		return layoutProof{}, err
	}
	if len(cols) == 0 {
		// No layout to prove, and no reason the next session would find
		// one: say so rather than restart for ever.
		return layoutProof{}, outbox.WithHint(fmt.Errorf("%w: the binlog has rows of %s.%s without column names, and information_schema shows the relay no columns of that table",
			outbox.ErrConfig, r.name.Database, r.name.Table),
			"grant the relay's user SELECT on the table (information_schema hides tables a user cannot read), or set binlog_row_metadata=FULL so that rows carry their column names")
	}
	// The end of the binlog only now, after the layout: see the proof.
	file, pos, err := r.currentPosition(ctx)
	if err != nil {
		return layoutProof{}, err
	}
	if start.GTIDSet.IsZero() && start.File == file && start.Pos >= pos {
		return layoutProof{columns: cols}, nil
	}
	began := time.Now()
	ddl, err := r.scanForDDL(ctx, start, file, pos)
	if err != nil {
		return layoutProof{}, err
	}
	if ddl != nil {
		r.log.Warn("DDL on the outbox table ahead: rows without column names before it cannot be mapped",
			"ddl_at", fmt.Sprintf("%s:%d", ddl.file, ddl.start), "query", logging.Truncate(ddl.query, 300))
		return layoutProof{ddlAhead: ddl}, nil
	}
	r.log.Info("column layout proven for rows without column names",
		"columns", columnNames(cols, ","), "from", start.String(), "checked_to", fmt.Sprintf("%s:%d", file, pos), "took", time.Since(began).Round(time.Millisecond))
	return layoutProof{columns: cols}, nil
}

func columnNames(cols []Column, sep string) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, sep)
}

// tableColumns reads the outbox table's columns in ordinal order, as rows
// carry them, with their signedness: part of the layout, since rows without
// names carry none on MariaDB.
func (r *Reader) tableColumns(ctx context.Context) ([]Column, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT /* binlog-outbox */ COLUMN_NAME, DATA_TYPE, COLUMN_TYPE LIKE '%unsigned%'
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		ORDER BY ORDINAL_POSITION`, r.name.Database, r.name.Table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", r.name.Database, r.name.Table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.DataType, &c.Unsigned); err != nil {
			return nil, fmt.Errorf("read the columns of %s.%s: %w", r.name.Database, r.name.Table, err)
		}
		c.DataType = strings.ToLower(c.DataType)
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", r.name.Database, r.name.Table, err)
	}
	return cols, nil
}

// scanForDDL reads the binlog from start to file:pos and returns the first
// DDL naming the outbox table, or nil. It decodes no rows: a catch-up reads
// its range twice, the second time at the speed of the network.
func (r *Reader) scanForDDL(ctx context.Context, start position.Point, endFile string, endPos uint32) (*ddlEvent, error) {
	cfg := r.syncerConfig(nil, nil)
	cfg.RowsEventDecodeFunc = func(*replication.RowsEvent, []byte) error { return nil }
	// In GTID mode only a heartbeat may say where the stream is once it
	// reached the end; the scan is not the hot path, a read deadline is fine.
	cfg.HeartbeatPeriod = min(r.cfg.HeartbeatPeriod, 200*time.Millisecond)
	cfg.ReadTimeout = r.cfg.ReadTimeout
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	var streamer *replication.BinlogStreamer
	var err error
	if !start.GTIDSet.IsZero() {
		streamer, err = syncer.StartSyncGTID(start.GTIDSet.GoMySQL())
	} else {
		streamer, err = syncer.StartSync(mysql.Position{Name: start.File, Pos: start.Pos})
	}
	if err != nil {
		return nil, r.streamError(fmt.Errorf("scan the binlog for DDL from %s: %w", start.String(), err), !start.GTIDSet.IsZero())
	}
	file := start.File
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return nil, r.streamError(fmt.Errorf("scan the binlog for DDL from %s to %s:%d: %w", start.String(), endFile, endPos, err), !start.GTIDSet.IsZero())
		}
		h := ev.Header
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			file = string(e.NextLogName)
			if position.FileAtOrPast(file, uint32(e.Position), endFile, endPos) {
				return nil, nil
			}
			continue
		case *replication.HeartbeatEvent:
			if e.Filename != "" {
				file = e.Filename
			}
		case *replication.QueryEvent:
			if isDDLOn(e.Schema, e.Query, r.name.Database, r.name.Table) {
				d := &ddlEvent{file: file, start: h.LogPos, end: h.LogPos, gset: position.GTIDSetOf(e.GSet), query: string(stripComments(e.Query)), when: h.Timestamp}
				if h.LogPos >= h.EventSize {
					d.start = h.LogPos - h.EventSize
				}
				return d, nil
			}
		}
		if h.LogPos > 0 && position.FileAtOrPast(file, h.LogPos, endFile, endPos) {
			return nil, nil
		}
	}
}

// unknownLayoutError is the stop for rows without names before a DDL whose
// earlier layout the relay cannot know.
func (m *machine) unknownLayoutError(tm *replication.TableMapEvent) error {
	d := m.ddlAhead
	resume := fmt.Sprintf("%s:%d", d.file, d.end)
	if !d.gset.IsZero() {
		resume = d.gset.String()
	}
	return outbox.WithHint(fmt.Errorf("%w: rows of %s.%s without column names at %s:%d were written before `%s` at %s:%d (%s), "+
		"and the column order they were written with is unknown: binlog_row_metadata is not FULL and the table changed while the relay was behind",
		outbox.ErrConfig, tm.Schema, tm.Table, m.txStart.File, m.txStart.Pos, logging.Truncate(d.query, 200), d.file, d.start,
		time.Unix(int64(d.when), 0).UTC().Format(time.RFC3339)),
		"1) set binlog_row_metadata=FULL (SET GLOBAL binlog_row_metadata=FULL and in my.cnf [mysqld]) so that rows carry their column names and this never recurs; "+
			"2) `binlog-outbox position set --start-from %s` to resume right after that DDL; "+
			"3) republish the outbox rows committed from %s:%d to %s:%d, which the relay skips: find their ids with "+
			"`mysqlbinlog --base64-output=decode-rows -v --start-position=%d --stop-position=%d %s` and relay them with `binlog-outbox run --mode poll` (docs/switching-modes.md)",
		resume, m.txStart.File, m.txStart.Pos, d.file, d.end, m.txStart.Pos, d.end, d.file)
}

// isDDLOn reports whether q, run with default schema def, is a DDL statement
// that names db.table. It errs on the side of yes (any mention of the table
// in an ALTER, RENAME, DROP, CREATE or TRUNCATE): a false yes costs a
// re-read of the layout, a false no a wrong mapping.
func isDDLOn(def, q []byte, db, table string) bool {
	q = stripComments(q)
	ddl := false
	for _, kw := range []string{"ALTER", "RENAME", "DROP", "CREATE", "TRUNCATE"} {
		if hasPrefixFold(q, kw) && (len(q) == len(kw) || !isIdentByte(q[len(kw)])) {
			ddl = true
			break
		}
	}
	if !ddl {
		return false
	}
	defaultIsDB := strings.EqualFold(string(def), db)
	toks := identTokens(q)
	for i, t := range toks {
		if t.dot || !strings.EqualFold(t.name, table) {
			continue
		}
		qualified := i >= 2 && toks[i-1].dot && !toks[i-2].dot
		qualifier := i+1 < len(toks) && toks[i+1].dot
		switch {
		case qualified && strings.EqualFold(toks[i-2].name, db):
			return true
		case !qualified && !qualifier && defaultIsDB:
			return true
		case !qualified && qualifier && i+2 < len(toks) && !toks[i+2].dot && defaultIsDB:
			// table.column: the table, unqualified.
			return true
		}
	}
	return false
}

// token is an identifier or a dot of a statement; a token with neither
// stands for other punctuation or a string literal, which end a qualified
// name.
type token struct {
	name string
	dot  bool
}

// identTokens splits a statement into identifiers (bare, `quoted` or
// "quoted") and the dots between them. String literals and comments are
// skipped, but not the executable comments /*! ... */ and /*M! ... */,
// whose text runs.
func identTokens(q []byte) []token {
	var toks []token
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '.':
			toks = append(toks, token{dot: true})
			i++
		case c == '\'':
			i = sqlscan.QuoteEnd(q, i)
			toks = append(toks, token{})
		case c == '`' || c == '"':
			end := sqlscan.QuoteEnd(q, i)
			inner := q[i+1 : max(i+1, end-1)]
			toks = append(toks, token{name: strings.ReplaceAll(string(inner), string([]byte{c, c}), string(c))})
			i = end
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if i+2 < len(q) && (q[i+2] == '!' || q[i+2] == 'M') {
				i += 2 // executable comment: read its text
				continue
			}
			end := strings.Index(string(q[i+2:]), "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case c == '#' || (c == '-' && i+2 < len(q) && q[i+1] == '-' && (q[i+2] == ' ' || q[i+2] == '\t')):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case isIdentByte(c):
			start := i
			for i < len(q) && isIdentByte(q[i]) {
				i++
			}
			toks = append(toks, token{name: string(q[start:i])})
		default:
			toks = append(toks, token{})
			i++
		}
	}
	return toks
}
