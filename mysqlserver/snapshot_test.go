package mysqlserver_test

import (
	"context"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// TestServer_SnapshotEnd checks that the end returned for a snapshot is
// the binlog end when it began, not at the time of asking: a transaction
// committed after it lies beyond that end.
func TestServer_SnapshotEnd(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	db := srv.Open(t, srv.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	s, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	end, err := s.SnapshotEnd(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	file, pos, err := s.BinlogPosition(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if end.ServerID != s.ServerID || end.File == "" {
		t.Fatalf("SnapshotEnd = %+v, want the server's id and a file", end)
	}
	if position.FileAtOrPast(end.File, end.Pos, file, pos) {
		t.Errorf("SnapshotEnd = %s, at or past the end %s:%d after a later commit; want the end when the snapshot began", end, file, pos)
	}
	var gtid string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	now, err := position.ParseGTIDSet(position.FlavorMariaDB, gtid)
	if err != nil {
		t.Fatal(err)
	}
	if end.GTIDSet.IsZero() || !now.Contains(end.GTIDSet) {
		t.Errorf("SnapshotEnd GTID set %q, want one that gtid_binlog_pos %q contains", end.GTIDSet, gtid)
	}
	conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // read only
}
