package canal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// batch is what the reader hands to the flusher: the events of complete
// transactions (or a chunk of one huge transaction) in commit order, and the
// position that covers exactly them.
type batch struct {
	events []outbox.Event
	bytes  int
	at     position.Point
	// dirty: the position moved since the last hand-off.
	dirty bool
}

func (b *batch) reset() {
	clear(b.events) // drop references so the payloads can be collected
	b.events = b.events[:0]
	b.bytes = 0
	b.dirty = false
}

// gtidOf refers to the GTID of a MySQL GTID event. An anonymous one
// (gtid_mode OFF) has none: its zero uuid and number are no GTID an operator
// could look up or start from.
func gtidOf(h *replication.EventHeader, e *replication.GTIDEvent) position.GTID {
	if h.EventType == replication.ANONYMOUS_GTID_EVENT {
		return position.GTID{}
	}
	return position.MySQLGTID(e.SID, e.Tag, e.GNO)
}

// errChunkRestart asks the reader to read a transaction again from its start,
// appending it in chunks: it was too large to buffer, and it is only known to
// have committed once its XID was seen.
type errChunkRestart struct{ start position.Point }

func (e *errChunkRestart) Error() string {
	return fmt.Sprintf("transaction at %s:%d too large to buffer; reading it again in chunks", e.start.File, e.start.Pos)
}

// flushFunc hands the pending batch to the flusher and waits until it was
// taken, for the chunks of a huge transaction.
type flushFunc func(ctx context.Context) error

// machine follows transaction boundaries in the binlog event stream and turns
// the committed outbox INSERTs into batches. It runs on the reader's
// goroutine only.
type machine struct {
	// tables are the followed tables, each with its decoder.
	tables         *tableSet
	log            *slog.Logger
	maxTxBytes     int
	maxBatchEvents int
	maxBatchBytes  int

	file     string
	boundary position.Point // after the last complete transaction: where to resume
	// cuts are the points at which a batch must end (sessionCuts).
	cuts     []position.Point
	lastGTID position.GTID
	// gset is the GTID set after the GTID event read last: the machine
	// follows it itself (the syncer discards its own, DiscardGTIDSet),
	// growing it with each GTID without copying it (GTIDSet.With).
	gset position.GTIDSet

	inTx       bool
	sawBegin   bool
	savepoints []savepoint // in the order they were set
	// xa is the xid of the XA transaction in progress (XA START seen), and
	// xaEnded says XA END followed.
	xa       string
	xaEnded  bool
	txStart  position.Point
	rows     []outbox.Event
	txBytes  int
	overflow bool
	// group is the event queue's group of the event being handled;
	// walkRest (nil: none) tells the parser that the rest of that group's
	// rows are not kept (eventQueue.walkRest).
	group    uint64
	walkRest func(group uint64)

	// Chunked delivery of the first transaction of a session: skip the rows
	// appended before, hand out the rest in batches as they come.
	chunked bool
	skip    uint64
	done    uint64

	pending *batch
	flush   flushFunc
	// prepare is the sink's Prepare (nil: none), applied to each event as
	// it is decoded: the entry format's envelope counts for the byte
	// bounds, and its dead letters are counted as such.
	prepare func(*outbox.Event)

	// Counters for metrics and tests.
	statementDML uint64
	rowsWalked   uint64
	// updates reports UPDATEs of the followed tables (nil: ignored).
	updates *updateWarner

	guard eventGuard // for the events the switch has no case for
}

// decode appends a row of table f's event to dst, prepared for the sink's
// entry format, and returns its Size. The event is prepared where it lies in
// dst: a pointer to a local passed to prepare would put every row's Event on
// the heap once more.
func (m *machine) decode(dst *[]outbox.Event, f *followed, l binlogrow.Layout, row []any) int {
	if len(*dst) == cap(*dst) && len(*dst) >= 256 {
		// Doubled: append grows an array of this size by a quarter or so,
		// which for the rows of a transaction up to --max-tx-bytes copied
		// each row about five times into fresh memory (most of the
		// machine's CPU in the first read of one 100,000-row transaction,
		// a perf profile of binlog-outbox-bench --workloads onetx;
		// BenchmarkMachine_LargeTransaction).
		*dst = slices.Grow(*dst, len(*dst))
	}
	*dst = append(*dst, l.Event(row))
	ev := &(*dst)[len(*dst)-1]
	ev.Database, ev.Table = f.name.Database, f.name.Table
	if m.prepare != nil {
		m.prepare(ev)
	}
	return ev.Size()
}

// savepoint is a savepoint of the transaction: its name as given, and how
// many rows were buffered when it was set.
type savepoint struct {
	name string
	rows int
}

// beginTx starts a transaction at the current boundary.
func (m *machine) beginTx() error {
	if m.inTx && (len(m.rows) > 0 || m.overflow) {
		if m.xa != "" {
			// An XA transaction that ended in a way the machine does not
			// know: its rows may have committed. Dropping them would move
			// the position past them.
			return m.xaError(fmt.Sprintf("XA transaction %s with %d outbox rows ended without a commit, prepare or rollback the relay recognises", m.xa, len(m.rows)))
		}
		// A transaction without its end: the stream was cut and resumed.
		// Its rows come again whole.
		m.log.Warn("discarding a partial transaction", "rows", len(m.rows))
	}
	m.resetTx()
	m.inTx = true
	m.txStart = m.boundary
	return nil
}

func (m *machine) resetTx() {
	m.dropRows()
	m.txBytes = 0
	m.overflow = false
	m.inTx = false
	m.sawBegin = false
	m.savepoints = m.savepoints[:0]
	m.xa, m.xaEnded = "", false
}

// keptRows is the most rows whose array dropRows keeps for the next
// transaction.
const keptRows = 1024

// dropRows empties the current transaction's rows. The array of a large
// transaction is let go: kept, it would stay allocated for the life of the
// process (240 bytes a row: 2 MiB for the 8,759 rows of 300 bytes that fill
// --max-tx-bytes), live heap the memory limit then grows for.
func (m *machine) dropRows() {
	if cap(m.rows) > keptRows {
		m.rows = nil
		return
	}
	clear(m.rows)
	m.rows = m.rows[:0]
}

// handle processes one binlog event.
func (m *machine) handle(ctx context.Context, ev *replication.BinlogEvent) error {
	h := ev.Header
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		m.file = string(e.NextLogName)
		// The rotate a dump starts with names the start itself: no move,
		// and moving would drop the boundary's count of rows already
		// appended of a chunked transaction. A dump from a GTID set starts
		// with a rotate the server makes up (timestamp 0) that names the
		// file it reads first at offset 4, not where the set ends in it:
		// taken as the boundary, an idle relay would store an offset
		// behind the one it had, and look megabytes behind until the next
		// transaction (TestRun_IdleRestartKeepsThePosition).
		fake := h.Timestamp == 0 && !m.boundary.GTIDSet.IsZero()
		if !fake && !m.inTx && (m.file != m.boundary.File || uint32(e.Position) != m.boundary.Pos) {
			p := position.Point{File: m.file, Pos: uint32(e.Position), GTIDSet: m.boundary.GTIDSet, LastGTID: m.boundary.LastGTID}
			if m.chunked {
				// Still before the chunked transaction (GTID mode learns
				// the file name only now): keep its count.
				p.TxRows = m.boundary.TxRows
			}
			m.setBoundary(p)
		}
	case *replication.MariadbGTIDEvent:
		if err := m.beginTx(); err != nil {
			return err
		}
		m.sawBegin = !e.IsStandalone()
		m.lastGTID = position.MariaDBGTID(e.GTID)
		return m.addGTID()
	case *replication.GTIDEvent:
		if err := m.anonymousInGTIDMode(h); err != nil {
			return err
		}
		if err := m.beginTx(); err != nil {
			return err
		}
		m.lastGTID = gtidOf(h, e)
		return m.addGTID()
	case *replication.GtidTaggedLogEvent:
		if err := m.beginTx(); err != nil {
			return err
		}
		m.lastGTID = gtidOf(h, &e.GTIDEvent)
		return m.addGTID()
	case *replication.QueryEvent:
		return m.query(ctx, h, e)
	case *replication.XIDEvent:
		return m.commit(ctx, h)
	case *replication.RowsEvent:
		return m.rowsEvent(ctx, h, e)
	case *replication.TransactionPayloadEvent:
		// MySQL binlog_transaction_compression: the whole transaction is
		// inside; skipping it would silently lose its rows.
		for _, inner := range e.Events {
			if err := m.handle(ctx, inner); err != nil {
				return err
			}
		}
	default:
		if err := m.unhandled(h, ev.Event); err != nil {
			return err
		}
		if h.EventType != replication.XA_PREPARE_LOG_EVENT {
			return nil
		}
		m.xaPrepared(h)
	}
	return nil
}

// xaPrepared ends a two-phase XA transaction at its XA PREPARE. Its rows
// come before XA PREPARE; XA COMMIT arrives later as a query without them.
// Relaying at PREPARE could publish a transaction that is rolled back;
// relaying at COMMIT is impossible. Say so loudly rather than guess.
func (m *machine) xaPrepared(h *replication.EventHeader) {
	m.log.Error("two-phase XA transaction in the binlog: outbox rows written in XA transactions that are prepared (XA PREPARE) are not relayed",
		"file", m.file, "pos", h.LogPos, "xid", m.xa, "rows", len(m.rows),
		"hint", "write outbox rows in ordinary transactions or commit XA transactions with XA COMMIT ... ONE PHASE, or relay them with --mode poll")
	m.resetTx()
}

// xaError stops the relay at an XA statement it cannot place: guessing
// could publish rows that were rolled back, or skip rows that committed.
func (m *machine) xaError(what string) error {
	return outbox.WithHint(fmt.Errorf("%w: %s (binlog %s)", outbox.ErrConfig, what, m.file),
		"write outbox rows in ordinary transactions, or in XA transactions committed with XA COMMIT ... ONE PHASE; or relay this table with --mode poll (docs/switching-modes.md)")
}

func (m *machine) query(ctx context.Context, h *replication.EventHeader, e *replication.QueryEvent) error {
	q := stripComments(e.Query)
	if hasPrefixFold(q, "XA") {
		if handled, err := m.xaQuery(ctx, h, e, q); handled {
			return err
		}
	}
	// Savepoint statements first: ROLLBACK /* c */ TO sp must not read as
	// a ROLLBACK of the whole transaction.
	switch op, name := parseSavepoint(q); op {
	case setSavepoint:
		// A name set again moves: the server deletes the old savepoint.
		m.dropSavepoint(name)
		m.savepoints = append(m.savepoints, savepoint{name: name, rows: len(m.rows)})
		return nil
	case releaseSavepoint:
		// The server releases the savepoint and every one set after it.
		if i := m.findSavepoint(name); i >= 0 {
			m.savepoints = m.savepoints[:i]
		}
		return nil
	case rollbackToSavepoint:
		return m.rollbackTo(h, name)
	}
	switch {
	case hasPrefixFold(q, "BEGIN"), hasPrefixFold(q, "START TRANSACTION"):
		// A BEGIN inside an open transaction means the stream was resumed
		// mid-transaction on a server without GTID events: start afresh.
		if err := m.beginTx(); err != nil {
			return err
		}
		m.sawBegin = true
		return nil
	case hasPrefixFold(q, "COMMIT"):
		return m.commit(ctx, h)
	case hasPrefixFold(q, "ROLLBACK"):
		// Rows of a rolled-back transaction reach the binlog only when it
		// also touched a non-transactional table. They never happened.
		m.resetTx()
		m.setBoundary(position.Point{File: m.file, Pos: h.LogPos, GTIDSet: m.gset, LastGTID: m.lastGTID})
		return nil
	}
	m.inspectStatement(h, e, q)
	if !m.inTx || !m.sawBegin {
		// A statement that is its own transaction (DDL): a boundary.
		m.resetTx()
		m.setBoundary(position.Point{File: m.file, Pos: h.LogPos, GTIDSet: m.gset, LastGTID: m.lastGTID})
	}
	return nil
}

// xaQuery follows the XA statements of the binlog. MySQL logs a one-phase
// XA transaction as XA START xid, its rows, XA END xid and XA COMMIT xid ONE
// PHASE (no XA PREPARE, no XID event); a two-phase one as XA START, rows,
// XA END, an XA PREPARE event, and later XA COMMIT xid or XA ROLLBACK xid
// in a group of their own. MariaDB logs a one-phase XA transaction as an
// ordinary one. handled is false for statements that are not XA ones.
func (m *machine) xaQuery(ctx context.Context, h *replication.EventHeader, e *replication.QueryEvent, q []byte) (handled bool, err error) {
	w := words(q, 2)
	if len(w) < 2 || !w[0].is("XA") {
		return false, nil
	}
	verb := strings.ToUpper(w[1].text)
	xid, onePhase := xidOf(q)
	switch verb {
	case "START", "BEGIN":
		if err := m.beginTx(); err != nil {
			return true, err
		}
		m.sawBegin = true
		m.xa = xid
		return true, nil
	case "END":
		if m.xa == "" || xid != m.xa {
			return true, m.unknownXA(h, q)
		}
		m.xaEnded = true
		return true, nil
	case "PREPARE":
		if m.xa == "" || xid != m.xa {
			return true, m.unknownXA(h, q)
		}
		m.xaPrepared(h)
		return true, nil
	case "COMMIT":
		if onePhase {
			if m.xa == "" || !m.xaEnded || xid != m.xa {
				return true, m.unknownXA(h, q)
			}
			return true, m.commit(ctx, h)
		}
		// The second phase of a transaction prepared before: its rows
		// were reported at XA PREPARE. It is a group of its own.
		if len(m.rows) > 0 || m.overflow || m.xa != "" {
			return true, m.unknownXA(h, q)
		}
		m.resetTx()
		m.setBoundary(position.Point{File: m.file, Pos: h.LogPos, GTIDSet: m.gset, LastGTID: m.lastGTID})
		return true, nil
	case "ROLLBACK":
		m.resetTx()
		m.setBoundary(position.Point{File: m.file, Pos: h.LogPos, GTIDSet: m.gset, LastGTID: m.lastGTID})
		return true, nil
	}
	return true, m.unknownXA(h, q)
}

// unknownXA reports an XA statement where the machine did not expect it.
// Without outbox rows at stake it is logged at error level and read past;
// with rows it stops the relay, since they may have committed.
func (m *machine) unknownXA(h *replication.EventHeader, q []byte) error {
	if len(m.rows) == 0 && !m.overflow {
		m.log.Error("XA statement the relay does not recognise at this place; no outbox rows are affected",
			"file", m.file, "pos", h.LogPos, "query", logging.Truncate(string(q), 300), "xid", m.xa)
		return nil
	}
	return m.xaError(fmt.Sprintf("XA statement %q at %d, in a transaction with %d outbox rows (XA START %s), has a shape the relay does not recognise",
		logging.Truncate(string(q), 200), h.LogPos, len(m.rows), orNone(m.xa)))
}

func orNone(s string) string {
	if s == "" {
		return "not seen"
	}
	return s
}

// xidOf returns the xid of an XA statement as written after the verb,
// white space and letter case of keywords aside, and whether the
// statement ends with ONE PHASE.
func xidOf(q []byte) (xid string, onePhase bool) {
	w := words(q, 64)
	if len(w) < 2 {
		return "", false
	}
	w = w[2:]
	if n := len(w); n >= 2 && w[n-2].is("ONE") && w[n-1].is("PHASE") {
		w, onePhase = w[:n-2], true
	}
	var b strings.Builder
	for _, x := range w {
		b.WriteString(x.text)
	}
	return b.String(), onePhase
}

// rollbackTo undoes the rows after a savepoint. The binlog carries ROLLBACK
// TO only when a non-transactional table changed after the savepoint; the
// transaction goes on and may commit, so this is no boundary.
func (m *machine) rollbackTo(h *replication.EventHeader, name string) error {
	if m.overflow || m.chunked {
		// Chunks already appended cannot be taken back.
		return outbox.WithHint(fmt.Errorf("%w: a transaction larger than --max-tx-bytes rolls back to savepoint %s after changing a non-transactional table; its chunks cannot be taken back", outbox.ErrConfig, name),
			"raise --max-tx-bytes above the size of that transaction, or keep non-transactional tables out of transactions that write the outbox")
	}
	i := m.findSavepoint(name)
	if i < 0 {
		// Keeping the rows could publish rows that were rolled back;
		// dropping them could lose committed ones. Neither is safe.
		return outbox.WithHint(fmt.Errorf("%w: ROLLBACK TO savepoint %q at %s:%d names no savepoint the relay saw in the transaction (it has %d outbox rows)",
			outbox.ErrConfig, name, m.file, h.LogPos, len(m.rows)),
			"the relay could not read the transaction's SAVEPOINT statements; report it with the statements of that transaction (mysqlbinlog --start-position %d %s); meanwhile keep non-transactional tables out of transactions that write the outbox (the binlog carries ROLLBACK TO only then), or relay this table with --mode poll",
			m.txStart.Pos, m.file)
	}
	n := m.savepoints[i].rows
	// The savepoint stays; the ones set after it are gone, as on the server.
	m.savepoints = m.savepoints[:i+1]
	clear(m.rows[n:])
	m.rows = m.rows[:n]
	m.txBytes = 0
	for i := range m.rows {
		m.txBytes += m.rows[i].Size()
	}
	return nil
}

// findSavepoint returns the index of the savepoint name, or -1.
func (m *machine) findSavepoint(name string) int {
	for i := len(m.savepoints) - 1; i >= 0; i-- {
		if sameSavepoint(m.savepoints[i].name, name) {
			return i
		}
	}
	return -1
}

// dropSavepoint forgets the savepoint name, keeping the others.
func (m *machine) dropSavepoint(name string) {
	if i := m.findSavepoint(name); i >= 0 {
		m.savepoints = append(m.savepoints[:i], m.savepoints[i+1:]...)
	}
}

// inspectStatement reports statements that change the outbox table without row
// events: an INSERT logged as a statement (binlog_format=STATEMENT or MIXED in
// the producer's session) produces no row the relay could read. A DDL on the
// table ends the positional layout's validity.
func (m *machine) inspectStatement(h *replication.EventHeader, e *replication.QueryEvent, q []byte) {
	db, table, ok := insertTarget(q)
	if ok {
		if db == "" {
			db = string(e.Schema)
		}
		if !m.tables.src.matches(db, table) {
			return
		}
		m.statementDML++
		m.log.Error("an INSERT into the outbox table was logged as a statement, not as rows: its events cannot be relayed",
			"file", m.file, "pos", h.LogPos, "schema", string(e.Schema), "query", logging.Truncate(string(q), 300),
			logging.KeyHint, "the producer's session used binlog_format=STATEMENT or MIXED; set binlog_format=ROW globally and do not override it per session, "+
				"then stop the relay and run `binlog-outbox repair --apply` with run's flags: it appends the rows no stream holds from the table, once (re-inserting them would repeat their message_id)")
		return
	}
	for _, t := range ddlTargets(e.Schema, q, m.tables.src.matchesFold) {
		// The layout for rows without names is proven up to here at most.
		m.log.Info("DDL on the outbox table; rows without column names after it need its layout proven again",
			"table", t[0]+"."+t[1], "file", m.file, "pos", h.LogPos, "query", logging.Truncate(string(q), 300))
		m.tables.forget(t[0], t[1])
	}
}

func (m *machine) rowsEvent(ctx context.Context, h *replication.EventHeader, e *replication.RowsEvent) error {
	if err := m.unknownRows(h, e); err != nil {
		return err
	}
	// The relay reads the INSERTs of its tables, and reports their UPDATEs
	// when asked to.
	t := e.Type()
	update := t == replication.EnumRowsEventTypeUpdate && m.updates != nil
	if e.Table == nil || (t != replication.EnumRowsEventTypeInsert && !update) {
		return nil
	}
	f := m.tables.lookup(e.Table)
	if f == nil {
		return nil
	}
	if update {
		m.updates.saw(m.log, f.name, m.file, h.LogPos)
		return nil
	}
	if !m.inTx {
		if err := m.beginTx(); err != nil {
			return err
		}
	}
	l, err := f.dec.Layout(e.Table)
	if errors.Is(err, binlogrow.ErrNoLayout) {
		if f.ddlAhead != nil {
			return m.unknownLayoutError(f.ddlAhead, e.Table)
		}
		return &errLayoutRestart{start: m.txStart, table: f.name}
	}
	if err != nil {
		var ce *binlogrow.ColumnError
		if errors.As(err, &ce) {
			return &columnError{ColumnError: ce, at: m.txStart}
		}
		return err
	}
	// Rows walked, not decoded (eventQueue.walkRest), have images and
	// skipped columns but no values: only a transaction the machine gave
	// up keeping has them.
	walked := binlogrow.Walked(e)
	rows := len(e.Rows)
	if walked {
		if !m.overflow {
			return fmt.Errorf("rows of %s.%s at %s:%d were walked, not decoded, outside the transaction too large to keep that they were walked for; reading again from the stored position",
				f.name.Database, f.name.Table, m.file, h.LogPos)
		}
		rows = len(e.SkippedColumns)
		m.rowsWalked += uint64(rows)
	}
	for i := range rows {
		var row []any
		values := int(e.ColumnCount) // a walked image has every column of the event
		if !walked {
			row = e.Rows[i]
			values = len(row)
		}
		if values != l.Columns() {
			return m.rowCountError(f, e, values, l.Columns())
		}
		if i < len(e.SkippedColumns) {
			if name, pos, ok := l.SkippedColumn(e.SkippedColumns[i]); ok {
				return m.rowImageError(f, name, pos)
			}
		}
		if m.chunked {
			if m.done < m.skip {
				m.done++
				continue
			}
			m.pending.bytes += m.decode(&m.pending.events, f, l, row)
			m.done++
			// The batch must be appendable at any moment (the flusher may
			// take it when idle), so its position follows every row.
			m.pending.at = m.txStart
			m.pending.at.TxRows = m.done
			m.pending.dirty = true
			cut, err := m.atCut()
			if err != nil {
				return err
			}
			if cut || len(m.pending.events) >= m.maxBatchEvents || m.pending.bytes >= m.maxBatchBytes {
				if err := m.flush(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if m.overflow {
			continue
		}
		m.txBytes += m.decode(&m.rows, f, l, row)
		// A transaction's first row is kept whatever its size: it is a
		// slice of the event, which is in memory anyway, and reading it
		// again in chunks would hold the same row a second time for
		// nothing (a 16 MiB row went through twice).
		if m.txBytes > m.maxTxBytes && len(m.rows) > 1 {
			// Holding the whole transaction would take unbounded memory.
			// Drop what it has; at its commit it is read again in chunks.
			m.log.Info("transaction too large to buffer; it will be read again and appended in chunks",
				"buffered_rows", len(m.rows), "buffered_bytes", m.txBytes, "file", m.file)
			m.dropRows()
			m.txBytes = 0
			m.overflow = true
			// Its rows are read to find its end only: the parser need not
			// decode the rest of them.
			if m.walkRest != nil {
				m.walkRest(m.group)
			}
		}
	}
	return nil
}

// rowImageError stops the relay at a row whose image lacks a column the
// relay reads. Dead-lettered, such a row became an entry of empty fields
// that no replay could place; the rows are whole in the table, where
// repair reads them, and the position stays before their transaction.
func (m *machine) rowImageError(f *followed, column string, pos int) error {
	return outbox.WithHint(fmt.Errorf("%w: a row of %s.%s in the transaction at %s has no value for %s (column %d) in the binlog: "+
		"the writing session logged binlog_row_image=MINIMAL or NOBLOB, which leaves out columns the INSERT did not set",
		outbox.ErrConfig, f.name.Database, f.name.Table, m.txStart.String(), column, pos),
		"set binlog_row_image=FULL (SET GLOBAL binlog_row_image=FULL, and in my.cnf [mysqld]; sessions opened before keep their setting, so reconnect the producers); "+
			"then, with the relay stopped, run `binlog-outbox repair --apply` with run's flags, which appends the rows the binlog lacks from the table "+
			"and stores a position past them, and start the relay again (docs/incidents.md)")
}

// rowCountError stops the relay at a row whose count of values differs from
// its table map's count of columns (Layout.Columns): which value is which
// column cannot be known, and dead-lettered it became an entry without its
// data past which the position moved. The position stays before its
// transaction; the row is whole in the table, where repair reads it.
func (m *machine) rowCountError(f *followed, e *replication.RowsEvent, values, columns int) error {
	return outbox.WithHint(fmt.Errorf("%w: a row of %s.%s in the transaction at %s has %d values, but its table map has %d columns (the rows event says %d): "+
		"the binlog is corrupt, or its rows event disagrees with its table map, and which value is which column cannot be known",
		outbox.ErrConfig, f.name.Database, f.name.Table, m.txStart.String(), values, columns, e.ColumnCount),
		"look at the transaction (mysqlbinlog -vv --start-position=%d %s, mariadb-binlog on MariaDB); the row is whole in the table: "+
			"with the relay stopped, run `binlog-outbox repair --apply` with run's flags, which appends the rows no stream holds from the table "+
			"and stores a position past them, and start the relay again (docs/incidents.md)", m.txStart.Pos, m.txStart.File)
}

// unknownLayoutError is the stop for rows without names before a DDL whose
// earlier layout the relay cannot know.
func (m *machine) unknownLayoutError(d *ddlEvent, tm *replication.TableMapEvent) error {
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
			"3) republish the outbox rows committed from %s:%d to %s:%d, which the relay skips: "+
			"then, with the relay stopped, `binlog-outbox repair --apply` appends those rows, which no stream holds, once each (docs/incidents.md)",
		resume, m.txStart.File, m.txStart.Pos, d.file, d.end)
}

// commit ends the current transaction at an XID event or COMMIT query.
func (m *machine) commit(_ context.Context, h *replication.EventHeader) error {
	if m.overflow {
		start := m.txStart
		m.resetTx()
		return &errChunkRestart{start: start}
	}
	if m.chunked {
		m.chunked = false
		if m.done < m.skip {
			m.log.Warn("the stored position said more rows of this transaction were appended than it has",
				"appended", m.skip, "rows", m.done, "file", m.file)
		}
	}
	m.pending.events = append(m.pending.events, m.rows...)
	m.pending.bytes += m.txBytes // the sum of Size over m.rows, kept as rows came
	m.resetTx()
	m.setBoundary(position.Point{File: m.file, Pos: h.LogPos, GTIDSet: m.gset, LastGTID: m.lastGTID, CommitTS: h.Timestamp})
	return nil
}

// addGTID adds the GTID of the transaction just begun to the machine's set,
// as go-mysql adds it to the set it attaches to the transaction's end.
func (m *machine) addGTID() error {
	set, err := m.gset.With(m.lastGTID)
	if err != nil {
		return fmt.Errorf("follow the GTID set at %s: %w", m.file, err)
	}
	m.gset = set
	return nil
}

func (m *machine) setBoundary(p position.Point) {
	if p.GTIDSet.IsZero() {
		p.GTIDSet = m.boundary.GTIDSet
	}
	m.boundary = p
	m.pending.at = p
	m.pending.dirty = true
}
