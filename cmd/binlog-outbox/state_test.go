package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The relay's state in Redis against an operator's mistakes and Redis
// losing data: each test follows the steps that lost or doubled events
// before the relay kept a record of itself beside its position.

// storedPosition decodes the position stored at key.
func storedPosition(t *testing.T, env *relaytest.Env, key string) position.Binlog {
	t.Helper()
	raw, err := env.Streams().Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatalf("stored position %q: %v", raw, err)
	}
	return b
}

// TestRun_IdleRestartKeepsThePosition: a relay restarted on a server that
// writes nothing stored, within a heartbeat, the file being written at
// offset 4 (the rotate a GTID dump starts with), and looked megabytes and
// minutes behind until the next write. A quiet system must look quiet.
func TestRun_IdleRestartKeepsThePosition(t *testing.T) {
	t.Parallel()
	// A server of its own: nothing else writes to its binlog.
	env := relaytest.NewEnv(t, testsvc.StartMariaDB(t, testsvc.MariaDBOptions{}), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	for i := range 20 {
		relaytest.InsertEvent(t, env.DB, rec, "order", i)
	}
	// Lots of bytes before the relay's position, in the same file.
	relaytest.InsertOldEvents(t, env.DB, rec, "filler", 200)
	p := startRelay(t, env, "--start-from", "earliest", "--heartbeat", "200ms")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	relaytest.WaitFor(t, 10*time.Second, "a position past the last row", func() bool {
		return storedPosition(t, env, posKey(env)).Pos > 4
	})
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exit %d", code)
	}
	before := storedPosition(t, env, posKey(env))

	p = startRelay(t, env, "--heartbeat", "200ms")
	defer p.Signal(t, syscall.SIGTERM)
	if !p.Said("reading binlog", 20*time.Second) {
		t.Fatal("the relay did not start reading")
	}
	// Several heartbeats and idle checkpoints.
	time.Sleep(2 * time.Second)
	after := storedPosition(t, env, posKey(env))
	if after.File != before.File || after.Pos != before.Pos || after.GTIDSet != before.GTIDSet {
		t.Fatalf("an idle restart moved the position from %s to %s", before, after)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "status", "--json")...)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	var st struct {
		Position struct {
			BytesBehind *int64 `json:"bytes_behind"`
		} `json:"position"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Position.BytesBehind == nil || *st.Position.BytesBehind != 0 {
		t.Fatalf("status of an idle relay: bytes behind %v, want 0\n%s", st.Position.BytesBehind, strings.TrimSpace(out))
	}
}
