package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRepair_ExitCodes: the dry run exits 1 with the missing rows listed
// and writes nothing, --apply appends them and exits 0, a dry run then
// exits 0, a usage error 2. What repair proves is tested in package admin.
func TestRepair_ExitCodes(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	var mids []string
	for i := 0; i < 3; i++ {
		mids = append(mids, insertEvent(t, env.DB, rec, "a", i))
	}
	env.RDB.Set(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table, "binlog", 0)
	for i, mid := range mids[:2] {
		env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"outbox_id", strconv.Itoa(i + 1), "message_id", mid}})
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "repair")...)
	if code != 1 || !strings.Contains(out, "missing:    1") || !strings.Contains(out, "row id=3 message_id="+mids[2]) || !strings.Contains(out, "dry run: nothing written") {
		t.Fatalf("repair dry run: exit %d, want 1 and the missing row\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append(global, "repair", "--json")...)
	var r admin.RepairReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.Missing != 1 || r.Applied || len(r.Examples) != 1 {
		t.Fatalf("repair --json: exit %d, %+v, %v\n%s%s", code, r, err, out, errOut)
	}
	if n := env.RDB.XLen(ctx, "outbox:order").Val(); n != 2 {
		t.Fatalf("the dry run wrote: %d entries, want 2", n)
	}
	if _, errOut, code := run(t, append(global, "repair", "--chunk-rows", "0")...); code != 2 {
		t.Fatalf("repair --chunk-rows 0: exit %d, want 2\n%s", code, errOut)
	}
	out, errOut, code = run(t, append(global, "repair", "--apply")...)
	if code != 0 || !strings.Contains(out, "appended 1 entries; stored the position") {
		t.Fatalf("repair --apply: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if out, errOut, code = run(t, append(global, "repair")...); code != 0 || !strings.Contains(out, "missing:    0") {
		t.Fatalf("repair after --apply: exit %d, want 0\n%s%s", code, out, errOut)
	}
	// The test's own entries carry ids only; the repaired one is the relay's.
	entries := relaytest.ReadAll(ctx, t, env.RDB, "outbox:")
	if len(entries) != 3 || field(entries[2], "message_id") != mids[2] || field(entries[2], "aggregate_id") != "a" || field(entries[2], "event_type") != "order.changed" {
		t.Fatalf("entries after repair --apply: %+v, want the third row appended as run appends it", entries)
	}
}
