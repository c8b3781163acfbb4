package canal

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// MariaDB's compressed rows events of version 2 (sql/log_event.h). MariaDB
// servers write the V1 types (166-168), which go-mysql decodes; go-mysql
// v1.16.0 has no decoder for these and hands them over as GenericEvent.
const (
	mariadbWriteRowsCompressed  replication.EventType = 169
	mariadbUpdateRowsCompressed replication.EventType = 170
	mariadbDeleteRowsCompressed replication.EventType = 171
)

// eventGuard keeps what the machine needs to judge the events its switch has
// no case for: which table ids name the outbox table, and how wide a table id
// is in this binlog.
type eventGuard struct {
	outboxIDs map[uint64]bool
	fde       *replication.FormatDescriptionEvent
}

// unhandled checks an event the machine's switch has no case for. Most carry
// no rows (format descriptions, table maps, checkpoints, heartbeats, GTID
// lists) and are ignored. A rows event go-mysql could not decode, and an
// event type this relay does not know, may hold INSERTs into the outbox
// table: ignoring them would lose those rows silently, so they stop the
// relay instead, before it appends anything of their transaction.
func (m *machine) unhandled(h *replication.EventHeader, e replication.Event) error {
	switch e := e.(type) {
	case *replication.FormatDescriptionEvent:
		m.guard.fde = e
		return nil
	case *replication.TableMapEvent:
		// A table id is reused for another table after the outbox table
		// leaves the table cache: the latest map of an id counts.
		if m.tables.matches(e) {
			if m.guard.outboxIDs == nil {
				m.guard.outboxIDs = map[uint64]bool{}
			}
			m.guard.outboxIDs[e.TableID] = true
		} else {
			delete(m.guard.outboxIDs, e.TableID)
		}
		return nil
	case *replication.GenericEvent:
		return m.genericEvent(h, e)
	}
	return nil
}

// genericEvent judges an event go-mysql parsed as raw bytes only.
func (m *machine) genericEvent(h *replication.EventHeader, e *replication.GenericEvent) error {
	switch et := h.EventType; {
	case et == mariadbWriteRowsCompressed || et == mariadbUpdateRowsCompressed || et == mariadbDeleteRowsCompressed:
		id, ok := m.rowsTableID(et, e.Data)
		if ok && !m.guard.outboxIDs[id] {
			return nil // another table's rows
		}
		return outbox.WithHint(fmt.Errorf("%w: binlog event %d (a compressed rows event of version 2) for %s at %s:%d: the binlog library cannot decode it, and skipping it would lose outbox rows",
			outbox.ErrConfig, et, m.tables.src, m.file, h.LogPos),
			"turn binlog compression off: SET GLOBAL log_bin_compress=OFF (and log_bin_compress=OFF in my.cnf), then point the relay at the first transaction written after it with `binlog-outbox position set --start-from <file>:<pos>` (SHOW BINLOG EVENTS shows where), and republish the rows written in between with `binlog-outbox run --mode poll`")
	case et == replication.INCIDENT_EVENT:
		// The server says it may have failed to log changes (LOST_EVENTS,
		// e.g. a binlog cache write error): an outbox row may be missing
		// from the binlog. A replica stops here too; so does the relay.
		return outbox.WithHint(fmt.Errorf("%w: the binlog has an incident event at %s:%d: the server may have failed to write transactions to the binlog, outbox rows among them",
			outbox.ErrConfig, m.file, h.LogPos),
			"read the server's error log for the incident; to go on, point the relay past it with `binlog-outbox position set --start-from <file>:<pos>` (the next event), then compare the table with the streams with `binlog-outbox verify` and republish what is missing with --mode poll")
	case knownEventType(et) || h.Flags&replication.LOG_EVENT_IGNORABLE_F != 0:
		// A type without rows (old LOAD DATA statements, group
		// replication's view changes, XA PREPARE), or one the server itself
		// marks as safe to ignore for replicas that do not know it.
		return nil
	default:
		return outbox.WithHint(fmt.Errorf("%w: unknown binlog event type %d at %s:%d: it may carry rows of %s, which the relay cannot read",
			outbox.ErrConfig, et, m.file, h.LogPos, m.tables.src),
			"the server writes an event type this version of binlog-outbox does not know; upgrade binlog-outbox, or relay with --mode poll")
	}
}

// rowsTableID reads the table id at the start of a rows event's post-header:
// 4 bytes when the format description gives that event a 6-byte post-header
// (servers before MySQL 5.1.4), 6 otherwise.
func (m *machine) rowsTableID(et replication.EventType, data []byte) (uint64, bool) {
	size := 6
	if f := m.guard.fde; f != nil && int(et) >= 1 && int(et) <= len(f.EventTypeHeaderLengths) && f.EventTypeHeaderLengths[et-1] == 6 {
		size = 4
	}
	if len(data) < size {
		return 0, false
	}
	var b [8]byte
	copy(b[:], data[:size])
	return binary.LittleEndian.Uint64(b[:]), true
}

// knownEventType reports the event types of MySQL (up to 8.4's tagged GTID
// event) and MariaDB (up to its compressed rows events) whose layout and
// meaning are known: each either has a case in the machine or carries no
// rows.
func knownEventType(et replication.EventType) bool {
	return et <= replication.GTID_TAGGED_LOG_EVENT ||
		(et >= replication.MARIADB_ANNOTATE_ROWS_EVENT && et <= mariadbDeleteRowsCompressed)
}

// unknownRows stops at a rows event of the outbox table that go-mysql
// decoded but cannot say is an INSERT, UPDATE or DELETE (a type added to its
// parser before its RowsEvent.Type): treated as "not an INSERT", its rows
// would be skipped. MySQL's partial JSON updates are such a type, and are
// updates.
func (m *machine) unknownRows(h *replication.EventHeader, e *replication.RowsEvent) error {
	if e.Type() != replication.EnumRowsEventTypeUnknown || h.EventType == replication.PARTIAL_UPDATE_ROWS_EVENT || e.Table == nil ||
		!m.tables.src.matches(string(e.Table.Schema), string(e.Table.Table)) {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: rows event of type %s for %s.%s at %s:%d is neither an INSERT, an UPDATE nor a DELETE to the binlog library; skipping it could lose outbox rows",
		outbox.ErrConfig, h.EventType, e.Table.Schema, e.Table.Table, m.file, h.LogPos),
		"this version of binlog-outbox cannot read the rows events the server writes; upgrade binlog-outbox, or relay with --mode poll")
}

// anonymousInGTIDMode stops at an anonymous transaction (MySQL gtid_mode
// OFF_PERMISSIVE or ON_PERMISSIVE) when the relay resumes by GTID set. The
// syncer would add it to the set as 00000000-0000-0000-0000-000000000000:0,
// which names no transaction, and a GTID resume cannot locate anonymous
// transactions: the server skips them or sends them again, depending on the
// file they are in. File positions locate them, so the hint names the file
// position of this transaction's start, which is where the stored position
// stands once the reader appended what came before.
func (m *machine) anonymousInGTIDMode(h *replication.EventHeader) error {
	if h.EventType != replication.ANONYMOUS_GTID_EVENT || m.boundary.GTIDSet.IsZero() {
		return nil
	}
	// The transaction starts where its first event does; the reader
	// appends what came before it, so nothing before that point is lost.
	at := fmt.Sprintf("%s:%d", m.file, h.LogPos-min(h.LogPos, h.EventSize))
	return outbox.WithHint(fmt.Errorf("%w: anonymous transaction (no GTID) at %s while the relay resumes by GTID set: a GTID position cannot locate it, so it could be skipped or relayed twice",
		outbox.ErrConfig, at), "%s", anonymousHint(at))
}

// anonymousHint is the fix for anonymous transactions met by a relay that
// resumes by GTID set; from names the file position to go on from.
func anonymousHint(from string) string {
	return "the server runs with gtid_mode OFF_PERMISSIVE or ON_PERMISSIVE, and writes transactions without a GTID; relay with file positions from there: " +
		"`binlog-outbox position set --start-from " + from + "` (the transactions before it were appended); " +
		"to go back to GTID positions later, set ENFORCE_GTID_CONSISTENCY=ON and gtid_mode=ON first, then pass the last anonymous transaction with file positions"
}

// anonymousRefusal recognises MySQL's refusal to send an anonymous
// transaction (error 1236, which says why in its message only): on a GTID
// dump (ER_CANT_REPLICATE_ANONYMOUS_WITH_AUTO_POSITION), and on a file
// position dump once gtid_mode is ON (ER_CANT_REPLICATE_ANONYMOUS_WITH_GTID_MODE_ON).
// Nothing is purged then: the purged-binlog advice would have the operator
// re-read everything or accept a gap that does not exist.
func anonymousRefusal(msg string) (hint string, ok bool) {
	switch {
	case !containsFold(msg, "anonymous transaction"):
		return "", false
	case containsFold(msg, "GTID_MODE"):
		return "gtid_mode was set to ON while the binlog still holds transactions without a GTID, and the server refuses to send them; " +
			"SET GLOBAL gtid_mode=ON_PERMISSIVE until the relay has read past the file and position the server names, then set it back to ON", true
	default:
		return anonymousHint("<file>:<pos> with the file and position the server names (or those of `binlog-outbox position show`, if later)"), true
	}
}
