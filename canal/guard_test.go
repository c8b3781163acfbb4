package canal

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// anonymousUUID is what go-mysql's syncer adds to its GTID set for an
// anonymous transaction; it must never reach a stored position.
const anonymousUUID = "00000000-0000-0000-0000-000000000000"

// anonymousGTID is an ANONYMOUS_GTID_EVENT ending at pos, as the parser
// delivers it: a GTIDEvent with a zero uuid and number.
func anonymousGTID(pos uint32) *replication.BinlogEvent {
	e := ev(pos, &replication.GTIDEvent{SID: make([]byte, 16)})
	e.Header.EventType = replication.ANONYMOUS_GTID_EVENT
	e.Header.EventSize = 79
	return e
}

// rawEvent is an event go-mysql hands over undecoded.
func rawEvent(pos uint32, et replication.EventType, flags uint16, data []byte) *replication.BinlogEvent {
	return &replication.BinlogEvent{
		Header: &replication.EventHeader{LogPos: pos, EventSize: 50, EventType: et, Flags: flags, Timestamp: testTimestamp, ServerID: 1},
		Event:  &replication.GenericEvent{Data: data},
	}
}

// rowsPostHeader is the start of a rows event body: a 6-byte table id and
// the flags.
func rowsPostHeader(tableID uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, tableID)[:6]
	return append(b, 1, 0) // STMT_END_F
}

func TestMachine_AnonymousTransactionInGTIDMode(t *testing.T) {
	tm := binlogtest.OutboxTableMap(true)
	set := func(s string) mysql.GTIDSet { return mysqlSet(t, testSID.String()+":"+s) }
	h := newHarness(t, func(m *machine) { m.boundary.GTIDSet = position.GTIDSetOf(set("1-5")) })
	h.m.pending.at = h.m.boundary
	err := h.feed(
		ev(100, mysqlGTID(6)), ev(160, query("BEGIN")), ev(210, tm), ev(400, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(481, xid(set("1-6"))),
		anonymousGTID(560), ev(636, query("BEGIN")), ev(700, tm), ev(800, insert(t, tm, binlogtest.OutboxRow(2, "b"))),
		// What the syncer attaches after adding the anonymous transaction.
		ev(831, xid(mysqlSet(t, testSID.String()+":1-6,"+anonymousUUID+":0"))),
	)
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("error: got %v, want ErrConfig", err)
	}
	if hint := outbox.HintOf(err); !strings.Contains(hint, "--start-from "+testFile+":481") || !strings.Contains(hint, "gtid_mode=ON") {
		t.Errorf("hint %q: want the file position of the anonymous transaction (%s:481) and gtid_mode=ON", hint, testFile)
	}
	// The transaction before it is pending, at a position without the
	// anonymous one; nothing of the anonymous transaction was buffered.
	if got := ids(h.m.pending.events); len(got) != 1 || got[0] != 1 {
		t.Errorf("pending events %v, want [1]", got)
	}
	if at := h.m.pending.at; at.Pos != 481 || at.GTIDSet.String() != testSID.String()+":1-6" || strings.Contains(at.GTIDSet.String(), anonymousUUID) {
		t.Errorf("pending position %s:%d %s, want %s:481 %s:1-6", at.File, at.Pos, at.GTIDSet, testFile, testSID)
	}
	if len(h.m.rows) != 0 {
		t.Errorf("%d rows of the anonymous transaction buffered", len(h.m.rows))
	}
}

func TestMachine_AnonymousTransactionInFileMode(t *testing.T) {
	// With file positions, anonymous transactions are ordinary ones.
	tm := binlogtest.OutboxTableMap(true)
	h := newHarness(t, nil)
	err := h.feed(anonymousGTID(79), ev(160, query("BEGIN")), ev(210, tm), ev(400, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(481, xid(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(h.m.pending.events); len(got) != 1 || h.m.pending.at.Pos != 481 || !h.m.pending.at.GTIDSet.IsZero() {
		t.Errorf("pending %v at %d (gset %v), want [1] at 481 without a set", got, h.m.pending.at.Pos, h.m.pending.at.GTIDSet)
	}
}

// TestFixture_AnonymousTransactionInGTIDMode replays a MySQL 8.0.32 binlog
// whose only transaction is anonymous, as a relay resuming by GTID set from
// the file's PREVIOUS_GTIDS would read it.
func TestFixture_AnonymousTransactionInGTIDMode(t *testing.T) {
	const file = "transaction_compression.000001"
	res, err := replay(t, file, compressedInsert, true, func(m *machine) {
		m.boundary.GTIDSet = position.GTIDSetOf(mysqlSet(t, "357df524-4139-11ee-9979-b033ee13919e:1"))
	})
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("replay error: got %v, want ErrConfig", err)
	}
	if hint := outbox.HintOf(err); !strings.Contains(hint, "--start-from "+file+":197") {
		t.Errorf("hint %q: want --start-from %s:197, where the anonymous transaction starts", hint, file)
	}
	if n := len(res.events()); n != 0 {
		t.Errorf("%d events relayed, want none", n)
	}
	for _, b := range res.batches {
		if !b.at.GTIDSet.IsZero() && strings.Contains(b.at.GTIDSet.String(), anonymousUUID) {
			t.Errorf("a batch's position holds the anonymous transaction: %s", b.at.GTIDSet)
		}
	}
}

func TestMachine_UndecodedRowsEvents(t *testing.T) {
	tm := binlogtest.OutboxTableMap(true)
	tm.TableID = 7
	orders := other()
	orders.TableID = 8
	reused := other() // the outbox table's old id, now another table's
	reused.TableID = 7
	tests := []struct {
		name    string
		events  []*replication.BinlogEvent
		stop    bool
		inHint  string
		pending []uint64
	}{
		{
			name: "compressed rows of version 2 for the outbox table",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, tm), rawEvent(300, mariadbWriteRowsCompressed, 0, rowsPostHeader(7)), ev(331, xid(nil)),
			},
			stop: true, inHint: "log_bin_compress=OFF",
		},
		{
			name: "compressed rows of version 2 for another table",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, orders), rawEvent(200, mariadbUpdateRowsCompressed, 0, rowsPostHeader(8)),
				ev(250, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(331, xid(nil)),
			},
			pending: []uint64{1},
		},
		{
			name: "the outbox table's id reused by another table",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(331, xid(nil)),
				ev(400, mariaGTID(11)), ev(450, reused), rawEvent(500, mariadbDeleteRowsCompressed, 0, rowsPostHeader(7)), ev(531, xid(nil)),
			},
			pending: []uint64{1},
		},
		{
			name: "compressed rows of version 2 without a table id",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), rawEvent(300, mariadbWriteRowsCompressed, 0, []byte{7}),
			},
			stop: true, inHint: "log_bin_compress=OFF",
		},
		{
			name: "unknown event type",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, tm), rawEvent(300, 200, 0, rowsPostHeader(7)),
			},
			stop: true, inHint: "upgrade binlog-outbox",
		},
		{
			name: "unknown event type the server marks ignorable",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, tm), rawEvent(200, 200, replication.LOG_EVENT_IGNORABLE_F, nil),
				ev(300, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(331, xid(nil)),
			},
			pending: []uint64{1},
		},
		{
			name: "known events without rows",
			events: []*replication.BinlogEvent{
				rawEvent(50, replication.MARIADB_START_ENCRYPTION_EVENT, 0, nil), rawEvent(60, replication.IGNORABLE_EVENT, 0, nil),
				ev(100, mariaGTID(10)), ev(150, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "a"))), ev(331, xid(nil)),
			},
			pending: []uint64{1},
		},
		{
			name: "rows event of a type go-mysql cannot name",
			events: []*replication.BinlogEvent{
				ev(100, mariaGTID(10)), ev(150, tm),
				{Header: &replication.EventHeader{LogPos: 300, EventType: 172}, Event: &replication.RowsEvent{Table: tm, Rows: [][]any{binlogtest.OutboxRow(1, "a")}}},
			},
			stop: true, inHint: "upgrade binlog-outbox",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			err := h.feed(tt.events...)
			if !tt.stop {
				if err != nil {
					t.Fatal(err)
				}
				if got := ids(h.m.pending.events); !slices.Equal(got, tt.pending) {
					t.Errorf("pending events %v, want %v", got, tt.pending)
				}
				return
			}
			if !errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("error: got %v, want ErrConfig", err)
			}
			if hint := outbox.HintOf(err); !strings.Contains(hint, tt.inHint) {
				t.Errorf("hint %q, want it to contain %q", hint, tt.inHint)
			}
			if n := len(h.m.pending.events); n != 0 {
				t.Errorf("%d events pending, want none", n)
			}
		})
	}
}

func TestReader_StreamErrorAnonymousTransaction(t *testing.T) {
	r := &Reader{cfg: Config{Flavor: position.FlavorMySQL, ServerID: 1001}, log: testLogger(t)}
	tests := []struct {
		msg    string
		inHint string
	}{
		// rpl_binlog_sender.cc: ER_CANT_REPLICATE_ANONYMOUS_WITH_AUTO_POSITION on a GTID dump.
		{"Cannot replicate anonymous transaction when AUTO_POSITION = 1, at file ./binlog.000002, position 157.", "--start-from <file>:<pos>"},
		// ER_CANT_REPLICATE_ANONYMOUS_WITH_GTID_MODE_ON on a file position dump.
		{"Cannot replicate anonymous transaction when @@GLOBAL.GTID_MODE = ON, at file ./binlog.000002, position 157.", "gtid_mode=ON_PERMISSIVE"},
	}
	for _, tt := range tests {
		err := r.streamError(&mysql.MyError{Code: mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, Message: tt.msg}, false)
		if !errors.Is(err, outbox.ErrConfig) || errors.Is(err, outbox.ErrPositionGone) {
			t.Errorf("%q: got %v, want ErrConfig, not ErrPositionGone", tt.msg, err)
		}
		if hint := outbox.HintOf(err); !strings.Contains(hint, tt.inHint) {
			t.Errorf("%q: hint %q, want it to contain %q", tt.msg, hint, tt.inHint)
		}
	}
	// A purged binlog stays what it was.
	err := r.streamError(&mysql.MyError{Code: mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, Message: "Could not find first log file name in binary log index file"}, false)
	if !errors.Is(err, outbox.ErrPositionGone) {
		t.Errorf("purged binlog: got %v, want ErrPositionGone", err)
	}
	// A GTID set the server lacks is the failover's lost tail: the hint
	// says so and how to go on.
	err = r.streamError(&mysql.MyError{Code: mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, Message: "Error: connecting slave requested to start from GTID 0-1-105, which is not in the master's binlog"}, true)
	if !errors.Is(err, outbox.ErrPositionGone) || !strings.Contains(outbox.HintOf(err), "never shipped") {
		t.Errorf("GTID set not in the binlog: got %v (hint %q), want ErrPositionGone with the failover hint", err, outbox.HintOf(err))
	}
}

// TestMachine_IncidentEventStops: an incident event says the server may have
// lost binlog events; ignoring it would hide a possible loss.
func TestMachine_IncidentEventStops(t *testing.T) {
	h := newHarness(t, nil)
	err := h.feed(rawEvent(120, replication.INCIDENT_EVENT, 0, []byte{1, 0, 0}))
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "incident") || outbox.HintOf(err) == "" {
		t.Fatalf("incident event: got %v, want a configuration error about the incident with a hint", err)
	}
}
