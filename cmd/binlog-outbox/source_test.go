package main

import (
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// doctrineTableDDL is messenger_messages as Messenger's Doctrine transport
// creates it.
const doctrineTableDDL = `CREATE TABLE messenger_messages (
  id BIGINT AUTO_INCREMENT NOT NULL PRIMARY KEY,
  body LONGTEXT NOT NULL, headers LONGTEXT NOT NULL, queue_name VARCHAR(190) NOT NULL,
  created_at DATETIME NOT NULL, available_at DATETIME NOT NULL, delivered_at DATETIME DEFAULT NULL,
  INDEX (queue_name), INDEX (available_at), INDEX (delivered_at)
) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`

// TestCheck_SymfonyDoctrineSource checks messenger_messages with --source
// symfony-doctrine in both modes, and fails a table that lacks a column the
// preset reads, and a --format the source does not take.
func TestCheck_SymfonyDoctrineSource(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	dbName := m.NewDatabase(t)
	db := m.Open(t, dbName)
	if _, err := db.Exec(doctrineTableDDL); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", m.DSN(dbName), "--redis-url", testsvc.SharedRedis(t).URL(0), "--source", "symfony-doctrine"}
	for _, mode := range []string{"binlog", "poll"} {
		out, errOut, code := run(t, append(global, "check", "--mode", mode)...)
		if code != 0 || !strings.Contains(out, "PASS  "+preflight.NameFormat) || !strings.Contains(out, "symfony-doctrine: messenger_messages rows") {
			t.Errorf("check --mode %s: exit %d, want 0 with the format\n%s%s", mode, code, out, errOut)
		}
	}

	if _, _, code := run(t, append(global, "check", "--mode", "binlog", "--format", "flat")...); code != exitUsage {
		t.Errorf("check --source symfony-doctrine --format flat: exit %d, want %d", code, exitUsage)
	}

	if _, errOut, code := run(t, "--source", "symfony-doctrine", "schema", "print"); code != exitUsage || !strings.Contains(errOut, "messenger:setup-transports") {
		t.Errorf("schema print --source symfony-doctrine: exit %d, want %d with the hint\n%s", code, exitUsage, errOut)
	}

	if _, err := db.Exec("ALTER TABLE messenger_messages DROP COLUMN queue_name"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, append(global, "check", "--mode", "binlog")...)
	if code == 0 || !strings.Contains(out+errOut, "queue_name") {
		t.Errorf("check of a messenger_messages without queue_name: exit %d, want a failure naming it\n%s%s", code, out, errOut)
	}
}
