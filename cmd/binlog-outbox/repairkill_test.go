package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRepair_AgainAfterKilled follows issue 41's reproduction: repair
// --apply is killed while it appends, and run again at once. The killed
// run's lease names a process of this machine that is gone, so the second
// run takes it at once (no wait for its expiry, no refusal) and appends the
// rest, each row once.
func TestRepair_AgainAfterKilled(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	const rows = 20000
	relaytest.InsertOldEvents(t, env.DB, rec, "a", rows)
	env.RDB.Set(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table, "binlog", 0)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}

	p := relaytest.StartProcess(t, binary(t), append(global, "repair", "--apply")...)
	relaytest.WaitFor(t, 30*time.Second, "repair's first appends", func() bool { return env.RDB.XLen(ctx, "outbox:order").Val() > 0 })
	// Stopped first, so that what it appended can be counted before the kill.
	p.Signal(t, syscall.SIGSTOP)
	if n := env.RDB.XLen(ctx, "outbox:order").Val(); n >= rows {
		t.Fatalf("repair appended all %d rows before it could be killed: give it more rows", n)
	}
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)

	out, errOut, code := run(t, append(global, "repair", "--apply")...)
	if code != 0 || !strings.Contains(out, "stored the position") {
		t.Fatalf("repair --apply right after the kill: exit %d, want it to take the dead repair's lease and finish\n%s%s", code, out, errOut)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
