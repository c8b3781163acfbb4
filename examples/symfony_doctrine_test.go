package examples_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// TestSymfonyDoctrineSource dispatches on a Messenger bus routed to the
// Doctrine transport (Debian's php-symfony-doctrine-messenger and
// php-doctrine-dbal) inside $connection->transactional(), some transactions
// rolled back, the last message delayed 2 s with a DelayStamp; the relay
// runs with --source symfony-doctrine, and a Messenger Worker on the Redis
// transport, started before the first dispatch, records each message it
// handles in MariaDB: every committed message handled once, no rolled-back
// one, the delayed one from the Redis transport's delayed set
// (<stream>__queue) and not before its available_at, and no dead letter.
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
	} else {
		// repair below asks Redis how the table is relayed: the poller
		// records it at its start, which a quick producer can outrun.
		relaytest.WaitFor(t, 30*time.Second, "the relay to record poll mode", func() bool {
			select {
			case <-relay.Done():
				t.Fatalf("relay exited:\n%s", relay.Out.String())
			default:
			}
			return rdb.Get(ctx, "binlog-outbox:mode:"+e.Database+".messenger_messages").Val() == "poll"
		})
	}

	phpEnv := append(exampletest.PHPEnv(t, e), "EXAMPLE_DB_HOST="+e.MariaDB.Host(), fmt.Sprintf("EXAMPLE_DB_PORT=%d", e.MariaDB.Port()),
		"EXAMPLE_DB_NAME="+e.Database)
	host, port, db := exampletest.RedisAddr(t, e)
	dsn := fmt.Sprintf("redis://%s:%s/outbox:default/app/c1", host, port)
	// 12 messages, every third rolled back, and the delayed one: 9 to handle.
	worker := startPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "consumer.php"),
		"--dsn", dsn, "--dbindex", db, "--expect", "9", "--seconds", "60")
	out := exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "producer.php"),
		"--messages", "12", "--rollback-every", "3", "--delay-ms", "2000")
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
	bin := exampletest.Build(t, "./cmd/binlog-outbox")
	global := []string{"--mysql-dsn", e.DSN, "--redis-url", e.RedisURL, "--source", "symfony-doctrine"}
	// repair's dry run finds no row missing, whether the delayed message
	// waits in its set (most likely now) or Messenger moved it to the
	// stream without the relay's fields (at the end): either way repair
	// must not append it again.
	repairFindsNothing := func(when string) {
		t.Helper()
		out, err := exec.Command(bin, append(global, "repair")...).CombinedOutput()
		if err != nil {
			t.Errorf("repair (dry run) %s: %v, want exit 0 (nothing missing)\n%s", when, err, out)
		}
	}
	repairFindsNothing("while the delayed message waits")
	if err := worker.wait(90 * time.Second); err != nil {
		t.Fatalf("worker: %v\n%s\nrelay:\n%s", err, worker.output(), relay.Out.String())
	}

	handled := map[string][]int64{}
	rows, err := e.DB.Query("SELECT message_id, handled_at_ms FROM handled_messages ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var at int64
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		handled[id] = append(handled[id], at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	want := append(slices.Clone(committed), delayed...)
	for _, id := range want {
		if n := len(handled[id]); n != 1 {
			t.Errorf("%s handled %d times, want once", id, n)
		}
	}
	if len(handled) != len(want) {
		t.Errorf("handled %v, want each of %v once (rolled back: %v)", handled, want, rolledBack)
	}
	var due time.Time
	if err := e.DB.QueryRow("SELECT available_at FROM messenger_messages WHERE id = (SELECT MAX(id) FROM messenger_messages)").Scan(&due); err != nil {
		t.Fatal(err)
	}
	if at := handled[delayed[0]]; len(at) == 1 && at[0] < due.UnixMilli() {
		t.Errorf("the delayed message was handled at %d ms, %d ms before its available_at %s", at[0], due.UnixMilli()-at[0], due)
	}
	if dead := rdb.XLen(ctx, redisstream.DefaultDeadLetterStream).Val(); dead != 0 {
		t.Errorf("%d dead letters, want none", dead)
	}
	if n := rdb.ZCard(ctx, "outbox:default__queue").Val(); n != 0 {
		t.Errorf("%d messages left in the delayed set, want the worker to have moved the one", n)
	}
	// Nothing more to handle: a second worker finds no message in 2 s.
	exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "symfony", "doctrine", "consumer.php"),
		"--dsn", fmt.Sprintf("redis://%s:%s/outbox:default/app/c2", host, port), "--dbindex", db, "--expect", "1", "--seconds", "2")
	var total int
	if err := e.DB.QueryRow("SELECT COUNT(*) FROM handled_messages").Scan(&total); err != nil || total != len(want) {
		t.Errorf("%d messages handled in all (%v), want %d", total, err, len(want))
	}

	repairFindsNothing("after the worker handled every message")
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

// phpProcess is a PHP script running in the background.
type phpProcess struct {
	cmd  *exec.Cmd
	out  *strings.Builder
	done chan error
}

// startPHP starts the PHP script at path (relative to the repository) with
// env; the test's end kills it if it still runs.
func startPHP(t *testing.T, php string, env []string, path string, args ...string) *phpProcess {
	t.Helper()
	p := &phpProcess{out: &strings.Builder{}, done: make(chan error, 1)}
	p.cmd = exec.Command(php, append([]string{filepath.Join(exampletest.RepoRoot(t), path)}, args...)...)
	p.cmd.Env = env
	w := &lockedWriter{b: p.out}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to d for the script to exit 0.
func (p *phpProcess) wait(d time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		return fmt.Errorf("still running after %s", d)
	}
}

// output is what the script printed so far.
func (p *phpProcess) output() string {
	w := p.cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// lockedWriter serialises the writes of a process's two output pipes.
type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
