package canal

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

func TestParseSavepoint(t *testing.T) {
	tests := []struct {
		q    string
		op   savepointOp
		name string
	}{
		{"SAVEPOINT sp1", setSavepoint, "sp1"},
		{"savepoint `Sp1`", setSavepoint, "Sp1"},
		{"SAVEPOINT `my sp`", setSavepoint, "my sp"},
		{"SAVEPOINT `a``b`", setSavepoint, "a`b"},
		{`SAVEPOINT "ansi"`, setSavepoint, "ansi"},
		{"SAVEPOINT /* c */ sp1;", setSavepoint, "sp1"},
		{"SAVEPOINT\n-- why\nsp1", setSavepoint, "sp1"},
		{"ROLLBACK TO sp1", rollbackToSavepoint, "sp1"},
		{"ROLLBACK TO `sp1`", rollbackToSavepoint, "sp1"},
		{"rollback to savepoint SP1", rollbackToSavepoint, "SP1"},
		{"ROLLBACK WORK TO SAVEPOINT sp1", rollbackToSavepoint, "sp1"},
		{"ROLLBACK /* a */ WORK # b\n TO /* c */ SAVEPOINT /* d */ `x y`", rollbackToSavepoint, "x y"},
		{"ROLLBACK TO SAVEPOINT", rollbackToSavepoint, "SAVEPOINT"},
		{"ROLLBACK TO SAVEPOINT savepoint", rollbackToSavepoint, "savepoint"},
		{"ROLLBACK TO", rollbackToSavepoint, ""},
		{"RELEASE SAVEPOINT `Sp1`", releaseSavepoint, "Sp1"},
		{"release /**/ savepoint sp1", releaseSavepoint, "sp1"},
		{"ROLLBACK", notSavepoint, ""},
		{"ROLLBACK WORK", notSavepoint, ""},
		{"ROLLBACK AND NO CHAIN", notSavepoint, ""},
		{"`ROLLBACK` TO sp1", notSavepoint, ""},
		{"RELEASE_LOCK('x')", notSavepoint, ""},
		{"INSERT INTO savepoint VALUES (1)", notSavepoint, ""},
		{"", notSavepoint, ""},
	}
	for _, tt := range tests {
		op, name := parseSavepoint([]byte(tt.q))
		if op != tt.op || name != tt.name {
			t.Errorf("parseSavepoint(%q): got %d %q, want %d %q", tt.q, op, name, tt.op, tt.name)
		}
	}
}

// A transaction that changed a non-transactional table after a savepoint
// logs ROLLBACK TO; the server compares savepoint names in any letter case,
// and a ROLLBACK TO deletes the savepoints set after its own, a RELEASE the
// savepoint and those after it.
func TestMachine_SavepointNames(t *testing.T) {
	tm := binlogtest.OutboxTableMap(true)
	myisam := binlogtest.TableMap("app", "audit", []string{"id"}, []byte{mysql.MYSQL_TYPE_LONGLONG})
	q := func(pos uint32, s string) *replication.BinlogEvent { return ev(pos, query(s)) }
	tests := []struct {
		name  string
		stmts []string // between rows: each "row" inserts the next outbox row
		want  []uint64
	}{
		{"other letter case", []string{"row", "SAVEPOINT Sp1", "row", "ROLLBACK TO SAVEPOINT sp1", "row"}, []uint64{1, 3}},
		{"quoted and unquoted", []string{"row", "SAVEPOINT `sp1`", "row", "ROLLBACK TO sp1"}, []uint64{1}},
		{"quoted with a space and a backquote", []string{"SAVEPOINT `My ``Sp`", "row", "ROLLBACK TO `my ``sp`", "row"}, []uint64{2}},
		{"ROLLBACK WORK TO with comments", []string{"row", "SAVEPOINT a", "row", "ROLLBACK /* x */ WORK TO /* y */ A", "row"}, []uint64{1, 3}},
		{"ROLLBACK with a comment before TO is no full rollback", []string{"row", "SAVEPOINT a", "row", "ROLLBACK /* x */ TO a", "row"}, []uint64{1, 3}},
		{"a comment in front", []string{"row", "/* app */ SAVEPOINT a", "row", "/* app */ ROLLBACK TO a"}, []uint64{1}},
		{"rollback to keeps the savepoint", []string{"row", "SAVEPOINT a", "row", "ROLLBACK TO a", "row", "ROLLBACK TO a", "row"}, []uint64{1, 4}},
		{"the same name set again moves", []string{"SAVEPOINT a", "row", "SAVEPOINT A", "row", "ROLLBACK TO a"}, []uint64{1}},
		{"rollback to an earlier one deletes later ones' rows", []string{"SAVEPOINT a", "row", "SAVEPOINT b", "row", "ROLLBACK TO a", "row"}, []uint64{3}},
		{"release keeps the rows", []string{"SAVEPOINT a", "row", "RELEASE SAVEPOINT A", "row"}, []uint64{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			evs := []*replication.BinlogEvent{ev(100, mysqlGTID(5)), q(160, "BEGIN"), ev(210, tm)}
			pos, id := uint32(300), uint64(0)
			for _, s := range tt.stmts {
				if s == "row" {
					id++
					evs = append(evs, ev(pos, insert(t, tm, binlogtest.OutboxRow(int64(id), "x"))))
				} else {
					// ROLLBACK TO is only logged after a non-transactional change.
					evs = append(evs, ev(pos, myisam), ev(pos+10, insert(t, myisam, []any{int64(pos)})), q(pos+20, s))
				}
				pos += 100
			}
			evs = append(evs, ev(pos, xid(nil)))
			if err := h.feed(evs...); err != nil {
				t.Fatal(err)
			}
			if got := ids(h.m.pending.events); !slices.Equal(got, tt.want) {
				t.Errorf("committed ids: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMachine_RollbackToUnknownSavepointStops(t *testing.T) {
	tm := binlogtest.OutboxTableMap(true)
	tests := map[string][]string{
		"never set":             {"SAVEPOINT a"},
		"released":              {"SAVEPOINT b", "RELEASE SAVEPOINT b"},
		"released with a later": {"SAVEPOINT b", "SAVEPOINT c", "RELEASE SAVEPOINT B"},
		"deleted by a rollback": {"SAVEPOINT c", "SAVEPOINT b", "ROLLBACK TO c"},
	}
	for name, before := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			evs := []*replication.BinlogEvent{ev(100, mysqlGTID(5)), ev(160, query("BEGIN")), ev(210, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "x")))}
			for i, s := range before {
				evs = append(evs, ev(400+uint32(i), query(s)))
			}
			evs = append(evs, ev(500, query("ROLLBACK TO b")))
			err := h.feed(evs...)
			if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
				t.Fatalf("ROLLBACK TO an unknown savepoint: got %v, want ErrConfig with a hint", err)
			}
			if h.m.pending.at.Pos != 4 || len(h.m.pending.events) != 0 {
				t.Errorf("position moved to %d with %d events; want it kept before the transaction", h.m.pending.at.Pos, len(h.m.pending.events))
			}
		})
	}
}

func TestMachine_XA(t *testing.T) {
	tm := binlogtest.OutboxTableMap(true)
	const xidText = "X'7831',X'',1"
	prepare := func(pos uint32) *replication.BinlogEvent {
		return &replication.BinlogEvent{Header: &replication.EventHeader{LogPos: pos, EventType: replication.XA_PREPARE_LOG_EVENT}, Event: &replication.GenericEvent{}}
	}
	rows := func(t *testing.T) []*replication.BinlogEvent {
		return []*replication.BinlogEvent{ev(200, tm), ev(300, insert(t, tm, binlogtest.OutboxRow(1, "a"), binlogtest.OutboxRow(2, "b")))}
	}
	seq := func(parts ...[]*replication.BinlogEvent) []*replication.BinlogEvent { return slices.Concat(parts...) }
	one := func(e ...*replication.BinlogEvent) []*replication.BinlogEvent { return e }
	set := func(t *testing.T) mysql.GTIDSet { return mysqlSet(t, testSID.String()+":1-5") }
	tests := []struct {
		name    string
		events  func(t *testing.T) []*replication.BinlogEvent
		ids     []uint64
		pos     uint32
		wantErr bool
	}{
		{
			name: "MySQL one-phase XA commit",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), ev(500, queryGSet("XA COMMIT "+xidText+" ONE PHASE", set(t)))))
			},
			ids: []uint64{1, 2}, pos: 500,
		},
		{
			name: "one-phase commit in lower case with comments",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("xa start 'x1'"))), rows(t),
					one(ev(400, query("xa end 'x1'")), ev(500, query("/* c */ xa commit 'x1' one  phase"))))
			},
			ids: []uint64{1, 2}, pos: 500,
		},
		{
			name: "two-phase: rows dropped at XA PREPARE, reported, as before",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), prepare(450),
						ev(500, mysqlGTID(6)), ev(600, query("XA COMMIT "+xidText))))
			},
			ids: []uint64{}, pos: 600,
		},
		{
			name: "XA ROLLBACK",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), ev(500, query("XA ROLLBACK "+xidText))))
			},
			ids: []uint64{}, pos: 500,
		},
		{
			name: "one-phase commit of another xid stops",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), ev(500, query("XA COMMIT X'7832',X'',1 ONE PHASE"))))
			},
			ids: []uint64{}, pos: 4, wantErr: true,
		},
		{
			name: "one-phase commit without XA END stops",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(500, query("XA COMMIT "+xidText+" ONE PHASE"))))
			},
			ids: []uint64{}, pos: 4, wantErr: true,
		},
		{
			name: "a two-phase commit where the rows are still open stops",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), ev(500, query("XA COMMIT "+xidText))))
			},
			ids: []uint64{}, pos: 4, wantErr: true,
		},
		{
			name: "an XA transaction cut off by the next one stops",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA END "+xidText)), ev(500, mysqlGTID(6))))
			},
			ids: []uint64{}, pos: 4, wantErr: true,
		},
		{
			name: "an unknown XA statement with rows stops",
			events: func(t *testing.T) []*replication.BinlogEvent {
				return seq(one(ev(100, mysqlGTID(5)), ev(150, query("XA START "+xidText))), rows(t),
					one(ev(400, query("XA SOMETHING "+xidText))))
			},
			ids: []uint64{}, pos: 4, wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			err := h.feed(tt.events(t)...)
			if tt.wantErr {
				if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
					t.Fatalf("error: got %v, want ErrConfig with a hint", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := ids(h.m.pending.events); !slices.Equal(got, tt.ids) {
				t.Errorf("committed ids: got %v, want %v", got, tt.ids)
			}
			if h.m.pending.at.Pos != tt.pos {
				t.Errorf("position: got %d, want %d", h.m.pending.at.Pos, tt.pos)
			}
		})
	}
}

func TestDDLTargets(t *testing.T) {
	tests := []struct {
		name, def, q string
		want         bool
	}{
		{"alter, default schema", "app", "ALTER TABLE outbox MODIFY aggregate_id VARCHAR(255) AFTER message_id", true},
		{"alter, qualified", "other", "ALTER TABLE app.outbox ADD x INT", true},
		{"alter, quoted", "other", "alter table `app`.`outbox` add x int", true},
		{"alter, spaces around the dot", "other", "ALTER TABLE app . outbox ADD x INT", true},
		{"alter online (MariaDB)", "app", "ALTER ONLINE TABLE outbox ADD x INT", true},
		{"leading comment", "app", "/* gh-ost */ ALTER TABLE outbox ADD x INT", true},
		{"executable comment", "app", "ALTER TABLE /*!50100 outbox */ ADD x INT", true},
		{"rename into place", "app", "RENAME TABLE outbox TO outbox_old, outbox_new TO outbox", true},
		{"drop", "app", "DROP TABLE IF EXISTS `outbox` /* generated by server */", true},
		{"create", "app", "CREATE TABLE outbox (id INT)", true},
		{"create index", "app", "CREATE INDEX ix ON outbox (aggregate_id)", true},
		{"truncate", "app", "TRUNCATE outbox", true},
		{"other schema, qualified", "app", "ALTER TABLE other.outbox ADD x INT", false},
		{"other schema, default", "other", "ALTER TABLE outbox ADD x INT", false},
		// outbox.t may be a column of the table as well: a false yes only
		// costs a re-read of the layout.
		{"a schema named like the table", "app", "ALTER TABLE outbox.t ADD x INT", true},
		{"a column of the table", "app", "ALTER TABLE orders ADD CONSTRAINT fk FOREIGN KEY (x) REFERENCES outbox (id)", true},
		// Objects whose body names the table leave its columns alone.
		{"a view over the table", "app", "CREATE VIEW v AS SELECT outbox.id FROM outbox", false},
		{"a procedure inserting into the table", "app", "CREATE DEFINER=`root`@`localhost` PROCEDURE add_event(IN p JSON) BEGIN INSERT INTO outbox (payload) VALUES (p); END", false},
		{"a function", "app", "CREATE OR REPLACE FUNCTION n() RETURNS INT RETURN (SELECT COUNT(*) FROM outbox)", false},
		{"a trigger on the table", "app", "CREATE TRIGGER t BEFORE INSERT ON outbox FOR EACH ROW SET NEW.sent_at = NULL", false},
		{"an event", "app", "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM outbox WHERE sent_at IS NOT NULL", false},
		{"drop procedure", "app", "DROP PROCEDURE IF EXISTS outbox", false},
		{"other table with the name inside", "app", "ALTER TABLE outbox_archive ADD x INT", false},
		{"name in a string", "app", "ALTER TABLE orders COMMENT 'feeds the outbox'", false},
		{"name in a comment", "app", "ALTER TABLE orders /* see outbox */ ADD x INT", false},
		{"not DDL", "app", "INSERT INTO outbox VALUES (1)", false},
		{"a word starting like DDL", "app", "CREATED outbox", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outboxTable := func(db, table string) bool { return strings.EqualFold(db, "app") && strings.EqualFold(table, "outbox") }
			if got := len(ddlTargets([]byte(tt.def), []byte(tt.q), outboxTable)) > 0; got != tt.want {
				t.Errorf("ddlTargets(%q, %q) names app.outbox: %v, want %v", tt.def, tt.q, got, tt.want)
			}
		})
	}
}
