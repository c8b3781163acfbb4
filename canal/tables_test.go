package canal

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// tableColumns is the default outbox table's layout as the reader reads it
// at start-up.
func tableColumns() (cols []binlogrow.Column) {
	for _, c := range binlogtest.Columns {
		cols = append(cols, binlogrow.Column{Name: c.Name, DataType: c.DataType})
	}
	return cols
}

// tenantTableMap is the table map of tenant db's outbox table.
func tenantTableMap(db string, withNames bool) *replication.TableMapEvent {
	tm := binlogtest.OutboxTableMap(withNames)
	tm.Schema = []byte(db)
	return tm
}

// tenantHarness is a machine following tenant_*.outbox and app.legacy, with
// the layout of tenant_01.outbox and app.legacy proven, as a session
// starting while tenant_02 does not exist yet.
func tenantHarness(t *testing.T) *harness {
	t.Helper()
	src := newSourceSet([]Source{
		{Pattern: schema.Pattern{Database: "tenant_*", Table: "outbox"}},
		{Pattern: schema.Pattern{Database: "app", Table: "legacy"}},
	}, 0, nil)
	proof := layoutProof{columns: map[string][]binlogrow.Column{
		tableKey("tenant_01", "outbox", 0): tableColumns(),
		tableKey("app", "legacy", 0):       tableColumns(),
	}}
	return newHarness(t, func(m *machine) { m.tables = newTableSet(src, proof, nil) })
}

// Rows of every matching table become events that name their table, in
// commit order, under one position; the rows of other tables are skipped.
func TestMachine_SeveralTables(t *testing.T) {
	h := tenantHarness(t)
	t1, legacy := tenantTableMap("tenant_01", false), binlogtest.TableMap("app", "legacy", nil, binlogtest.OutboxTableMap(false).ColumnType)
	named := tenantTableMap("tenant_02", true)
	ignored := tenantTableMap("other", true)
	notTenant := tenantTableMap("tenant01", true)
	err := h.feed(
		ev(100, mariaGTID(10)), ev(150, t1), ev(200, insert(t, t1, binlogtest.OutboxRow(1, "{}"))),
		ev(210, legacy), ev(250, insert(t, legacy, binlogtest.OutboxRow(2, "{}"))), ev(280, xid(nil)),
		// A tenant created after the start: its rows carry names.
		ev(300, mariaDDLGTID(11)), ev(350, query("CREATE DATABASE tenant_02")),
		ev(400, mariaDDLGTID(12)), ev(450, query("CREATE TABLE tenant_02.outbox (id INT)")),
		ev(500, mariaGTID(13)), ev(520, named), ev(550, insert(t, named, binlogtest.OutboxRow(3, "{}"))),
		ev(560, ignored), ev(570, insert(t, ignored, binlogtest.OutboxRow(4, "{}"))),
		ev(580, notTenant), ev(590, insert(t, notTenant, binlogtest.OutboxRow(5, "{}"))), ev(600, xid(nil)),
	)
	if err != nil {
		t.Fatal(err)
	}
	got := h.m.pending.events
	want := []struct {
		id        uint64
		db, table string
	}{{1, "tenant_01", "outbox"}, {2, "app", "legacy"}, {3, "tenant_02", "outbox"}}
	if len(got) != len(want) {
		t.Fatalf("got events %v, want ids 1, 2, 3", ids(got))
	}
	for i, w := range want {
		if got[i].OutboxID != w.id || got[i].Database != w.db || got[i].Table != w.table {
			t.Errorf("event %d = id %d from %s.%s, want id %d from %s.%s", i, got[i].OutboxID, got[i].Database, got[i].Table, w.id, w.db, w.table)
		}
	}
	if h.m.pending.at.Pos != 600 {
		t.Errorf("position %d, want 600 (one position covers every table)", h.m.pending.at.Pos)
	}
}

// A table created after the session's proof has no layout for rows without
// names: the session ends before its transaction, asking for a proof of
// that very table; the other tables keep theirs.
func TestMachine_NewTableWithoutNamesAsksForItsLayout(t *testing.T) {
	h := tenantHarness(t)
	t1, t2 := tenantTableMap("tenant_01", false), tenantTableMap("tenant_02", false)
	err := h.feed(
		ev(100, mariaGTID(10)), ev(150, t1), ev(200, insert(t, t1, binlogtest.OutboxRow(1, "{}"))), ev(280, xid(nil)),
		ev(400, mariaDDLGTID(12)), ev(450, query("CREATE TABLE tenant_02.outbox (id INT)")),
		ev(500, mariaGTID(13)), ev(520, t2), ev(550, insert(t, t2, binlogtest.OutboxRow(3, "{}"))),
	)
	var restart *errLayoutRestart
	if !errors.As(err, &restart) {
		t.Fatalf("got %v, want a layout restart", err)
	}
	if restart.table.String() != "tenant_02.outbox" || restart.start.Pos != 450 {
		t.Errorf("restart for %s at %d, want tenant_02.outbox at 450 (after the CREATE TABLE)", restart.table, restart.start.Pos)
	}
	if ids := ids(h.m.pending.events); len(ids) != 1 || ids[0] != 1 {
		t.Errorf("pending events %v, want tenant_01's row 1", ids)
	}
}

// A DDL on one tenant's table forgets that table's layout only.
func TestMachine_DDLOnOneTableForgetsItsLayoutOnly(t *testing.T) {
	h := tenantHarness(t)
	t1, legacy := tenantTableMap("tenant_01", false), binlogtest.TableMap("app", "legacy", nil, binlogtest.OutboxTableMap(false).ColumnType)
	err := h.feed(
		ev(100, mariaDDLGTID(10)), ev(150, query("ALTER TABLE app.legacy ADD x INT")),
		ev(200, mariaGTID(11)), ev(250, t1), ev(300, insert(t, t1, binlogtest.OutboxRow(1, "{}"))), ev(350, xid(nil)),
		ev(400, mariaGTID(12)), ev(450, legacy), ev(500, insert(t, legacy, binlogtest.OutboxRow(2, "{}"))),
	)
	var restart *errLayoutRestart
	if !errors.As(err, &restart) || restart.table.String() != "app.legacy" {
		t.Fatalf("got %v, want a layout restart for app.legacy", err)
	}
	if ids := ids(h.m.pending.events); len(ids) != 1 || ids[0] != 1 {
		t.Errorf("pending events %v, want tenant_01's row 1", ids)
	}
}

func TestDDLTargets_Patterns(t *testing.T) {
	src := newSourceSet([]Source{{Pattern: schema.Pattern{Database: "tenant_*", Table: "outbox"}}}, 0, nil)
	tests := []struct {
		def, q string
		want   [][2]string
	}{
		{"app", "CREATE TABLE tenant_21.outbox (id INT)", [][2]string{{"tenant_21", "outbox"}}},
		{"tenant_21", "CREATE TABLE `outbox` (id INT)", [][2]string{{"tenant_21", "outbox"}}},
		{"app", "RENAME TABLE tenant_1.outbox TO tenant_2.outbox", [][2]string{{"tenant_1", "outbox"}, {"tenant_2", "outbox"}}},
		{"app", "CREATE DATABASE tenant_21", nil},
		{"tenant_21", "CREATE TABLE orders (id INT)", nil},
		{"app", "ALTER TABLE outbox ADD x INT", nil},
	}
	for _, tt := range tests {
		got := ddlTargets([]byte(tt.def), []byte(tt.q), src.matchesFold)
		if len(got) != len(tt.want) {
			t.Errorf("ddlTargets(%q, %q) = %v, want %v", tt.def, tt.q, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ddlTargets(%q, %q) = %v, want %v", tt.def, tt.q, got, tt.want)
			}
		}
	}
}

// The layout proof's DDL ahead bounds the table it names only.
func TestLayoutProof_DDLForAndForget(t *testing.T) {
	p := layoutProof{
		columns: map[string][]binlogrow.Column{tableKey("t1", "outbox", 0): tableColumns(), tableKey("t2", "outbox", 0): tableColumns()},
		ddl:     []*ddlEvent{{db: "T1", table: "OUTBOX", query: "ALTER TABLE T1.OUTBOX ADD x INT"}},
	}
	if p.ddlFor("t1", "outbox") == nil || p.ddlFor("t2", "outbox") != nil {
		t.Errorf("ddlFor: want the DDL for t1.outbox (in any letter case) and none for t2.outbox")
	}
	p.forget("t1", "outbox")
	if p.ddlFor("t1", "outbox") != nil || p.columns[tableKey("t1", "outbox", 0)] != nil || p.columns[tableKey("t2", "outbox", 0)] == nil {
		t.Errorf("forget(t1.outbox) left %+v, want t1's proof gone and t2's kept", p)
	}
}

// Rows without column names in several tables: each table's layout is proven
// on its own, a tenant created while the reader runs is followed from its
// first row (its layout proven from its CREATE TABLE on), and an ALTER that
// swaps two columns of one tenant's table changes the mapping of that table
// only.
func TestReader_SeveralTablesWithoutColumnNames(t *testing.T) {
	srv := namelessServer(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, 2)
	r, _ := newReaderSink(t, env, redisstream.Config{Stream: "outbox:{database}:{aggregate_type}"}, func(c *Config) {
		c.Sources = []Source{{Pattern: schema.Pattern{Database: prefix + "_tenant_*", Table: "outbox"}}}
	}, testLogger(t))
	stop := startReader(r)
	waitStarted(t, r)
	produce := func(tn *relaytest.Tenant) {
		relaytest.Produce(ctx, t, tn.DB, "outbox", relaytest.ProduceOptions{Producers: 2, Transactions: 5}, tn.Rec)
	}
	for _, tn := range tenants {
		produce(tn)
	}
	late := relaytest.NewTenant(t, srv, relaytest.TenantName(prefix, 3))
	produce(late)
	srv.Exec(t, "ALTER TABLE `"+tenants[0].Database+"`.outbox "+swapColumns)
	all := append(tenants, late)
	for _, tn := range all {
		produce(tn)
	}
	for _, tn := range all {
		relaytest.WaitFor(t, 30*time.Second, tn.Database+"'s events", func() bool {
			return relaytest.CountEntries(ctx, env.RDB, "outbox:"+tn.Database+":") >= tn.Committed()
		})
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range all {
		relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + tn.Database + ":"})
	}
}

// A reconnect while the reader lags behind an ALTER of one table: the next
// session keeps the layout the last one proved for it, which is in force up
// to the ALTER, instead of stopping at the rows before the ALTER as a reader
// starting afresh must.
func TestReader_SeveralTablesKeepLayoutsAcrossReconnect(t *testing.T) {
	srv := namelessServer(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	proxy := testsvc.StartProxy(t, srv.Addr())
	env.MySQLAddr = proxy.Addr()
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, 2)
	r, _ := newReaderSink(t, env, redisstream.Config{Stream: "outbox:{database}:{aggregate_type}"}, func(c *Config) {
		c.Sources = []Source{{Pattern: schema.Pattern{Database: prefix + "_tenant_*", Table: "outbox"}}}
	}, testLogger(t))
	stop := startReader(r)
	waitStarted(t, r)
	produce := func(tn *relaytest.Tenant) {
		relaytest.Produce(ctx, t, tn.DB, "outbox", relaytest.ProduceOptions{Producers: 2, Transactions: 5}, tn.Rec)
	}
	wait := func() {
		for _, tn := range tenants {
			relaytest.WaitFor(t, 30*time.Second, tn.Database+"'s events", func() bool {
				return relaytest.CountEntries(ctx, env.RDB, "outbox:"+tn.Database+":") >= tn.Committed()
			})
		}
	}
	for _, tn := range tenants {
		produce(tn)
	}
	wait()
	sessions := r.Stats().Sessions
	proxy.Stall()
	produce(tenants[0])
	srv.Exec(t, "ALTER TABLE `"+tenants[0].Database+"`.outbox "+swapColumns)
	produce(tenants[0])
	proxy.Cut()
	proxy.Resume()
	wait()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().Sessions; got < sessions+2 {
		t.Errorf("%d sessions after the cut, want a reconnect and a proof after the ALTER (%d before)", got, sessions)
	}
	for _, tn := range tenants {
		relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + tn.Database + ":"})
	}
}

// The tables of a pattern the caller inspected, each with a mapping of its
// own that says the same, keep one mapping and one absent list between
// them: a thousand tenants' copies were most of the relay's live heap.
// Different mappings stay apart, and the source no longer holds the tables.
func TestSourceSet_TablesShareEqualMappings(t *testing.T) {
	var tables []Table
	for _, db := range []string{"tenant_01", "tenant_02", "tenant_03"} {
		tables = append(tables, Table{Name: schema.Name{Database: db, Table: "outbox"}, Mapping: schema.DefaultMapping(), Absent: []string{schema.ColHeaders}})
	}
	renamed := schema.DefaultMapping()
	renamed[schema.ColPayload] = "body"
	tables = append(tables, Table{Name: schema.Name{Database: "tenant_04", Table: "outbox"}, Mapping: renamed})
	list := []Source{{Pattern: schema.Pattern{Database: "tenant_*", Table: "outbox"}, Tables: tables}}
	s := newSourceSet(list, 0, nil)
	if len(s.known) != 4 || s.list[0].Tables != nil {
		t.Fatalf("known %d tables, the source still lists %d; want 4 and none", len(s.known), len(s.list[0].Tables))
	}
	first := s.known[tableKey("tenant_01", "outbox", 0)]
	for _, db := range []string{"tenant_02", "tenant_03"} {
		tb := s.known[tableKey(db, "outbox", 0)]
		if reflect.ValueOf(tb.Mapping).UnsafePointer() != reflect.ValueOf(first.Mapping).UnsafePointer() || &tb.Absent[0] != &first.Absent[0] {
			t.Errorf("%s keeps a mapping or absent list of its own", db)
		}
	}
	if p, _ := s.known[tableKey("tenant_04", "outbox", 0)].Mapping.Physical(schema.ColPayload); p != "body" {
		t.Errorf("tenant_04's payload maps to %q, want body", p)
	}
	if p, _ := first.Mapping.Physical(schema.ColPayload); p != schema.ColPayload {
		t.Errorf("tenant_01's payload maps to %q, want %s", p, schema.ColPayload)
	}
	// The names are parts of the key, and a session following a table
	// keys it by the same string: no strings of their own per table.
	ts := newTableSet(s, layoutProof{}, nil)
	for key, tb := range s.known {
		if got := tb.Name.Database + "\x00" + tb.Name.Table; got != key || unsafe.StringData(tb.Name.Database) != unsafe.StringData(tb.key) {
			t.Errorf("%q: names %q apart from the key", key, got)
		}
		f := ts.lookup(&replication.TableMapEvent{TableID: 1, Schema: []byte(tb.Name.Database), Table: []byte(tb.Name.Table)})
		for k, g := range ts.byKey {
			if g == f && unsafe.StringData(k) != unsafe.StringData(tb.key) {
				t.Errorf("%q: the session keys it by a string of its own", key)
			}
		}
	}
}

// The tenants of a pattern share a decoder, whose layout cache must not
// carry one tenant's character sets over to another whose table map has
// the same names and types: latin1 and utf8mb4 tenants, in turn, each
// decoded with its own.
func TestTableSet_SharedDecoderKeepsEachTablesCharsets(t *testing.T) {
	src := newSourceSet([]Source{{Pattern: schema.Pattern{Database: "tenant_*", Table: "outbox"}}}, 0, nil)
	ts := newTableSet(src, layoutProof{}, map[uint64]string{8: "latin1", 45: "utf8mb4"})
	tenant := func(db string, collation uint64) *replication.TableMapEvent {
		tm := tenantTableMap(db, true)
		tm.ColumnMeta = make([]uint16, len(tm.ColumnType))
		tm.DefaultCharset = []uint64{collation}
		return tm
	}
	latin, utf8 := tenant("tenant_01", 8), tenant("tenant_02", 45)
	fl, fu := ts.lookup(latin), ts.lookup(utf8)
	if fl == nil || fu == nil || fl.dec != fu.dec {
		t.Fatalf("tenants followed %v, %v: want both, with one decoder", fl != nil, fu != nil)
	}
	row := []any{int64(1), "m-1", "order", "Z\xfcrich", "created", []byte("caf\xe9"), nil, "2024-05-06 07:08:09"}
	for i, c := range []struct {
		tm          *replication.TableMapEvent
		f           *followed
		aggregateID string
	}{{latin, fl, "Zürich"}, {utf8, fu, "Z\xfcrich"}, {tenant("tenant_01", 8), fl, "Zürich"}, {tenant("tenant_02", 45), fu, "Z\xfcrich"}} {
		l, err := c.f.dec.Layout(c.tm)
		if err != nil {
			t.Fatal(err)
		}
		if e := l.Event(row); e.AggregateID != c.aggregateID {
			t.Errorf("table map %d (%s): aggregate_id %q, want %q", i, c.tm.Schema, e.AggregateID, c.aggregateID)
		}
	}
}
