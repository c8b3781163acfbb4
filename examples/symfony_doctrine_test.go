package examples_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// messengerMessagesDDL is the table Messenger's Doctrine transport creates
// (Connection::addTableToSchema) on MariaDB.
const messengerMessagesDDL = `CREATE TABLE messenger_messages (
  id BIGINT AUTO_INCREMENT NOT NULL,
  body LONGTEXT NOT NULL,
  headers LONGTEXT NOT NULL,
  queue_name VARCHAR(190) NOT NULL,
  created_at DATETIME NOT NULL,
  available_at DATETIME NOT NULL,
  delivered_at DATETIME DEFAULT NULL,
  INDEX IDX_75EA56E0FB7336F0 (queue_name),
  INDEX IDX_75EA56E0E3BD61CE (available_at),
  INDEX IDX_75EA56E016BA31DB (delivered_at),
  PRIMARY KEY(id)
) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci ENGINE = InnoDB`

// TestSymfonyDoctrineSource dispatches through Messenger's Doctrine
// transport (Debian's php-symfony-doctrine-messenger and php-doctrine-dbal)
// inside $connection->transactional(), some transactions rolled back, one
// message delayed with a DelayStamp; the relay runs with --source
// symfony-doctrine, and Messenger's Redis transport consumes the stream of
// the queue: every committed message handled once, no rolled-back one, and
// the delayed one not handled before its time (it is a dead letter, with
// the reason, until dead-letters replay relays it once it is due).
func TestSymfonyDoctrineSource(t *testing.T) {
	for _, mode := range []string{"binlog", "poll"} {
		t.Run(mode, func(t *testing.T) { testSymfonyDoctrineSource(t, mode) })
	}
}

func testSymfonyDoctrineSource(t *testing.T, mode string) {
	php := requirePHP(t)
	requireSymfony(t, php)
	for _, file := range []string{"Doctrine/DBAL/autoload.php", "Symfony/Component/Messenger/Bridge/Doctrine/autoload.php"} {
		if out := exampletest.PHP(t, php, nil, "-r", fmt.Sprintf("echo stream_resolve_include_path(%q) === false ? 'missing' : 'ok';", file)); out != "ok" {
			t.Fatalf("PHP cannot find %s; install php-symfony-doctrine-messenger and php-doctrine-dbal", file)
		}
	}
	ctx := context.Background()
	e := exampletest.NewBareEnv(t)
	if _, err := e.DB.Exec(messengerMessagesDDL); err != nil {
		t.Fatal(err)
	}
	relay := relaytest.StartProcess(t, exampletest.Build(t, "./cmd/binlog-outbox"),
		"--mysql-dsn", e.DSN, "--redis-url", e.RedisURL, "--log-format", "json", "--source", "symfony-doctrine",
		"--server-id", strconv.Itoa(6000+int(time.Now().UnixNano()%1000000)), "run", "--mode", mode, "--poll-interval", "100ms")
	rdb := e.Redis.Client(t, e.RedisURL)
	if mode == "binlog" {
		relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
			select {
			case <-relay.Done():
				t.Fatalf("relay exited:\n%s", relay.Out.String())
			default:
			}
			return rdb.Exists(ctx, redisstream.KeysFor(e.Database, "messenger_messages", "").Position).Val() == 1
		})
	}

	phpEnv := append(exampletest.PHPEnv(t, e), "EXAMPLE_DB_HOST="+e.MariaDB.Host(), fmt.Sprintf("EXAMPLE_DB_PORT=%d", e.MariaDB.Port()),
		"EXAMPLE_DB_NAME="+e.Database)
	out := exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "producer.php"),
		"--messages", "12", "--rollback-every", "3", "--delay-ms", "4000")
	var committed, rolledBack, delayed []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		kind, id, _ := strings.Cut(line, " ")
		switch kind {
		case "committed":
			committed = append(committed, id)
		case "rolledback":
			rolledBack = append(rolledBack, id)
		case "delayed":
			delayed = append(delayed, id)
		}
	}
	if len(committed) != 8 || len(rolledBack) != 4 || len(delayed) != 1 {
		t.Fatalf("producer output:\n%s", out)
	}

	host, port, db := exampletest.RedisAddr(t, e)
	// One message more than committed: the consumer waits its --seconds
	// for it, and the delayed message must not be it.
	consumed := exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "consumer.php"),
		"--dsn", fmt.Sprintf("redis://%s:%s/outbox:default/app/c1", host, port), "--dbindex", db,
		"--expect", strconv.Itoa(len(committed)+1), "--seconds", "10")
	var handled []string
	for _, line := range strings.Split(strings.TrimSpace(consumed), "\n") {
		if id, ok := strings.CutPrefix(line, "handled "); ok {
			handled = append(handled, id)
		}
	}
	slices.Sort(handled)
	want := slices.Clone(committed)
	slices.Sort(want)
	if !slices.Equal(handled, want) {
		t.Errorf("handled %v, want each committed message once: %v (rolled back: %v, delayed: %v)", handled, want, rolledBack, delayed)
	}
	dead := rdb.XRange(ctx, redisstream.DefaultDeadLetterStream, "-", "+").Val()
	if len(dead) != 1 || !strings.Contains(fmt.Sprint(dead[0].Values["reason"]), "delayed until") {
		t.Errorf("dead-letter stream %v, want the delayed message with its reason", dead)
	}
	if q := rdb.Exists(ctx, "outbox:default__queue").Val(); q != 0 {
		t.Errorf("the delayed set outbox:default__queue exists; the relay does not write it")
	}
	// Once it is due, dead-letters replay relays the delayed message, and
	// the Redis transport hands it to the consumer.
	var due time.Time
	if err := e.DB.QueryRow("SELECT available_at FROM messenger_messages WHERE id = (SELECT MAX(id) FROM messenger_messages)").Scan(&due); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(due.Add(time.Second)))
	bin := exampletest.Build(t, "./cmd/binlog-outbox")
	global := []string{"--mysql-dsn", e.DSN, "--redis-url", e.RedisURL, "--source", "symfony-doctrine"}
	if out, err := exec.Command(bin, append(global, "dead-letters", "replay", "--all")...).CombinedOutput(); err != nil {
		t.Fatalf("dead-letters replay: %v\n%s", err, out)
	}
	consumed = exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "consumer.php"),
		"--dsn", fmt.Sprintf("redis://%s:%s/outbox:default/app/c1", host, port), "--dbindex", db, "--expect", "1", "--seconds", "10")
	if got := strings.TrimSpace(consumed); got != "handled "+delayed[0] {
		t.Errorf("after the replay the consumer printed %q, want the delayed message once", got)
	}
	if mode == "binlog" {
		// cleanup removes the relayed rows.
		out, err := exec.Command(bin, append(global, "cleanup", "--older-than", "1s")...).CombinedOutput()
		if err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
		var left int
		if err := e.DB.QueryRow("SELECT COUNT(*) FROM messenger_messages").Scan(&left); err != nil || left != 0 {
			t.Errorf("%d rows left after cleanup (%v), want none:\n%s", left, err, out)
		}
	}
	if mode == "poll" {
		var unmarked int
		if err := e.DB.QueryRow("SELECT COUNT(*) FROM messenger_messages WHERE delivered_at IS NULL").Scan(&unmarked); err != nil || unmarked != 0 {
			t.Errorf("%d rows without delivered_at (%v), want every relayed row marked", unmarked, err)
		}
	}
}
