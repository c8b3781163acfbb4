package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestCleanup_WithoutDeleteGrant follows issue 41's reproduction: cleanup
// as a user with the relay's grants (SELECT, no DELETE) fails with MySQL's
// error 1142 and a hint naming the grant, and deletes nothing.
func TestCleanup_WithoutDeleteGrant(t *testing.T) {
	// Its database, Redis database and user are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	user := fmt.Sprintf("nodel%d", time.Now().UnixNano()%1e6)
	srv.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT, UPDATE ON `"+env.Database+"`.* TO '"+user+"'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER '"+user+"'@'%'") })
	insertOldEvents(t, env, relaytest.NewProduced(), "old", 3)
	// Poll mode's rows marked sent: cleanup deletes them without waiting
	// for a relay.
	env.RDB.Set(context.Background(), "binlog-outbox:mode:"+env.Database+"."+env.Table, "poll", 0)
	if _, err := env.DB.Exec("UPDATE outbox SET sent_at = NOW(6)"); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", srv.UserDSN(user, "pw", env.Database), "--redis-url", env.RedisURL}
	_, errOut, code := run(t, append(global, "cleanup", "--older-than", "7d")...)
	if code != exitFailure || !strings.Contains(errOut, "Error 1142") {
		t.Fatalf("cleanup without the DELETE grant: exit %d, want 1 and the refusal\n%s", code, errOut)
	}
	if hint := hintLine(errOut); !strings.Contains(hint, "GRANT DELETE ON "+env.Database+".outbox") {
		t.Errorf("hint %q does not name the grant", hint)
	}
	if n := countRows(t, env, oldRows); n != 3 {
		t.Errorf("%d rows left, want all 3", n)
	}
}

// TestRun_MetricsAddrInUse follows issue 41's reproduction: run with a
// --metrics-addr another process listens on stops with a hint.
func TestRun_MetricsAddrInUse(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, m := range []string{"binlog", "poll"} {
		// A table of its own per mode: the first run records its mode.
		env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
		global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
		_, errOut, code, stopped := runUntil(t, 60*time.Second, append(global, "run", "--mode", m, "--metrics-addr", ln.Addr().String())...)
		if !stopped || code == 0 || !strings.Contains(errOut, "address already in use") {
			t.Fatalf("run --mode %s on a port in use: exit %d (stopped %v), want a refusal\n%s", m, code, stopped, relaytest.TailLines(errOut, 10))
		}
		if hint := hintLine(errOut); !strings.Contains(hint, "another process listens on that port") {
			t.Errorf("run --mode %s: hint %q, want what to do", m, hint)
		}
	}
}

// TestStatus_RedisDownHint follows issue 41's reproduction: status with
// Redis down said "the relay retries", where a relay starting then exits 1.
// Its hint says what the operator does instead.
func TestStatus_RedisDownHint(t *testing.T) {
	// Its database is its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d/0", closedPort(t))}
	_, errOut, code := run(t, append(global, "status")...)
	hint := hintLine(errOut)
	if code == 0 || !strings.Contains(hint, "is unreachable") || strings.Contains(hint, "the relay retries") {
		t.Errorf("status with Redis down: exit %d, hint %q; want one that says to start Redis or fix --redis-url\n%s", code, hint, errOut)
	}
}
