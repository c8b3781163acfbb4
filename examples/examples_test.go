// Package examples_test runs the examples for real: the demo script, the PHP
// producer and consumer, the PHP consumer library and the Laravel
// application against the relay and the test suite's private servers, and
// checks that the committed Laravel migration, the MySQL init script and
// docker-compose.yml agree with the code.
package examples_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

const phpInstallHint = "apt-get install -y php-cli php-mysql php-redis (scripts/test.sh installs them)"

// requirePHP fails, never skips, when PHP or an extension is missing: the
// examples are part of what the suite proves.
func requirePHP(t *testing.T) string {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatalf("php not found in PATH; install it with: %s", phpInstallHint)
	}
	out, err := exec.Command(php, "-m").Output()
	if err != nil {
		t.Fatalf("php -m: %v", err)
	}
	mods := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		mods[strings.ToLower(strings.TrimSpace(l))] = true
	}
	// pcntl stops workers between entries; posix lets a test worker crash itself.
	for _, m := range []string{"pdo_mysql", "redis", "json", "pcntl", "posix"} {
		if !mods[m] {
			t.Fatalf("PHP extension %s is missing; install it with: %s", m, phpInstallHint)
		}
	}
	return php
}

// phpRunner runs PHP scripts with the connection settings of an Env in the
// environment variables the examples read (EXAMPLE_PDO_DSN, ...).
type phpRunner struct {
	t   *testing.T
	php string
	env []string
}

func newPHP(t *testing.T, php string, e *exampletest.Env) *phpRunner {
	return &phpRunner{t: t, php: php, env: exampletest.PHPEnv(t, e)}
}

// command is php with args and the Env's settings.
func (p *phpRunner) command(args ...string) *exec.Cmd {
	cmd := exec.Command(p.php, args...)
	cmd.Env = p.env
	return cmd
}

// run runs php with args to its end, failing the test unless it succeeds,
// and returns its standard output.
func (p *phpRunner) run(args ...string) string {
	p.t.Helper()
	return exampletest.PHP(p.t, p.php, p.env, args...)
}

func repo(t *testing.T, parts ...string) string {
	return filepath.Join(append([]string{exampletest.RepoRoot(t)}, parts...)...)
}

func readFile(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(repo(t, parts...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDemoScript runs scripts/demo.sh --headless as a newcomer would, on its
// own ports and in a temporary directory.
func TestDemoScript(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", repo(t, "scripts", "demo.sh"), "--headless")
	cmd.Env = append(os.Environ(),
		"DEMO_DIR="+t.TempDir(),
		"DEMO_MYSQL_PORT="+strconv.Itoa(exampletest.FreePort(t)),
		"DEMO_REDIS_PORT="+strconv.Itoa(exampletest.FreePort(t)))
	// Its own process group, so that a timeout kills the servers it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("demo took %s", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("scripts/demo.sh --headless: %v\n%s", err, out)
	}
	for _, want := range []string{
		"<- rolled back on purpose",
		"PASS  rolled-back events in the stream: 0 of",
		"PASS  rolled-back events processed: 0",
		"PASS  entries pending (read, not acknowledged) in group billing: 0",
		"binlog mode: ready",
		"DEMO OK",
		"stopping the demo's relay, Redis and MariaDB",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "FAIL") {
		t.Errorf("demo output has a FAIL line:\n%s", out)
	}
}

// TestLaravelMigration_UpToDate regenerates the migration that the package
// binlog-outbox/laravel brings.
func TestLaravelMigration_UpToDate(t *testing.T) {
	want, err := exec.Command(exampletest.Build(t, "./cmd/binlog-outbox"), "schema", "print", "--format", "laravel").Output()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("integrations", "laravel", "database", "migrations", "2024_01_01_000000_create_outbox_table.php")
	if got := readFile(t, path); got != string(want) {
		t.Errorf("%s differs from `binlog-outbox schema print --format laravel`; regenerate it:\n  go run ./cmd/binlog-outbox schema print --format laravel > %s", path, path)
	}
}

// TestInitSQL_OutboxTable checks that deploy/mysql/init.sql creates the table
// `schema print` prints; the demo runs the script against MariaDB.
func TestInitSQL_OutboxTable(t *testing.T) {
	want, err := exec.Command(exampletest.Build(t, "./cmd/binlog-outbox"), "schema", "print").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, "deploy", "mysql", "init.sql"); !strings.Contains(got, string(want)) {
		t.Errorf("deploy/mysql/init.sql does not contain the output of `binlog-outbox schema print`:\n%s", want)
	}
}

// TestPHPLint lints every PHP file of the examples, those no test runs
// (migrations' down(), the handlers' other paths) included.
func TestPHPLint(t *testing.T) {
	php := requirePHP(t)
	var files []string
	err := filepath.WalkDir(repo(t, "examples"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".php") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 8 {
		t.Fatalf("found %d PHP files, want the PHP and Laravel examples: %v", len(files), files)
	}
	for _, f := range files {
		if out, err := exec.Command(php, "-l", f).CombinedOutput(); err != nil {
			t.Errorf("php -l %s: %v\n%s", f, err, out)
		}
	}
}

var ulidRE = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

// TestPHPExamples runs the relay, producer.php and consumer.php: every
// committed event processed once, no rolled-back one, a crashed consumer's
// entries claimed by another, a redelivered entry skipped, a poison message
// dead-lettered after --max-deliveries.
func TestPHPExamples(t *testing.T) {
	php := requirePHP(t)
	ctx := context.Background()
	e := exampletest.NewEnv(t)
	exampletest.StartRelay(t, e)
	rdb := e.Redis.Client(t, e.RedisURL)
	phpEnv := exampletest.PHPEnv(t, e)
	run := func(script string, args ...string) string {
		t.Helper()
		return exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "php", script), args...)
	}

	produced := exampletest.ParseProducerOutput(t, run("producer.php", "--orders", "20", "--rollback-every", "3"))
	for _, id := range append(append([]string{}, produced.Committed...), produced.RolledBack...) {
		if !ulidRE.MatchString(id) {
			t.Fatalf("producer.php message_id %q is not a ULID", id)
		}
	}
	if ts := ulidTime(produced.Committed[0]); time.Since(ts).Abs() > time.Minute {
		t.Errorf("ULID %s carries the time %s, want about now", produced.Committed[0], ts)
	}
	relaytest.WaitFor(t, 30*time.Second, "the relay to append the committed events", func() bool {
		return rdb.XLen(ctx, "outbox:order").Val() >= int64(len(produced.Committed))
	})

	consume := func(args ...string) map[string]int {
		t.Helper()
		args = append([]string{"--group", "php", "--max-deliveries", "3", "--min-idle-ms", "300"}, args...)
		return parseStats(t, run("consumer.php", args...))
	}
	// One round by a consumer that then stops cleanly; it creates the group.
	if st := consume("--consumer", "early", "--once", "--count", "5", "--block-ms", "100"); st["processed"] != 5 {
		t.Errorf("consumer.php --once --count 5: %v, want 5 processed", st)
	}
	// A consumer reads three entries and crashes before it processes them.
	crashed, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "php", Consumer: "crashed", Streams: []string{"outbox:order", ">"}, Count: 3, Block: -1}).Result()
	if err != nil || len(crashed) != 1 || len(crashed[0].Messages) != 3 {
		t.Fatalf("XREADGROUP as the crashing consumer: %v %v", crashed, err)
	}
	st := consume("--consumer", "survivor", "--drain")
	if want := len(produced.Committed) - 5; st["processed"] != want || st["claimed"] != 3 || st["duplicates"] != 0 || st["failed"] != 0 {
		t.Errorf("consumer.php --drain: %v, want %d processed, 3 claimed, no duplicates, no failures", st, want)
	}
	processed := exampletest.ProcessedIDs(t, e.DB, "php")
	exampletest.CheckExactlyOnce(t, processed, produced)
	for _, m := range crashed[0].Messages {
		if got := processed[m.Values["message_id"].(string)]; got != "survivor" {
			t.Errorf("entry %s of the crashed consumer processed by %q, want it claimed by survivor", m.ID, got)
		}
	}

	// A second delivery of a processed event, and a poison message.
	first := rdb.XRangeN(ctx, "outbox:order", "-", "+", 1).Val()[0]
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: first.Values})
	poison := map[string]any{}
	for k, v := range first.Values {
		poison[k] = v
	}
	poison["message_id"] = "01POISON000000000000000000"
	poison["payload"] = "{not json"
	poisonID := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: poison}).Val()

	st = consume("--consumer", "survivor", "--drain")
	if st["processed"] != 0 || st["duplicates"] != 1 || st["failed"] != 3 || st["dead_lettered"] != 1 {
		t.Errorf("consumer.php --drain after a duplicate and a poison message: %v, want 1 duplicate, 3 failures, 1 dead-lettered", st)
	}
	if n := len(exampletest.ProcessedIDs(t, e.DB, "php")); n != len(produced.Committed) {
		t.Errorf("inbox has %d rows after the duplicate, want %d", n, len(produced.Committed))
	}
	dead := rdb.XRange(ctx, "outbox:dead-letter", "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["source_entry_id"] != poisonID || dead[0].Values["message_id"] != "01POISON000000000000000000" ||
		!strings.Contains(fmt.Sprint(dead[0].Values["reason"]), "failed 3 times") {
		t.Errorf("dead-letter stream: %v, want the poison entry %s with its reason", dead, poisonID)
	}
	if p := rdb.XPending(ctx, "outbox:order", "php").Val(); p.Count != 0 {
		t.Errorf("pending entries after the runs: %d, want 0", p.Count)
	}
}

func parseStats(t *testing.T, out string) map[string]int {
	t.Helper()
	st := map[string]int{}
	for _, f := range strings.Fields(out) {
		k, v, ok := strings.Cut(f, "=")
		if n, err := strconv.Atoi(v); ok && err == nil {
			st[k] = n
		}
	}
	if _, ok := st["processed"]; !ok {
		t.Fatalf("consumer output has no stats line: %q", out)
	}
	return st
}

func ulidTime(id string) time.Time {
	var ms int64
	for _, c := range id[:10] {
		ms = ms<<5 | int64(strings.IndexRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", c))
	}
	return time.UnixMilli(ms)
}
