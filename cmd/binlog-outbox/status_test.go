package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestStatus_Output: the text and the JSON of status, and its exit code.
// What status reads is tested in package admin.
func TestStatus_Output(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "position", "set", "--start-from", "now")...); code != 0 {
		t.Fatalf("position set: exit %d\n%s%s", code, out, errOut)
	}
	env.RDB.Set(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table, "binlog", 0)
	insertEvent(t, env.DB, relaytest.NewProduced(), "a", 0)
	for i := 0; i < 5; i++ {
		env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"outbox_id", "1"}})
	}
	if err := env.RDB.XGroupCreate(ctx, "outbox:order", "billing", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{"outbox:order", ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}

	first := env.RDB.XRangeN(ctx, "outbox:order", "-", "+", 1).Val()[0].ID
	time.Sleep(20 * time.Millisecond)

	out, errOut, code := run(t, append(global, "status", "--group-idle-threshold", "10ms")...)
	t.Logf("status:\n%s", out)
	for _, want := range []string{"table:     " + env.Database + ".outbox\n", "mode:      binlog (binlog-outbox:mode:", "server:    ", ", binlog at mysql-bin.",
		"position:  mysql-bin.", ", written ", "behind:    ", " bytes of binlog, ", "retention: ", "lease:     none held at ",
		"stream:    outbox:order, 5 entries\n", "  group:   billing, 1 consumers, pending 2, lag 3, last delivered ",
		"\n    oldest pending: " + first + ", 1 deliveries, appended ", " ago, last delivered to c1 ",
		"\n    idle consumers (over 10ms): c1 ", "\n    holds back --trim acked: keeps " + first + " and later, ",
		"\nwarning: group billing of outbox:order holds back --trim acked from " + first + " (", " old) and none of its 1 consumers read for over 10ms: "} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	if code != 0 || t.Failed() {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = run(t, append(global, "status", "--json", "--group-idle-threshold", "10ms")...)
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	for _, key := range []string{`"mode": "binlog"`, `"position": {`, `"bytes_behind": `, `"retention_headroom_seconds": `, `"lease": null`, `"groups": [`, `"lag": 3`,
		`"oldest_pending": {`, `"deliveries": 1,`, `"idle_consumers": [`, `"holds_back_trim": true`, `"trim_held_id": "` + first + `"`} {
		if !strings.Contains(out, key) {
			t.Errorf("status --json lacks %s\n%s", key, out)
		}
	}
	if r.Position == nil || len(r.Streams) != 1 || r.Streams[0].Length != 5 {
		t.Errorf("status --json: %+v, want the position and outbox:order", r)
	}
}
