package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/settings"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The tests wait on private servers and relay processes far more than on the
// CPU: more of them run at a time than the machine has cores.
func TestMain(m *testing.M) { testsvc.MainParallel(m, 6) }

// appMu lets one in-process app at a time read its command line: urfave/cli
// applies its package-level help flag (cli.HelpFlag) and help command to
// every app it runs, so two apps parsing at once race. Relay processes do
// not share it.
var appMu sync.Mutex

// parseAlone takes appMu until app's command line is read: every action of
// app, set before the call, gives it up as it starts, and so does the
// returned done, which the caller defers (a command line refused before
// any action).
func parseAlone(app *cli.App) (done func()) {
	appMu.Lock()
	var once sync.Once
	done = func() { once.Do(appMu.Unlock) }
	wrap := func(action cli.ActionFunc) cli.ActionFunc {
		if action == nil {
			return nil
		}
		return func(c *cli.Context) error {
			done()
			return action(c)
		}
	}
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.Action = wrap(c.Action)
			walk(c.Subcommands)
		}
	}
	app.Action = wrap(app.Action)
	walk(app.Commands)
	return done
}

// run drives the app in-process as main does and returns what it printed and
// its exit code.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// Buffers that goroutines may share: go-redis logs through one logger
	// per process (settings.Resolve sets it to the app's), so a client an
	// earlier in-process run left behind (a Sentinel client's listener)
	// can write to this run's stderr while it is read.
	var out, errb logging.Buffer
	app := NewApp()
	app.Writer, app.ErrWriter = &out, &errb
	defer parseAlone(app)()
	err := app.Run(append([]string{"binlog-outbox"}, args...))
	code = reportError(&errb, err)
	return out.String(), errb.String(), code
}

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// applyAndCheck creates the outbox table with `schema apply` and runs check.
func applyAndCheck(t *testing.T, m *testsvc.MariaDB, checkArgs ...string) (stdout string, code int) {
	t.Helper()
	dsn := m.DSN(m.NewDatabase(t))
	global := []string{"--mysql-dsn", dsn, "--redis-url", testsvc.SharedRedis(t).URL(0)}
	if out, errOut, code := run(t, append(global, "schema", "apply")...); code != 0 || !strings.Contains(out, "is ready") {
		t.Fatalf("schema apply: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := run(t, append(append(global, "check"), checkArgs...)...)
	t.Logf("check %v: exit %d\n%s%s", checkArgs, code, out, errOut)
	return out, code
}

func TestCheck_AllPass(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	out, code := applyAndCheck(t, testsvc.SharedMariaDB(t), "--mode", "binlog")
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	var lines int
	for _, l := range strings.Split(out, "\n") {
		// The test servers trade durability for speed on purpose
		// (testsvc.DefaultMariaDBArgs): those two warn, and every mode
		// stays ready.
		durability := strings.HasPrefix(l, "WARN  "+preflight.NameSyncBinlog) || strings.HasPrefix(l, "WARN  "+preflight.NameFlushLogAtCommit)
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "WARN") && !durability || strings.HasPrefix(l, "SKIP") {
			t.Errorf("line %q: want every requirement to pass", l)
		}
		if strings.HasPrefix(l, "PASS") {
			lines++
		}
	}
	if lines < 10 {
		t.Errorf("%d PASS lines, want one per requirement", lines)
	}
	for _, want := range []string{"PASS  binlog_format", "binlog mode: ready", "poll mode: ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestCheck_StatementFormat(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-format=STATEMENT"}})
	tests := []struct {
		mode string
		code int
	}{{"binlog", 1}, {"poll", 0}, {"auto", 0}}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			out, code := applyAndCheck(t, m, "--mode", tt.mode)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			for _, want := range []string{"FAIL  binlog_format", "fix: set binlog_format=ROW", "binlog mode: not ready", "poll mode: ready"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
		})
	}
}

func TestCheck_NeitherModeFailsAuto(t *testing.T) {
	// It starts no server and dials only closed ports.
	t.Parallel()
	dsn := fmt.Sprintf("relay:hunter2pw@tcp(127.0.0.1:%d)/app", closedPort(t))
	out, errOut, code := run(t, "--mysql-dsn", dsn, "--redis-url", fmt.Sprintf("redis://:hunter2pw@127.0.0.1:%d/0", closedPort(t)), "check", "--timeout", "5s")
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "FAIL  mysql server") || !strings.Contains(out, "FAIL  redis server") {
		t.Errorf("output lacks the failures:\n%s", out)
	}
	if strings.Contains(out+errOut, "hunter2") {
		t.Errorf("output shows the password:\n%s%s", out, errOut)
	}
}

func TestSchemaPrint(t *testing.T) {
	tests := []struct {
		args []string
		want []string
		code int
	}{
		{[]string{"schema", "print"}, []string{"CREATE TABLE", "`outbox`", "`payload`", ";"}, 0},
		{[]string{"--table", "events", "--column", "payload=body", "schema", "print", "--format", "sql"}, []string{"`events`", "`body`"}, 0},
		{[]string{"schema", "print", "--format", "laravel"}, []string{"<?php", "Schema::create('outbox'"}, 0},
		{[]string{"schema", "print", "--format", "xml"}, nil, 2},
		{[]string{"--column", "nope=x", "schema", "print"}, nil, 2},
	}
	for _, tt := range tests {
		out, errOut, code := run(t, tt.args...)
		if code != tt.code {
			t.Errorf("%v: exit %d, want %d\n%s", tt.args, code, tt.code, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
}

func TestHelp_HidesSecrets(t *testing.T) {
	t.Setenv(settings.Env("mysql-dsn"), "user:secret@tcp(127.0.0.1:3306)/app")
	t.Setenv(settings.Env("redis-url"), "redis://app:secret@127.0.0.1:6379/0")
	for _, args := range [][]string{{"--help"}, {"help"}, {"check", "--help"}, {"schema", "apply", "--help"}, {"schema", "--help"}} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
		if strings.Contains(out+errOut, "secret") {
			t.Errorf("%v shows the password:\n%s%s", args, out, errOut)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	// Not parallel: its many in-process runs would keep the others
	// waiting for appMu.
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"no dsn", []string{"check"}, "hint: set --mysql-dsn", 2},
		{"no database", []string{"--mysql-dsn", "u:hunter2pw@tcp(127.0.0.1:3306)/", "check"}, "names no database", 2},
		{"bad dsn", []string{"--mysql-dsn", "u:hunter2pw/x@tcp(127.0.0.1:3306", "check"}, "does not parse", 2},
		{"bad redis url", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis://u:hunter2pw@h:x/0", "check"}, "does not parse", 2},
		{"sentinel url without a master", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis+sentinel://u:hunter2pw@s1:26379,s2:26379", "check"}, "/<master name>", 2},
		{"sentinel url with a bad sentinel", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis+sentinel://u:hunter2pw@s1:26379,s2:x/m/0", "check"}, `"s2:x" in --redis-url is not host:port`, 2},
		{"master named twice", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis+sentinel://s1:26379/m/0", "--redis-sentinel-master", "n", "check"}, "name the master in one place", 2},
		{"go-redis's failover url", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis://s:hunter2pw@s1:26379/0?master_name=m", "check"}, "redis+sentinel://", 2},
		{"sentinel user without sentinels", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-sentinel-user", "watcher", "check"}, "names no Sentinel", 2},
		{"sentinel TLS flags without TLS", []string{"--mysql-dsn", "u@tcp(h)/app", "--redis-url", "redis+sentinel://s1:26379/m/0", "--redis-tls-server-name", "r.test", "check"}, "rediss+sentinel://", 2},
		{"bad log level", []string{"--log-level", "loud", "schema", "print"}, "hint: use --log-level", 2},
		{"server id 0", []string{"--server-id", "0", "schema", "print"}, "out of range", 2},
		{"extra column on a built-in field", []string{"--extra-column", "kind=payload", "schema", "print"}, "field payload is a built-in field of the entries", 2},
		{"extra column that is a mapped column", []string{"--column", "event_type=kind", "--extra-column", "kind", "schema", "print"}, "column kind is the table's event_type column", 2},
		{"extra column twice", []string{"--extra-column", "tenant,tenant=t", "schema", "print"}, "column tenant is given twice", 2},
		{"bad mode", []string{"--mysql-dsn", "u@tcp(h)/app", "check", "--mode", "fast"}, "want binlog, poll or auto", 2},
		{"lease renewed too rarely", []string{"--mysql-dsn", "u@tcp(h)/app", "run", "--lease-ttl", "2s", "--lease-renew", "1s"}, "hint: keep the defaults (--lease-ttl 5s --lease-renew 1s)", 2},
		{"unknown flag", []string{"check", "--bogus"}, "incorrect usage", 2},
		{"unknown command", []string{"frobnicate"}, "unknown command", 2},
		{"unreachable", []string{"--mysql-dsn", fmt.Sprintf("u:hunter2pw@tcp(127.0.0.1:%d)/app", closedPort(t)), "schema", "apply"}, "connection refused", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.want)
			}
			if strings.Contains(out+errOut, "hunter2") {
				t.Errorf("output shows the password:\n%s%s", out, errOut)
			}
		})
	}
}

func TestLoadConfig_LogsRedactedConfig(t *testing.T) {
	// It starts no server and dials only closed ports.
	t.Parallel()
	dsn := fmt.Sprintf("u:hunter2pw@tcp(127.0.0.1:%d)/app", closedPort(t))
	_, errOut, _ := run(t, "--log-level", "debug", "--log-format", "json", "--mysql-dsn", dsn,
		"--redis-url", "redis://:hunter2pw@127.0.0.1:1/0", "check", "--timeout", "2s")
	if !strings.Contains(errOut, `"msg":"starting"`) || !strings.Contains(errOut, "u:xxxxx@tcp") || !strings.Contains(errOut, fmt.Sprintf(`"server_id":%d`, settings.DefaultServerIDFor(hostname(t), "binlog-outbox:position:app.outbox"))) {
		t.Errorf("debug log lacks the redacted config:\n%s", errOut)
	}
	if strings.Contains(errOut, "hunter2") {
		t.Errorf("debug log shows the password:\n%s", errOut)
	}
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version")
	if code != 0 || !strings.Contains(out, "binlog-outbox dev") || !strings.Contains(out, "commit: ") || !strings.Contains(out, "go: go1.") {
		t.Errorf("version: exit %d, output %q", code, out)
	}
}

func TestReportError(t *testing.T) {
	tests := []struct {
		err  error
		want string
		code int
	}{
		{nil, "", 0},
		{errors.New("boom"), "error: boom\n", 1},
		{fmt.Errorf("run: %w", outbox.WithHint(errors.New("binlog_format is STATEMENT"), "set binlog_format=ROW")),
			"error: run: binlog_format is STATEMENT\nhint: set binlog_format=ROW\n", 1},
		{outbox.WithHint(fmt.Errorf("%w: bad flag", outbox.ErrConfig), "fix it"), "error: invalid configuration: bad flag\nhint: fix it\n", 2},
		// Every usage error ends with a hint; one without its own gets --help's.
		{usageError{errors.New("flag provided but not defined: -x")},
			"error: flag provided but not defined: -x\nhint: the command's --help lists its flags, each with what it takes and its default\n", 2},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if code := reportError(&b, tt.err); code != tt.code || b.String() != tt.want {
			t.Errorf("reportError(%v) = %d, %q; want %d, %q", tt.err, code, b.String(), tt.code, tt.want)
		}
	}
}

func TestTolerateOwnServerID(t *testing.T) {
	inUse := preflight.Result{Name: preflight.NameServerID, Status: preflight.Fail, Detail: "--server-id 7 is taken",
		Cause: preflight.CauseServerIDInUse, Modes: []preflight.Mode{preflight.ModeBinlog}}
	own := preflight.Result{Name: preflight.NameServerID, Status: preflight.Fail, Detail: "--server-id 1 is the server's own server_id",
		Modes: []preflight.Mode{preflight.ModeBinlog}}
	tests := []struct {
		name string
		in   preflight.Result
		want preflight.Status
	}{
		{"used by a replica", inUse, preflight.Warn},
		{"the server's own id", own, preflight.Fail},
	}
	for _, tt := range tests {
		rep := preflight.Report{Results: []preflight.Result{tt.in}}
		rep.TolerateOwnServerID()
		if got := rep.Results[0].Status; got != tt.want {
			t.Errorf("%s: status %v, want %v", tt.name, got, tt.want)
		}
	}
}

// check shows the id --server-id-range chose, which is the one run reads
// with; a range past the largest id is refused.
func TestCheck_ServerIDRange(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--server-id", "7000000", "--server-id-range", "1000"}
	out, _, _ := run(t, append(global, "check", "--mode", "binlog")...)
	want := fmt.Sprintf("--server-id %d is unused", settings.SpreadServerID(7000000, 1000, host))
	if !strings.Contains(out, want) {
		t.Errorf("check output lacks %q:\n%s", want, out)
	}
	_, errOut, code := run(t, "--mysql-dsn", env.MariaDB.DSN(env.Database), "--server-id", "4294967295", "--server-id-range", "2", "check")
	if code == 0 || !strings.Contains(errOut, "goes past 4294967295") || !strings.Contains(errOut, "hint:") {
		t.Errorf("exit %d, stderr %q; want the range refused with a hint", code, errOut)
	}
}
