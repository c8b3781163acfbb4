package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestSecretFiles: the MySQL and Redis passwords come from files (Docker and
// Kubernetes secrets), never from the command line, and appear in no output.
func TestSecretFiles(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	rs := testsvc.StartRedis(t, testsvc.RedisOptions{})
	db := m.NewDatabase(t)
	const mysqlPW, redisPW = `my:s3cr#t@/x`, `re%d1s:p@ss`
	m.Exec(t, "CREATE USER 'relay'@'%' IDENTIFIED BY '"+mysqlPW+"'")
	m.Exec(t, "GRANT ALL ON `"+db+"`.* TO 'relay'@'%'")
	m.Exec(t, "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'relay'@'%'")
	rdb := rs.Client(t, rs.URL(0))
	if err := rdb.ConfigSet(context.Background(), "requirepass", redisPW).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mysqlFile, redisFile := write("mysql", mysqlPW+"\n"), write("redis", redisPW+"\r\n")
	dsn := m.UserDSN("relay", "", db)
	redisURL := "redis://" + rs.Addr() + "/0"
	global := []string{"--mysql-dsn", dsn, "--redis-url", redisURL}

	noSecrets := func(t *testing.T, outs ...string) {
		t.Helper()
		for _, o := range outs {
			if strings.Contains(o, mysqlPW) || strings.Contains(o, redisPW) {
				t.Errorf("a password appears in the output:\n%s", o)
			}
		}
	}
	t.Run("without the files both servers refuse", func(t *testing.T) {
		out, errOut, code := run(t, append(global, "check", "--mode", "poll")...)
		if code == 0 || !strings.Contains(out, "FAIL  "+"mysql server") || !strings.Contains(out, "FAIL  redis server") {
			t.Errorf("exit %d, want MySQL and Redis to fail without the passwords\n%s%s", code, out, errOut)
		}
	})
	t.Run("with the files", func(t *testing.T) {
		args := append(global, "--mysql-password-file", mysqlFile, "--redis-password-file", redisFile)
		if out, errOut, code := run(t, append(args, "schema", "apply")...); code != 0 {
			t.Fatalf("schema apply: exit %d\n%s%s", code, out, errOut)
		}
		out, errOut, code := run(t, append(args, "--log-level", "debug", "check", "--mode", "poll")...)
		if code != 0 || !strings.Contains(out, "PASS  mysql server") || !strings.Contains(out, "PASS  redis server") {
			t.Errorf("check: exit %d, want MySQL and Redis reached with the passwords from the files\n%s%s", code, out, errOut)
		}
		noSecrets(t, out, errOut)
		if strings.Contains(errOut, "chmod") {
			t.Errorf("a warning about files only the relay's user reads:\n%s", errOut)
		}
	})
	t.Run("files others may read are used, with a warning naming each", func(t *testing.T) {
		for _, f := range []string{mysqlFile, redisFile} {
			if err := os.Chmod(f, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(f, 0o600) })
		}
		args := append(global, "--mysql-password-file", mysqlFile, "--redis-password-file", redisFile)
		out, errOut, code := run(t, append(args, "check", "--mode", "poll")...)
		if code != 0 {
			t.Errorf("check: exit %d, want 0: a warning does not stop the relay\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"--mysql-password-file " + mysqlFile + " is accessible to other users (mode 0644)", "chmod 600 " + mysqlFile,
			"--redis-password-file " + redisFile + " is accessible", "chmod 600 " + redisFile} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
		noSecrets(t, out, errOut)
	})
	t.Run("a password in both places is an error", func(t *testing.T) {
		_, errOut, code := run(t, "--mysql-dsn", m.UserDSN("relay", mysqlPW, db), "--mysql-password-file", mysqlFile, "--redis-url", redisURL, "check")
		if code != exitUsage || !strings.Contains(errOut, "--mysql-password-file") {
			t.Errorf("exit %d, want %d naming --mysql-password-file\n%s", code, exitUsage, errOut)
		}
		noSecrets(t, errOut)
	})
	t.Run("a missing file is an error naming it", func(t *testing.T) {
		missing := filepath.Join(dir, "nope")
		_, errOut, code := run(t, append(global, "--redis-password-file", missing, "check")...)
		if code != exitUsage || !strings.Contains(errOut, missing) {
			t.Errorf("exit %d, want %d naming %s\n%s", code, exitUsage, missing, errOut)
		}
	})
}
