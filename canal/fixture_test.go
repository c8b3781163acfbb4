package canal

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// The fixture tests replay binlog files recorded by real MySQL servers
// (binlogtest.FixtureDir) through the reader's own decoding
// (binlogrow.DecodeConfig) and machine.

// fixtureTable says which table of a fixture plays the outbox, and how its
// columns map. The fixtures' tables were not made for an outbox, so one
// physical column may stand for several logical ones.
type fixtureTable struct {
	database, table string
	mapping         map[string]string  // logical -> physical; unmapped optional columns are absent
	columns         []binlogrow.Column // for files without column names only
}

func (ft fixtureTable) schemaMapping() schema.Mapping {
	m := schema.Mapping{}
	for _, l := range schema.LogicalColumns {
		m[l] = ft.mapping[l]
	}
	return m
}

// gtidStandIn does for a replayed file what the syncer does in GTID mode
// (BinlogSyncer.handleEventAndACK) and a bare parser cannot: it adds each
// transaction's GTID to the set it started from and attaches the set to the
// XID and query events, those inside compressed payloads included. It starts
// from the file's PREVIOUS_GTIDS set, as a relay that had read everything
// before the file would.
type gtidStandIn struct{ set *mysql.MysqlGTIDSet }

func (g *gtidStandIn) see(t *testing.T, ev *replication.BinlogEvent) {
	t.Helper()
	switch e := ev.Event.(type) {
	case *replication.PreviousGTIDsEvent:
		s, err := mysql.ParseMysqlGTIDSet(e.GTIDSets)
		if err != nil {
			t.Fatalf("PREVIOUS_GTIDS %q: %v", e.GTIDSets, err)
		}
		g.set = s.(*mysql.MysqlGTIDSet)
	case *replication.GTIDEvent:
		g.add(t, e)
	case *replication.GtidTaggedLogEvent:
		g.add(t, &e.GTIDEvent)
	case *replication.XIDEvent:
		e.GSet = g.current()
	case *replication.QueryEvent:
		e.GSet = g.current()
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			g.see(t, inner)
		}
	}
}

func (g *gtidStandIn) add(t *testing.T, e *replication.GTIDEvent) {
	t.Helper()
	u, err := uuid.FromBytes(e.SID)
	if err != nil {
		t.Fatal(err)
	}
	g.set.AddGTIDWithTag(u, e.Tag, e.GNO)
}

func (g *gtidStandIn) current() mysql.GTIDSet {
	if g.set == nil {
		return nil
	}
	return g.set.Clone()
}

// replayed is what a replay produced: the batches the reader would have
// handed to the flusher, one per move of the boundary, and what the parser
// yielded, counted independently of the machine.
type replayed struct {
	batches []batch
	// types counts the events by type, those inside payloads included.
	types map[replication.EventType]int
	// inserts counts the rows of INSERTs into the fixture table: each must
	// come out of the machine as exactly one event.
	inserts int
}

func (r *replayed) events() []outbox.Event {
	var all []outbox.Event
	for _, b := range r.batches {
		all = append(all, b.events...)
	}
	return all
}

// replay parses a fixture with the reader's parser configuration and feeds
// every event to a machine set up as Reader.session sets it up, handing the
// pending batch over after every event that leaves no transaction open (as
// Reader.offer does when the flusher is idle). gtidMode attaches GTID sets as
// the syncer does after StartSyncGTID.
func replay(t *testing.T, file string, ft fixtureTable, gtidMode bool, tweak func(*machine)) (*replayed, error) {
	t.Helper()
	start := position.Point{File: file, Pos: 4}
	h := newHarness(t, func(m *machine) {
		m.tables = oneTable(schema.Name{Database: ft.database, Table: ft.table}, binlogrow.NewDecoder(ft.schemaMapping(), nil, ft.columns, nil, nil))
		m.file, m.boundary = file, start
		if tweak != nil {
			tweak(m)
		}
	})
	h.m.pending.at = h.m.boundary
	res := &replayed{types: map[replication.EventType]int{}}
	var count func(ev *replication.BinlogEvent)
	count = func(ev *replication.BinlogEvent) {
		res.types[ev.Header.EventType]++
		switch e := ev.Event.(type) {
		case *replication.RowsEvent:
			if e.Table != nil && string(e.Table.Schema) == ft.database && string(e.Table.Table) == ft.table &&
				e.Type() == replication.EnumRowsEventTypeInsert {
				res.inserts += len(e.Rows)
			}
		case *replication.TransactionPayloadEvent:
			for _, inner := range e.Events {
				count(inner)
			}
		}
	}
	var gs *gtidStandIn
	if gtidMode {
		gs = &gtidStandIn{}
	}
	ctx := context.Background()
	p := binlogtest.NewParser(binlogrow.DecodeConfig(position.FlavorMySQL, tableMatcher(schema.Name{Database: ft.database, Table: ft.table}.Matches)))
	err := p.ParseFile(filepath.Join(binlogtest.FixtureDir(), file), 0, func(ev *replication.BinlogEvent) error {
		count(ev)
		if gs != nil {
			gs.see(t, ev)
			if _, ok := ev.Event.(*replication.PreviousGTIDsEvent); ok && gs.set != nil {
				// A relay that read everything before the file starts
				// there (StartSyncGTID); the machine follows the set on.
				h.m.gset = position.GTIDSetOf(gs.set.Clone())
			}
		}
		if err := h.m.handle(ctx, ev); err != nil {
			return err
		}
		if gs != nil && gs.set != nil && !h.m.gset.Equal(position.GTIDSetOf(gs.set)) {
			// The set the machine follows must be the one go-mysql would
			// attach, after every event.
			t.Errorf("%s:%d: the machine's GTID set is %s, the syncer's would be %s", file, ev.Header.LogPos, h.m.gset, gs.set)
		}
		if _, ok := ev.Event.(*replication.QueryEvent); ok && ft.columns != nil {
			// The machine forgets the layout at a DDL on the table (the
			// fixtures create their tables). The fixture's columns are
			// the layout after it: what the reader's proof would find.
			h.m.tables.only().dec = binlogrow.NewDecoder(ft.schemaMapping(), nil, ft.columns, nil, nil)
		}
		if !h.m.inTx && h.m.pending.dirty {
			return h.m.flush(ctx)
		}
		return nil
	})
	res.batches = h.flushed
	if h.m.inTx {
		t.Errorf("%s: a transaction is still open at the end of the file", file)
	}
	return res, err
}

// fixtureEvent is the part of an Event a fixture pins.
type fixtureEvent struct {
	ID                                uint64
	MessageID, AggregateID, EventType string
	Payload                           string
	OccurredAt                        int64
	Invalid                           string
	AggregateType, Headers            string
}

func summarize(events []outbox.Event) []fixtureEvent {
	out := []fixtureEvent{}
	for _, e := range events {
		out = append(out, fixtureEvent{
			ID: e.OutboxID, MessageID: e.MessageID, AggregateID: e.AggregateID, EventType: e.EventType,
			Payload: string(e.Payload), OccurredAt: e.OccurredAt.Unix(), Invalid: e.Invalid,
			AggregateType: e.AggregateType, Headers: string(e.Headers),
		})
	}
	return out
}

// boundary is one hand-off: where the reader would resume after it, and
// which events it carries.
type boundary struct {
	file     string
	pos      uint32
	txRows   uint64
	gset     string
	lastGTID string
	ids      []uint64
}

func boundaries(r *replayed) []boundary {
	var out []boundary
	for _, b := range r.batches {
		gset := ""
		if !b.at.GTIDSet.IsZero() {
			gset = b.at.GTIDSet.String()
		}
		ids := []uint64{}
		for _, e := range b.events {
			ids = append(ids, e.OutboxID)
		}
		out = append(out, boundary{file: b.at.File, pos: b.at.Pos, txRows: b.at.TxRows, gset: gset, lastGTID: b.at.LastGTID.String(), ids: ids})
	}
	return out
}

var (
	// binlog-invisible-columns.000001: mysql.t1 (f1 INT UNSIGNED INVISIBLE,
	// f2 INT UNSIGNED INVISIBLE, f3 INT, f4 TEXT, f5 BLOB, f6 BIGINT
	// UNSIGNED INVISIBLE), binlog_row_metadata=FULL.
	invisibleColumns = fixtureTable{database: "mysql", table: "t1", mapping: map[string]string{
		schema.ColID: "f1", schema.ColAggregateID: "f4", schema.ColEventType: "f3", schema.ColPayload: "f5", schema.ColOccurredAt: "f6",
	}}
	// mysql-enum-string-set.000001: mysql.t (f1 CHAR(128), f2 VARCHAR(300),
	// f3 ENUM, f4 SET, f5 BLOB), binlog_row_metadata=FULL.
	enumStringSet = fixtureTable{database: "mysql", table: "t", mapping: map[string]string{
		schema.ColID: "f3", schema.ColAggregateType: "f1", schema.ColAggregateID: "f2", schema.ColEventType: "f4",
		schema.ColPayload: "f5", schema.ColHeaders: "f1", schema.ColOccurredAt: "f4",
	}}
	// json.binlog.000001: mysql.t (id INT, json_col JSON, name VARCHAR(100)
	// AS (json_col->>'$.name'), age INT AS (json_col->'$.age')), no names.
	jsonTable = fixtureTable{database: "mysql", table: "t", mapping: map[string]string{
		schema.ColID: "id", schema.ColAggregateID: "name", schema.ColEventType: "age", schema.ColPayload: "json_col", schema.ColOccurredAt: "age",
	}, columns: []binlogrow.Column{{Name: "id", DataType: "int"}, {Name: "json_col", DataType: "json"}, {Name: "name", DataType: "varchar"}, {Name: "age", DataType: "int"}}}
	// transaction_compression.000001: test.tb1 with one INT column, no names.
	compressedInsert = fixtureTable{database: "test", table: "tb1", mapping: map[string]string{
		schema.ColID: "a", schema.ColAggregateID: "a", schema.ColEventType: "a", schema.ColPayload: "a", schema.ColOccurredAt: "a",
	}, columns: []binlogrow.Column{{Name: "a", DataType: "int"}}}
	// mysql-bin.compressed: demo.movies (id INT, title, year INT, and eight
	// more VARCHAR columns), no names.
	compressedUpdate = fixtureTable{database: "demo", table: "movies", mapping: map[string]string{
		schema.ColID: "id", schema.ColAggregateID: "title", schema.ColEventType: "country", schema.ColPayload: "genres", schema.ColOccurredAt: "year",
	}, columns: []binlogrow.Column{{Name: "id", DataType: "int"}, {Name: "title", DataType: "varchar"}, {Name: "year", DataType: "int"}, {Name: "country", DataType: "varchar"}, {Name: "genres", DataType: "varchar"},
		{Name: "c6", DataType: "varchar"}, {Name: "c7", DataType: "varchar"}, {Name: "c8", DataType: "varchar"}, {Name: "c9", DataType: "varchar"}, {Name: "c10", DataType: "varchar"}, {Name: "c11", DataType: "varchar"}}}
	// binlog_transaction_with_GTID_TAG.000001: test.orders (id INT, a second
	// INT, a DECIMAL), no names.
	taggedOrders = fixtureTable{database: "test", table: "orders", mapping: map[string]string{
		schema.ColID: "id", schema.ColAggregateID: "customer_id", schema.ColEventType: "customer_id", schema.ColPayload: "total", schema.ColOccurredAt: "customer_id",
	}, columns: []binlogrow.Column{{Name: "id", DataType: "int"}, {Name: "customer_id", DataType: "int"}, {Name: "total", DataType: "decimal"}}}
)

const (
	sidInvisible = "97c7af02-4c50-11ec-acd8-681842034964"
	sidEnum      = "93e95066-a2f4-11ec-9b69-9657f0ae95e2"
	sidTagged    = "55778904-0299-11f1-b1b8-4ef0c4956feb"
)

// TestFixture_Boundaries pins, for every fixture, where the reader would
// resume after each transaction (the end of its XID or DDL event, or of the
// compressed payload that holds it), the GTID set and last GTID it would
// store, and which events each transaction yields. The positions are the
// end_log_pos values mysqlbinlog prints for those events.
func TestFixture_Boundaries(t *testing.T) {
	const inv = "binlog-invisible-columns.000001"
	// The fixtures' tables have no time column: occurred_at is mapped to a
	// number column, which the reader takes as Unix seconds (as Laravel's
	// jobs.available_at), and a NULL one is a dead letter.
	tests := []struct {
		name, file string
		table      fixtureTable
		gtidMode   bool
		want       []boundary
	}{
		{
			name: "8.0.26 GTIDs and column names, GTID mode", file: inv, table: invisibleColumns, gtidMode: true,
			want: []boundary{
				{file: inv, pos: 491, gset: sidInvisible + ":1", lastGTID: sidInvisible + ":1", ids: []uint64{}},   // ALTER USER
				{file: inv, pos: 787, gset: sidInvisible + ":1-2", lastGTID: sidInvisible + ":2", ids: []uint64{}}, // CREATE TABLE
				{file: inv, pos: 1120, gset: sidInvisible + ":1-3", lastGTID: sidInvisible + ":3", ids: []uint64{1}},
				{file: inv, pos: 1438, gset: sidInvisible + ":1-4", lastGTID: sidInvisible + ":4", ids: []uint64{0}}, // NULL id: dead letter
				{file: inv, pos: 1787, gset: sidInvisible + ":1-5", lastGTID: sidInvisible + ":5", ids: []uint64{}},  // UPDATE
			},
		},
		{
			name: "8.0.26 GTIDs and column names, file mode", file: inv, table: invisibleColumns,
			want: []boundary{
				{file: inv, pos: 491, lastGTID: sidInvisible + ":1", ids: []uint64{}},
				{file: inv, pos: 787, lastGTID: sidInvisible + ":2", ids: []uint64{}},
				{file: inv, pos: 1120, lastGTID: sidInvisible + ":3", ids: []uint64{1}},
				{file: inv, pos: 1438, lastGTID: sidInvisible + ":4", ids: []uint64{0}},
				{file: inv, pos: 1787, lastGTID: sidInvisible + ":5", ids: []uint64{}},
			},
		},
		{
			name: "8.0.28 GTIDs, column names, ENUM and SET", file: "mysql-enum-string-set.000001", table: enumStringSet, gtidMode: true,
			want: []boundary{
				{file: "mysql-enum-string-set.000001", pos: 493, gset: sidEnum + ":1", lastGTID: sidEnum + ":1", ids: []uint64{}},
				{file: "mysql-enum-string-set.000001", pos: 791, gset: sidEnum + ":1-2", lastGTID: sidEnum + ":2", ids: []uint64{}},
				{file: "mysql-enum-string-set.000001", pos: 1560, gset: sidEnum + ":1-3", lastGTID: sidEnum + ":3", ids: []uint64{1}},
				{file: "mysql-enum-string-set.000001", pos: 2659, gset: sidEnum + ":1-4", lastGTID: sidEnum + ":4", ids: []uint64{}}, // UPDATE
				{file: "mysql-enum-string-set.000001", pos: 3331, gset: sidEnum + ":1-5", lastGTID: sidEnum + ":5", ids: []uint64{}}, // DELETE
			},
		},
		{
			name: "8.0.22 JSON, anonymous GTIDs", file: "json.binlog.000001", table: jsonTable,
			want: []boundary{
				{file: "json.binlog.000001", pos: 491, ids: []uint64{}},
				{file: "json.binlog.000001", pos: 845, ids: []uint64{}},
				{file: "json.binlog.000001", pos: 1195, ids: []uint64{1}},
				{file: "json.binlog.000001", pos: 1545, ids: []uint64{2}},
				{file: "json.binlog.000001", pos: 1897, ids: []uint64{3}},
				{file: "json.binlog.000001", pos: 2389, ids: []uint64{4, 5, 6}},
				{file: "json.binlog.000001", pos: 3527, ids: []uint64{}}, // UPDATE
				{file: "json.binlog.000001", pos: 4011, ids: []uint64{}}, // PARTIAL_UPDATE_ROWS_EVENT
			},
		},
		{
			name: "8.0.32 INSERT in a compressed payload", file: "transaction_compression.000001", table: compressedInsert,
			want: []boundary{
				{file: "transaction_compression.000001", pos: 431, ids: []uint64{1}}, // end of the TRANSACTION_PAYLOAD_EVENT
				{file: "binlog.000043", pos: 4, ids: []uint64{}},                     // the rotate that ends the file
			},
		},
		{
			name: "8.0.28 UPDATE in a compressed payload", file: "mysql-bin.compressed", table: compressedUpdate,
			want: []boundary{
				{file: "mysql-bin.compressed", pos: 724, ids: []uint64{}},
				{file: "mysql-bin.000005", pos: 4, ids: []uint64{}},
			},
		},
		{
			name: "9.6 tagged GTID", file: "binlog_transaction_with_GTID_TAG.000001", table: taggedOrders, gtidMode: true,
			want: []boundary{
				{file: "binlog_transaction_with_GTID_TAG.000001", pos: 541, gset: sidTagged + ":1-13:mytag:1-3", lastGTID: sidTagged + ":mytag:3", ids: []uint64{3}},
				{file: "binlog.000005", pos: 4, gset: sidTagged + ":1-13:mytag:1-3", lastGTID: sidTagged + ":mytag:3", ids: []uint64{}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := replay(t, tt.file, tt.table, tt.gtidMode, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := boundaries(res); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("boundaries:\n got %+v\nwant %+v", got, tt.want)
			}
			if got := len(res.events()); got != res.inserts {
				t.Errorf("%d events from %d inserted rows: rows were dropped or invented", got, res.inserts)
			}
		})
	}
}

// TestFixture_RowValues pins the values the decoder makes of the rows MySQL
// wrote: columns found by the names in the table map (binlog_row_metadata=
// FULL) or by position, JSON rendered as text, NULLs, integers of every
// width, and occurred_at falling back to the commit time.
func TestFixture_RowValues(t *testing.T) {
	joe := `{"age":24,"data":"xxxxxxxxxx","name":"Joe"}`
	sue := `{"age":32,"data":"yyyyyyyyyy","name":"Sue"}`
	pete := `{"age":40,"data":"zzzzzzzzzz","name":"Pete"}`
	digits := strings.Repeat("0123456789", 10)
	// 298 characters: the value the fixture's producer typed into VARCHAR(300).
	varchar := strings.Repeat(strings.Repeat("0123456789", 12)+"012345678", 2) + strings.Repeat("0123456789", 4)
	// The fixtures' tables have no time column: occurred_at is mapped to a
	// number column, which the reader takes as Unix seconds (as Laravel's
	// jobs.available_at), and a NULL one is a dead letter.
	tests := []struct {
		name, file string
		table      fixtureTable
		want       []fixtureEvent
	}{
		{
			name: "by name, 8.0.26", file: "binlog-invisible-columns.000001", table: invisibleColumns,
			want: []fixtureEvent{
				{ID: 1, MessageID: "1", AggregateID: "4", EventType: "-3", Payload: "\x05", OccurredAt: 6000000000},
				{MessageID: "0", AggregateID: "44", EventType: "-33", Payload: "U", OccurredAt: -62135596800, Invalid: "id <nil> is not an unsigned integer; occurred_at is NULL or a zero date; the relay does not invent a time"},
			},
		},
		{
			name: "by name, 8.0.28 ENUM and SET", file: "mysql-enum-string-set.000001", table: enumStringSet,
			want: []fixtureEvent{{
				ID: 1, MessageID: "1", AggregateType: digits, AggregateID: varchar, EventType: "5",
				Payload: "0123456789", Headers: digits, OccurredAt: 5,
			}},
		},
		{
			name: "by position, JSON as text", file: "json.binlog.000001", table: jsonTable,
			want: []fixtureEvent{
				{ID: 1, MessageID: "1", AggregateID: "Joe", EventType: "24", Payload: joe, OccurredAt: 24},
				{ID: 2, MessageID: "2", AggregateID: "Sue", EventType: "32", Payload: sue, OccurredAt: 32},
				{ID: 3, MessageID: "3", AggregateID: "Pete", EventType: "40", Payload: pete, OccurredAt: 40},
				{ID: 4, MessageID: "4", AggregateID: "Joe", EventType: "24", Payload: joe, OccurredAt: 24},
				{ID: 5, MessageID: "5", AggregateID: "Sue", EventType: "32", Payload: sue, OccurredAt: 32},
				{ID: 6, MessageID: "6", AggregateID: "Pete", EventType: "40", Payload: pete, OccurredAt: 40},
			},
		},
		{
			name: "inside a compressed payload", file: "transaction_compression.000001", table: compressedInsert,
			want: []fixtureEvent{{ID: 1, MessageID: "1", AggregateID: "1", EventType: "1", Payload: "1", OccurredAt: 1}},
		},
		{
			name: "DECIMAL as exact text, tagged GTID", file: "binlog_transaction_with_GTID_TAG.000001", table: taggedOrders,
			want: []fixtureEvent{{ID: 3, MessageID: "3", AggregateID: "100", EventType: "100", Payload: "250.00", OccurredAt: 100}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := replay(t, tt.file, tt.table, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := summarize(res.events()); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestFixture_CompressedChunks replays the compressed transaction with a
// buffer too small for it. Its one row is kept whole (a re-read would only
// hold it again); read in chunks, as a stored position from a chunked
// transaction asks, the payload's rows come in chunks and the rows the
// position says were appended are skipped.
func TestFixture_CompressedChunks(t *testing.T) {
	const file = "transaction_compression.000001"
	res, err := replay(t, file, compressedInsert, false, func(m *machine) { m.maxTxBytes = 1 })
	if err != nil {
		t.Fatalf("a one-row transaction larger than maxTxBytes: got %v, want it relayed whole", err)
	}
	if got := ids(res.events()); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("ids: got %v, want [1]", got)
	}

	for _, tc := range []struct {
		skip uint64
		want []boundary
	}{
		{skip: 0, want: []boundary{
			{file: file, pos: 4, txRows: 1, ids: []uint64{1}},
			{file: file, pos: 431, ids: []uint64{}},
			{file: "binlog.000043", pos: 4, ids: []uint64{}},
		}},
		{skip: 1, want: []boundary{ // the chunk was appended before a crash
			{file: file, pos: 431, ids: []uint64{}},
			{file: "binlog.000043", pos: 4, ids: []uint64{}},
		}},
	} {
		t.Run(fmt.Sprintf("skip %d", tc.skip), func(t *testing.T) {
			res, err := replay(t, file, compressedInsert, false, func(m *machine) {
				// One event per batch: the chunk is handed over at its row,
				// before the payload's XID, with the count it covers.
				m.maxTxBytes, m.maxBatchEvents, m.chunked, m.skip = 1, 1, true, tc.skip
				m.boundary.TxRows = tc.skip
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := boundaries(res); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("boundaries:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestFixture_GTIDPositions runs the MySQL GTID sets found in the fixtures
// through what stores and resumes them: the position the reader encodes,
// position.Decode, the stored-start check of server.go, and --start-from.
func TestFixture_GTIDPositions(t *testing.T) {
	tests := []struct {
		name, file        string
		table             fixtureTable
		wantSet, wantLast string
		wantFile          string
		wantPos           uint32
	}{
		{name: "8.0.26", file: "binlog-invisible-columns.000001", table: invisibleColumns,
			wantSet: sidInvisible + ":1-5", wantLast: sidInvisible + ":5", wantFile: "binlog-invisible-columns.000001", wantPos: 1787},
		{name: "8.0.28", file: "mysql-enum-string-set.000001", table: enumStringSet,
			wantSet: sidEnum + ":1-5", wantLast: sidEnum + ":5", wantFile: "mysql-enum-string-set.000001", wantPos: 3331},
		{name: "tagged", file: "binlog_transaction_with_GTID_TAG.000001", table: taggedOrders,
			wantSet: sidTagged + ":1-13:mytag:1-3", wantLast: sidTagged + ":mytag:3", wantFile: "binlog.000005", wantPos: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := replay(t, tt.file, tt.table, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			last := res.batches[len(res.batches)-1].at
			r := &Reader{cfg: Config{Flavor: position.FlavorMySQL, PositionKey: "fixture"}, writer: "fixture"}
			raw := r.encode(last)
			b, err := position.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			if b.GTIDSet != tt.wantSet || b.LastGTID != tt.wantLast || b.File != tt.wantFile || b.Pos != tt.wantPos || !b.GTIDMode() {
				t.Errorf("stored position = %+v, want gtid_set %s last_gtid %s at %s:%d", b, tt.wantSet, tt.wantLast, tt.wantFile, tt.wantPos)
			}
			// The server's checks of the point (CheckResume) need a MySQL
			// server; the point itself is the binlog's.
			_, resumed, err := r.storedPoint(raw)
			if err != nil {
				t.Fatal(err)
			}
			if resumed.GTIDSet.IsZero() || !resumed.GTIDSet.Equal(last.GTIDSet) {
				t.Errorf("resumed gtid set = %v, want %s", resumed.GTIDSet, last.GTIDSet)
			}
			from, err := position.Start{Kind: position.StartGTID, GTIDSet: tt.wantSet}.GTIDSetOn(position.FlavorMySQL)
			if err != nil {
				t.Fatal(err)
			}
			if from.String() != tt.wantSet {
				t.Errorf("--start-from %s resolves to %s", tt.wantSet, from)
			}
		})
	}
}

// fixtureEventTypes says what the machine does with every event type the
// fixtures contain. A type missing here fails TestFixture_EventTypes: decide
// whether it can carry outbox rows before adding it.
var fixtureEventTypes = map[replication.EventType]string{
	replication.FORMAT_DESCRIPTION_EVENT:  "ignored: describes the file",
	replication.PREVIOUS_GTIDS_EVENT:      "ignored: the set before the file; the relay's own set comes from XID events",
	replication.STOP_EVENT:                "ignored: the server stopped",
	replication.ROTATE_EVENT:              "moves the boundary to the next file",
	replication.GTID_EVENT:                "starts a transaction",
	replication.ANONYMOUS_GTID_EVENT:      "starts a transaction without a GTID",
	replication.GTID_TAGGED_LOG_EVENT:     "starts a transaction",
	replication.QUERY_EVENT:               "BEGIN, COMMIT, DDL, statements",
	replication.XID_EVENT:                 "commits",
	replication.TABLE_MAP_EVENT:           "ignored itself; the rows events carry it",
	replication.WRITE_ROWS_EVENTv2:        "INSERT rows: events",
	replication.UPDATE_ROWS_EVENTv2:       "UPDATE rows: not events",
	replication.DELETE_ROWS_EVENTv2:       "DELETE rows: not events",
	replication.PARTIAL_UPDATE_ROWS_EVENT: "UPDATE rows with JSON diffs: not events",
	replication.TRANSACTION_PAYLOAD_EVENT: "a compressed transaction: its events are handled one by one",
}

// TestFixture_EventTypes checks that every event type in the fixtures is one
// the machine handles or can ignore without losing rows, and that the MySQL 8
// types the reader must get right do occur in them.
func TestFixture_EventTypes(t *testing.T) {
	seen := map[replication.EventType]bool{}
	for _, c := range []struct {
		file  string
		table fixtureTable
	}{
		{"binlog-invisible-columns.000001", invisibleColumns},
		{"mysql-enum-string-set.000001", enumStringSet},
		{"json.binlog.000001", jsonTable},
		{"transaction_compression.000001", compressedInsert},
		{"mysql-bin.compressed", compressedUpdate},
		{"binlog_transaction_with_GTID_TAG.000001", taggedOrders},
	} {
		res, err := replay(t, c.file, c.table, false, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for et := range res.types {
			seen[et] = true
			if _, ok := fixtureEventTypes[et]; !ok {
				t.Errorf("%s: event type %s is not classified: can it carry outbox rows?", c.file, et)
			}
		}
	}
	for _, et := range []replication.EventType{
		replication.GTID_EVENT, replication.ANONYMOUS_GTID_EVENT, replication.GTID_TAGGED_LOG_EVENT,
		replication.PREVIOUS_GTIDS_EVENT, replication.TRANSACTION_PAYLOAD_EVENT, replication.PARTIAL_UPDATE_ROWS_EVENT,
	} {
		if !seen[et] {
			t.Errorf("no fixture contains %s any more", et)
		}
	}
}

// TestReader_SyncerDecodesAsFixtures guards the premise of the fixture tests:
// the live syncer decodes with exactly the configuration they replay with.
func TestReader_SyncerDecodesAsFixtures(t *testing.T) {
	for _, flavor := range []string{position.FlavorMySQL, position.FlavorMariaDB} {
		r := &Reader{cfg: Config{Flavor: flavor, Database: "app", Table: "outbox", ServerID: 1001}, log: testLogger(t)}
		r.sources = newSourceSet([]Source{{Pattern: schema.Pattern{Database: "app", Table: "outbox"}}}, 0, nil)
		got, want := r.syncerConfig(nil, nil), binlogrow.DecodeConfig(flavor, tableMatcher(schema.Name{Database: "app", Table: "outbox"}.Matches))
		type decoding struct {
			Flavor                                         string
			RawMode, ParseTime, UseDecimal, TrailingZero   bool
			JSONText, VerifyChecksum, FillZero, DiscardSet bool
			Location                                       string
			PayloadConcurrency                             int
			RowsFilter, OptionalMeta                       bool
		}
		of := func(c replication.BinlogSyncerConfig) decoding {
			return decoding{
				c.Flavor, c.RawModeEnabled, c.ParseTime, c.UseDecimal, c.UseFloatWithTrailingZero,
				c.RenderJSONAsMySQLText, c.VerifyChecksum, c.FillZeroLogPos, c.DiscardGTIDSet,
				c.TimestampStringLocation.String(), c.PayloadDecoderConcurrency,
				c.RowsEventDecodeFunc != nil, c.TableMapOptionalMetaDecodeFunc != nil,
			}
		}
		if of(got) != of(want) {
			t.Errorf("%s: syncer decodes with %+v, the fixtures with %+v", flavor, of(got), of(want))
		}
	}
}
