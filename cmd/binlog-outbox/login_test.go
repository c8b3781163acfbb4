package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestLogin_AnonymousAccountOutranksUser follows issue 41's reproduction of
// a new install: an anonymous account ”@'localhost' (as
// mariadb-install-db leaves it) outranks 'relay'@'%' for connections from
// the same host, and MySQL refuses the relay's login with error 1045 although
// the password is right. Every command fails with a hint that names the
// likely causes, this one with its DROP USER; after it, the login works.
func TestLogin_AnonymousAccountOutranksUser(t *testing.T) {
	// Its MariaDB is its own: it resolves client names, as a default
	// install does, and gets an anonymous account.
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--skip-name-resolve=0"}})
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t))
	m.Exec(t,
		"CREATE USER 'relay'@'%' IDENTIFIED BY 's3cret-9'",
		"GRANT ALL ON `"+env.Database+"`.* TO 'relay'@'%'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, RELOAD ON *.* TO 'relay'@'%'",
		"CREATE USER ''@'localhost'",
	)
	global := []string{"--mysql-dsn", m.UserDSN("relay", "s3cret-9", env.Database), "--redis-url", env.RedisURL}
	commands := [][]string{
		{"schema", "apply"},
		{"check", "--mode", "binlog"},
		{"status"},
		{"verify"},
		{"repair"},
		{"cleanup", "--older-than", "7d"},
		{"position", "show"},
	}
	for _, args := range commands {
		// check reports the refusal on a FAIL line (stdout), the others
		// on stderr; each ends with the hint.
		out, errOut, code := run(t, append(append([]string{}, global...), args...)...)
		if code == 0 {
			t.Fatalf("%s as relay with an anonymous account in the way: exit 0, want a refused login\n%s", strings.Join(args, " "), errOut)
		}
		loginHint(t, strings.Join(args, " "), out+errOut)
	}
	_, runErr, code, stopped := runUntil(t, 60*time.Second, append(append([]string{}, global...), "run", "--mode", "binlog")...)
	if !stopped || code == 0 {
		t.Fatalf("run: exit %d (stopped %v), want a refused login\n%s", code, stopped, runErr)
	}
	loginHint(t, "run", runErr)

	// The fix as the hint gives it.
	m.Exec(t, "DROP USER ''@'localhost'")
	if out, errOut, code := run(t, append(append([]string{}, global...), "schema", "apply")...); code != 0 {
		t.Fatalf("schema apply after DROP USER: exit %d\n%s%s", code, out, errOut)
	}
}

// loginHint wants the error of a refused login, and a hint that names the
// causes in order: the password first, the anonymous account with its fix.
func loginHint(t *testing.T, what, stderr string) {
	t.Helper()
	if !strings.Contains(stderr, "Access denied for user 'relay'") {
		t.Errorf("%s: no refused login in\n%s", what, stderr)
		return
	}
	hint := hintLine(stderr)
	password, anonymous := strings.Index(hint, "password in --mysql-dsn"), strings.Index(hint, "DROP USER ''@'localhost'")
	if password < 0 || anonymous < password || strings.Contains(hint, "CREATE privilege") {
		t.Errorf("%s: hint %q; want the password, then the anonymous account's DROP USER", what, hint)
	}
}

// TestCheckRun_UnixSocketInBinlogMode: a DSN over the server's unix socket
// works for poll mode, but binlog mode reads over TCP: check fails and run
// stops, both with the hint that says how to write the DSN.
func TestCheckRun_UnixSocketInBinlogMode(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	m.RequirePrivate(t, "connect over the server's unix socket")
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t))
	sock := filepath.Join(filepath.Dir(m.DataDir()), "mysqld.sock")
	global := []string{"--mysql-dsn", m.User() + ":" + m.Password() + "@unix(" + sock + ")/" + env.Database, "--redis-url", env.RedisURL}
	hint := sameRefusal(t, global, []string{"--mode", "binlog"})
	if !strings.Contains(hint, "tcp(127.0.0.1:3306)") || !strings.Contains(hint, "--mode poll") {
		t.Errorf("hint %q, want the TCP form of the DSN and poll mode", hint)
	}
	if out, errOut, code := run(t, append(global, "check", "--mode", "poll")...); code != 0 {
		t.Errorf("check --mode poll over the socket: exit %d, want 0\n%s%s", code, out, errOut)
	}
}
