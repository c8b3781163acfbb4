// Package exampletest runs what the examples need against the test suite's
// private servers: the example tables, and the relay binary as a separate
// process, as users run it.
package exampletest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// RepoRoot returns the repository's root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the source of exampletest")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Env is one test's world: a fresh database with the outbox table and the
// example tables, and a fresh Redis database.
type Env struct {
	MariaDB  *testsvc.MariaDB
	Redis    *testsvc.Redis
	Database string
	DSN      string // go-sql-driver DSN of the administrative user on Database
	DB       *sql.DB
	RedisURL string
}

// NewEnv creates the outbox table and the example tables on the shared
// servers.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	e := NewBareEnv(t)
	ctx := context.Background()
	if err := schema.Apply(ctx, e.DB, "outbox", schema.DefaultMapping()); err != nil {
		t.Fatalf("create outbox table: %v", err)
	}
	for _, stmt := range SQLStatements(t, filepath.Join(RepoRoot(t), "examples", "schema.sql")) {
		if _, err := e.DB.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("examples/schema.sql: %v\n%s", err, stmt)
		}
	}
	return e
}

// NewBareEnv is an Env whose database has no tables yet, for an example
// that creates them itself (the Laravel migrations).
func NewBareEnv(t testing.TB) *Env {
	t.Helper()
	e := &Env{MariaDB: testsvc.SharedMariaDB(t), Redis: testsvc.SharedRedis(t)}
	e.Database = e.MariaDB.NewDatabase(t)
	e.DSN = e.MariaDB.DSN(e.Database)
	e.DB = e.MariaDB.Open(t, e.Database)
	e.RedisURL = e.Redis.NewDB(t)
	return e
}

// SQLStatements splits a SQL file without procedures into its statements,
// dropping "--" comment lines.
func SQLStatements(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	var out []string
	for _, s := range strings.Split(strings.Join(lines, "\n"), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Build builds a command of the module (e.g. "./cmd/binlog-outbox") once per
// test binary and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "bo-example-bin-")
	if err != nil {
		t.Fatal(err)
	}
	testsvc.AtExit(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

// Relay is the relay running as a process.
type Relay struct {
	*relaytest.Process
}

// StartRelay starts `binlog-outbox run --mode binlog` against the env and
// waits until it has stored its start position, so that every event
// committed afterwards is relayed. It is killed when the test ends.
func StartRelay(t testing.TB, e *Env, args ...string) *Relay {
	t.Helper()
	return StartRelayOn(t, e, "outbox", args...)
}

// StartRelayOn is StartRelay for the relay of another table than outbox;
// args may hold global flags too (--source, --table).
func StartRelayOn(t testing.TB, e *Env, table string, args ...string) *Relay {
	t.Helper()
	full := append([]string{"--mysql-dsn", e.DSN, "--redis-url", e.RedisURL, "--log-format", "json",
		"--server-id", strconv.Itoa(5000 + int(time.Now().UnixNano()%1000000)), "run", "--mode", "binlog"}, args...)
	r := &Relay{relaytest.StartProcess(t, Build(t, "./cmd/binlog-outbox"), full...)}
	rdb := e.Redis.Client(t, e.RedisURL)
	key := redisstream.KeysFor(e.Database, table, "").Position
	relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
		select {
		case <-r.Done():
			t.Fatalf("relay exited:\n%s", r.Out.String())
		default:
		}
		return rdb.Exists(context.Background(), key).Val() == 1
	})
	return r
}

// FreePort returns a loopback port for a server, reserved as the test
// servers' are (servers.FreePort).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := servers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Produced is what a producer printed: message ids of committed and of
// rolled-back events.
type Produced struct {
	Committed, RolledBack []string
}

// ParseProducerOutput reads the "committed ... message_id=X" and
// "rolled-back ... message_id=X" lines both example producers print.
func ParseProducerOutput(t testing.TB, out string) Produced {
	t.Helper()
	var p Produced
	for _, line := range strings.Split(out, "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		_, id, ok := strings.Cut(rest, "message_id=")
		if !ok {
			continue
		}
		id, _, _ = strings.Cut(id, " ")
		switch kind {
		case "committed":
			p.Committed = append(p.Committed, id)
		case "rolled-back":
			p.RolledBack = append(p.RolledBack, id)
		}
	}
	if len(p.Committed) == 0 || len(p.RolledBack) == 0 {
		t.Fatalf("producer output has %d committed and %d rolled-back events, want some of each:\n%s", len(p.Committed), len(p.RolledBack), out)
	}
	return p
}

// ProcessedIDs returns the message ids the group recorded in its inbox, with
// how often each appears (the primary key makes that at most once).
func ProcessedIDs(t testing.TB, db *sql.DB, group string) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT message_id, consumer FROM processed_messages WHERE consumer_group = ?", group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, consumer string
		if err := rows.Scan(&id, &consumer); err != nil {
			t.Fatal(err)
		}
		out[id] = consumer
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// CountedOnce runs query, which returns a key and a count per key (e.g.
// SELECT message_id, COUNT(*) ... GROUP BY message_id), fails the test for
// each key counted more than once, and returns the counts by key for
// CheckExactlyOnce.
func CountedOnce(t testing.TB, db *sql.DB, query string) map[string]string {
	t.Helper()
	counted := map[string]string{}
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, n string
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		if n != "1" {
			t.Errorf("%s handled %s times, want once", k, n)
		}
		counted[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return counted
}

// CheckExactlyOnce fails the test unless the group processed every committed
// event and no rolled-back one.
func CheckExactlyOnce(t testing.TB, processed map[string]string, p Produced) {
	t.Helper()
	var problems []string
	for _, id := range p.Committed {
		if _, ok := processed[id]; !ok {
			problems = append(problems, "committed event "+id+" not processed")
		}
	}
	for _, id := range p.RolledBack {
		if _, ok := processed[id]; ok {
			problems = append(problems, "rolled-back event "+id+" processed")
		}
	}
	if len(processed) != len(p.Committed) {
		problems = append(problems, fmt.Sprintf("%d events processed, want the %d committed", len(processed), len(p.Committed)))
	}
	if len(problems) > 0 {
		t.Errorf("inbox does not match the producer:\n  %s", strings.Join(problems, "\n  "))
	}
}

// PHPEnv returns the environment the PHP examples read their connections
// from (EXAMPLE_PDO_DSN, EXAMPLE_REDIS_HOST, ...): e's database and Redis.
func PHPEnv(t testing.TB, e *Env) []string {
	t.Helper()
	host, port, db := RedisAddr(t, e)
	return append(os.Environ(),
		fmt.Sprintf("EXAMPLE_PDO_DSN=mysql:host=%s;port=%d;dbname=%s", e.MariaDB.Host(), e.MariaDB.Port(), e.Database),
		"EXAMPLE_DB_USER="+e.MariaDB.User(), "EXAMPLE_DB_PASSWORD="+e.MariaDB.Password(),
		"EXAMPLE_REDIS_HOST="+host, "EXAMPLE_REDIS_PORT="+port, "EXAMPLE_REDIS_DB="+db)
}

// RedisAddr splits e's Redis URL into what PHP clients are given.
func RedisAddr(t testing.TB, e *Env) (host, port, db string) {
	t.Helper()
	u, err := url.Parse(e.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/")
}

// RunPHP runs the PHP script at path (relative to the repository) with env
// to its end and returns its standard output; it fails the test unless the
// script exits 0.
func RunPHP(t testing.TB, php string, env []string, path string, args ...string) string {
	t.Helper()
	return PHP(t, php, env, append([]string{filepath.Join(RepoRoot(t), path)}, args...)...)
}

// PHP runs php with args and env to its end and returns its standard
// output; it fails the test unless php exits 0.
func PHP(t testing.TB, php string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(php, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("php %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr.String())
	}
	if testing.Verbose() {
		t.Logf("php %v:\n%s%s", args, out, stderr.String())
	}
	return string(out)
}
