package testsvc

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

func TestMariaDB_KillRestartKeepsCommittedData(t *testing.T) {
	m := SharedMariaDB(t)
	m.RequirePrivate(t, "kill and restart MariaDB")
	name := m.NewDatabase(t)
	m.Exec(t, "CREATE TABLE `"+name+"`.t (id INT PRIMARY KEY) ENGINE=InnoDB",
		"INSERT INTO `"+name+"`.t VALUES (1),(2)")

	var logBin, format, image, meta string
	db := m.Open(t, name)
	if err := db.QueryRow("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata").Scan(&logBin, &format, &image, &meta); err != nil {
		t.Fatal(err)
	}
	if logBin != "1" || format != "ROW" || image != "FULL" || meta != "FULL" {
		t.Fatalf("server settings: log_bin=%s binlog_format=%s binlog_row_image=%s binlog_row_metadata=%s; want 1 ROW FULL FULL", logBin, format, image, meta)
	}

	m.Kill(t)
	if err := db.Ping(); err == nil {
		t.Fatal("ping after Kill succeeded; want an error")
	}
	m.Restart(t)
	var n int
	if err := m.Open(t, name).QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("rows after restart = %d, want 2", n)
	}
}

func TestStartMariaDB_OtherSettings(t *testing.T) {
	m := StartMariaDB(t, MariaDBOptions{Args: []string{"--binlog-format=STATEMENT"}})
	var format string
	if err := m.Open(t, "").QueryRow("SELECT @@GLOBAL.binlog_format").Scan(&format); err != nil {
		t.Fatal(err)
	}
	if format != "STATEMENT" {
		t.Fatalf("binlog_format = %s, want STATEMENT", format)
	}
}

func TestRedis_KillRestartKeepsAcknowledgedWrites(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	ctx := context.Background()
	u := r.NewDB(t)
	c := r.Client(t, u)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping after Kill succeeded; want an error")
	}
	r.Restart(t)
	n, err := r.Client(t, u).XLen(ctx, "s").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("XLEN after restart = %d, want 1", n)
	}
}

func TestReplica_FollowsAndPromotes(t *testing.T) {
	primary := StartPrimary(t, MariaDBOptions{})
	replica := StartReplica(t, primary, 2, MariaDBOptions{})
	name := primary.NewDatabase(t)
	primary.Exec(t, "CREATE TABLE `"+name+"`.t (id INT PRIMARY KEY) ENGINE=InnoDB",
		"INSERT INTO `"+name+"`.t VALUES (1),(2)")
	replica.WaitReplicated(t, primary)
	count := func(m *MariaDB) int {
		var n int
		if err := m.Open(t, name).QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(replica); n != 2 {
		t.Fatalf("rows on the replica = %d, want 2", n)
	}
	primary.Kill(t)
	replica.Promote(t)
	replica.Exec(t, "INSERT INTO `"+name+"`.t VALUES (3)")
	if n := count(replica); n != 3 {
		t.Fatalf("rows on the promoted replica = %d, want 3", n)
	}
	// The promoted server's own transactions carry its server id.
	if pos := replica.GTIDBinlogPos(t); !strings.Contains(pos, "-2-") {
		t.Fatalf("gtid_binlog_pos of the promoted replica = %q, want a GTID of server_id 2", pos)
	}
}
