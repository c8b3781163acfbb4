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
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// errLayoutRestart asks the reader to prove the column layout and read
// again from the transaction that has the first row of table without names.
type errLayoutRestart struct {
	start position.Point
	table schema.Name
}

func (e *errLayoutRestart) Error() string {
	return fmt.Sprintf("rows of %s without column names at %s:%d; proving the table's column layout", e.table, e.start.File, e.start.Pos)
}

// ddlEvent is a DDL statement on a followed table in the binlog.
type ddlEvent struct {
	// db and table name the table as the statement does.
	db, table  string
	file       string
	start, end uint32 // the event's first byte and the position after it
	gset       position.GTIDSet
	query      string
	when       uint32
}

// layoutProof is the outcome of proving the layouts at a session start:
// per table either its columns, in force from the start on, or the DDL
// ahead before which no layout can be proven.
type layoutProof struct {
	columns map[string][]binlogrow.Column // by tableKey
	ddl     []*ddlEvent                   // the first DDL ahead on each table it names
}

// ddlFor returns the DDL ahead on database.table (any letter case), or nil.
func (p *layoutProof) ddlFor(database, table string) *ddlEvent {
	for _, d := range p.ddl {
		if strings.EqualFold(d.db, database) && strings.EqualFold(d.table, table) {
			return d
		}
	}
	return nil
}

// forget drops the proof for database.table (any letter case): the stream
// passed a DDL on it.
func (p *layoutProof) forget(database, table string) {
	for k := range p.columns {
		db, t, _ := strings.Cut(k, "\x00")
		if strings.EqualFold(db, database) && strings.EqualFold(t, table) {
			delete(p.columns, k)
		}
	}
	p.ddl = slices.DeleteFunc(p.ddl, func(d *ddlEvent) bool {
		return strings.EqualFold(d.db, database) && strings.EqualFold(d.table, table)
	})
}

// proveLayout proves the column layouts of the followed tables for the rows
// from start on; see the comment at the top of this file. want is the table
// whose rows without names asked for it. carried are the layouts the
// session before had proven (Reader.carried): in force at start, they stay
// whatever DDL lies ahead, up to the stream's next DDL on their table.
// Without them a table created, or a reconnect, while the relay lags behind
// another table's ALTER would stop the relay at rows whose layout it knows.
func (r *Reader) proveLayout(ctx context.Context, start position.Point, want schema.Name, carried map[string][]binlogrow.Column) (layoutProof, error) {
	cols, err := r.tableColumns(ctx)
	if err != nil {
		return layoutProof{}, err
	}
	if want.Table != "" && len(cols[tableKey(want.Database, want.Table, r.sources.lctn)]) == 0 {
		// No layout to prove, and no reason the next session would find
		// one: say so rather than restart for ever.
		return layoutProof{}, outbox.WithHint(fmt.Errorf("%w: the binlog has rows of %s.%s without column names, and information_schema shows the relay no columns of that table",
			outbox.ErrConfig, want.Database, want.Table),
			"grant the relay's user SELECT on the table (information_schema hides tables a user cannot read), or set binlog_row_metadata=FULL so that rows carry their column names")
	}
	// The end of the binlog only now, after the layout: see the proof.
	file, pos, err := r.currentPosition(ctx)
	if err != nil {
		return layoutProof{}, err
	}
	proof := layoutProof{columns: cols}
	if start.GTIDSet.IsZero() && start.File == file && start.Pos >= pos {
		return proof, nil
	}
	began := time.Now()
	ddls, err := r.scanForDDL(ctx, start, file, pos)
	if err != nil {
		return layoutProof{}, err
	}
	for _, d := range ddls {
		if _, ok := carried[tableKey(d.db, d.table, r.sources.lctn)]; ok {
			continue
		}
		r.log.Warn("DDL on the outbox table ahead: rows without column names before it cannot be mapped",
			"table", d.db+"."+d.table, "ddl_at", fmt.Sprintf("%s:%d", d.file, d.start), "query", logging.Truncate(d.query, 300))
		proof.forget(d.db, d.table)
	}
	for k, c := range carried {
		proof.columns[k] = c
	}
	proof.ddl = ddls
	attrs := []any{"from", start.String(), "checked_to", fmt.Sprintf("%s:%d", file, pos), "took", time.Since(began).Round(time.Millisecond)}
	if len(r.sources.list) == 1 && r.sources.list[0].Pattern.Exact() {
		for _, c := range proof.columns {
			attrs = append(attrs, "columns", columnNames(c, ","))
		}
	} else {
		attrs = append(attrs, "tables", len(proof.columns))
	}
	if len(proof.columns) > 0 {
		r.log.Info("column layout proven for rows without column names", attrs...)
	}
	return proof, nil
}

func columnNames(cols []binlogrow.Column, sep string) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, sep)
}

// tableColumns reads the columns of every followed table, by tableKey, in
// ordinal order, as rows carry them, with their signedness and character
// sets: part of the layout, since rows without names carry neither on
// MariaDB. One query per
// --table value, whatever the number of tables it matches.
func (r *Reader) tableColumns(ctx context.Context) (map[string][]binlogrow.Column, error) {
	out := map[string][]binlogrow.Column{}
	for _, src := range r.sources.list {
		p := src.Pattern
		where, args := "TABLE_SCHEMA = ? AND TABLE_NAME = ?", []any{p.Database, p.Table}
		if !p.Exact() {
			where, args = "TABLE_SCHEMA LIKE ? AND TABLE_NAME LIKE ?", []any{schema.Like(p.Database), schema.Like(p.Table)}
		}
		if err := r.readColumns(ctx, where, args, p.String(), out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *Reader) readColumns(ctx context.Context, where string, args []any, what string, out map[string][]binlogrow.Column) error {
	rows, err := r.db.QueryContext(ctx, `SELECT /* binlog-outbox */ TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE LIKE '%unsigned%',
		COALESCE(CHARACTER_SET_NAME, '')
		FROM information_schema.COLUMNS WHERE `+where+`
		ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION`, args...)
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var db, table string
		var c binlogrow.Column
		if err := rows.Scan(&db, &table, &c.Name, &c.DataType, &c.Unsigned, &c.Charset); err != nil {
			return fmt.Errorf("read the columns of %s: %w", what, err)
		}
		// LIKE compares by information_schema's collation: keep the
		// tables the server takes for followed ones.
		if !r.sources.matches(db, table) {
			continue
		}
		c.DataType = strings.ToLower(c.DataType)
		key := tableKey(db, table, r.sources.lctn)
		out[key] = append(out[key], c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the columns of %s: %w", what, err)
	}
	return nil
}

// scanForDDL reads the binlog from start to file:pos and returns, for each
// followed table a DDL names, the first such DDL. It decodes no rows: a
// catch-up reads its range twice, the second time at the speed of the
// network.
func (r *Reader) scanForDDL(ctx context.Context, start position.Point, endFile string, endPos uint32) ([]*ddlEvent, error) {
	cfg := r.syncerConfig(nil, nil)
	cfg.RowsEventDecodeFunc = func(*replication.RowsEvent, []byte) error { return nil }
	// Nor table maps' optional metadata, which would otherwise wait for
	// rows decoding that never comes (binlogrow.DecodeConfig).
	cfg.TableMapOptionalMetaDecodeFunc = func([]byte) error { return nil }
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
	var found []*ddlEvent
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
				return found, nil
			}
			continue
		case *replication.HeartbeatEvent:
			if e.Filename != "" {
				file = e.Filename
			}
		case *replication.QueryEvent:
			for _, t := range ddlTargets(e.Schema, e.Query, r.sources.matchesFold) {
				if slices.ContainsFunc(found, func(d *ddlEvent) bool { return strings.EqualFold(d.db, t[0]) && strings.EqualFold(d.table, t[1]) }) {
					continue
				}
				d := &ddlEvent{db: t[0], table: t[1], file: file, start: h.LogPos, end: h.LogPos, gset: position.GTIDSetOf(e.GSet), query: string(stripComments(e.Query)), when: h.Timestamp}
				if h.LogPos >= h.EventSize {
					d.start = h.LogPos - h.EventSize
				}
				found = append(found, d)
			}
		}
		if h.LogPos > 0 && position.FileAtOrPast(file, h.LogPos, endFile, endPos) {
			return found, nil
		}
	}
}
