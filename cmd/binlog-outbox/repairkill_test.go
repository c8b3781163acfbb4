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
// --apply is killed while it appends, and run again at once. The second run
// is refused while the killed one's lease lives, and says that its holder
// is no longer running and when to retry; retried then, it appends the rest,
// each row once.
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
	if code == 0 {
		t.Fatalf("repair --apply right after the kill: exit 0, want a refusal\n%s%s", out, errOut)
	}
	if !strings.Contains(errOut, "no longer running (no process") {
		t.Errorf("the refusal does not say the earlier repair is gone:\n%s", errOut)
	}
	if hint := hintLine(errOut); !strings.Contains(hint, "run repair --apply again in") {
		t.Errorf("hint %q does not say when to retry", hint)
	}
	relaytest.WaitFor(t, 15*time.Second, "the killed repair's lease to expire", func() bool {
		out, errOut, code = run(t, append(global, "repair", "--apply")...)
		return code == 0
	})
	if !strings.Contains(out, "stored the position") {
		t.Fatalf("repair --apply once the lease expired:\n%s%s", out, errOut)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
