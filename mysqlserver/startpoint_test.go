package mysqlserver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// binlogEvent is one line of SHOW BINLOG EVENTS.
type binlogEvent struct {
	pos, end uint32
	typ      string
}

func binlogEvents(t *testing.T, db mysqlserver.Querier, file string) []binlogEvent {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SHOW BINLOG EVENTS IN '"+file+"'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var evs []binlogEvent
	for rows.Next() {
		var name, typ, info string
		var sid uint32
		var e binlogEvent
		if err := rows.Scan(&name, &e.pos, &typ, &sid, &e.end, &info); err != nil {
			t.Fatal(err)
		}
		e.typ = typ
		evs = append(evs, e)
	}
	return evs
}

// TestCheckFilePoint: a dump starts at a transaction's start or a file's
// end, never inside an event or a transaction, nor past a file's end.
func TestCheckFilePoint(t *testing.T) {
	// A server of its own: the test purges its binlog.
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	ctx := context.Background()
	db := m.Open(t, m.NewDatabase(t))
	for _, q := range []string{"CREATE TABLE t (id INT PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (3, 'c')"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := mysqlserver.BinaryLogs(ctx, db)
	if err != nil || len(logs) == 0 {
		t.Fatalf("BinaryLogs: %v %v", logs, err)
	}
	file, size := logs[len(logs)-1].Name, logs[len(logs)-1].Size
	var gtidStart, tableMap uint32
	for _, e := range binlogEvents(t, db, file) {
		switch {
		case e.typ == "Gtid" && gtidStart == 0:
			gtidStart = e.pos
		case e.typ == "Table_map" && tableMap == 0:
			tableMap = e.pos
		}
	}
	tests := []struct {
		name string
		file string
		pos  uint32
		want error // nil, outbox.ErrConfig or outbox.ErrPositionGone
		says string
	}{
		{"the first event", file, 4, nil, ""},
		{"a transaction's start", file, gtidStart, nil, ""},
		{"the file's end", file, uint32(size), nil, ""},
		{"inside an event", file, gtidStart + 1, outbox.ErrConfig, "not the start of an event"},
		{"inside a transaction", file, tableMap, outbox.ErrConfig, "inside a transaction (at a Table_map event)"},
		{"past the file's end", file, uint32(size) + 1, outbox.ErrConfig, "past the end"},
		{"a file the server does not have", "mysql-bin.999999", 4, outbox.ErrPositionGone, "not on the server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mysqlserver.CheckFilePoint(ctx, db, tt.file, tt.pos)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("CheckFilePoint(%s:%d) = %v, want nil", tt.file, tt.pos, err)
			case tt.want != nil && (!errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.says)):
				t.Fatalf("CheckFilePoint(%s:%d) = %v, want %v saying %q", tt.file, tt.pos, err, tt.want, tt.says)
			}
		})
	}
}

// TestServer_CheckGTIDPoint: a GTID set the server never had, one it purged
// what follows of, and (given by hand) one that leaves a replication domain
// out are refused: MariaDB would read the domains it cannot place from
// their start.
func TestServer_CheckGTIDPoint(t *testing.T) {
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	ctx := context.Background()
	db := m.Open(t, m.NewDatabase(t))
	db.SetMaxOpenConns(1) // the session's gtid_domain_id below
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	gtidPos := func() string {
		var s string
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	exec("CREATE TABLE t (id INT PRIMARY KEY)")
	exec("INSERT INTO t VALUES (1)")
	early := gtidPos()
	exec("INSERT INTO t VALUES (10)") // after early, in the file purged below
	exec("FLUSH BINARY LOGS")
	exec("INSERT INTO t VALUES (2)")
	exec("SET SESSION gtid_domain_id = 7")
	exec("INSERT INTO t VALUES (3)")
	exec("SET SESSION gtid_domain_id = 0")
	now := gtidPos() // both domains

	set := func(s string) position.GTIDSet {
		t.Helper()
		g, err := position.ParseGTIDSet(position.FlavorMariaDB, s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	check := func(name string, s position.GTIDSet, whole bool, want error, says string) {
		t.Helper()
		err := srv.CheckGTIDPoint(ctx, db, s, whole)
		if want == nil && err != nil || want != nil && (!errors.Is(err, want) || !strings.Contains(fmt.Sprint(err), says)) {
			t.Errorf("%s: CheckGTIDPoint(%s, whole %v) = %v, want %v saying %q", name, s, whole, err, want, says)
		}
	}
	check("now", set(now), true, nil, "")
	check("earlier, every domain", set(early+",7-1-0"), false, nil, "")
	check("a typo: a domain the server never had", set("1-1-5"), false, outbox.ErrPositionGone, "never had")
	check("a sequence number the server never reached", set("0-1-500"), false, outbox.ErrPositionGone, "never had")
	check("given by hand without domain 7", set(early), true, outbox.ErrConfig, "replication domain 7")
	check("stored without domain 7 (the relay's own)", set(early), false, nil, "")

	// Purge the file that holds what follows early.
	logs, err := mysqlserver.BinaryLogs(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	// MariaDB keeps a file until InnoDB's checkpoint passed it, and PURGE
	// skips it silently until then.
	last := logs[len(logs)-1].Name
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		exec("PURGE BINARY LOGS TO '" + last + "'")
		if logs, err = mysqlserver.BinaryLogs(ctx, db); err != nil || logs[0].Name == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server kept %v after PURGE BINARY LOGS TO '%s'", logs, last)
		}
	}
	check("after the purge of what follows it", set(early), false, outbox.ErrPositionGone, "purged")
	check("now, after the purge", set(now), false, nil, "")
}
