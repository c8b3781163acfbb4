package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestStatus_PositionStreamsGroups(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	for i := 0; i < 5; i++ {
		insertEvent(t, env.DB, rec, "a", i)
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	if err := env.RDB.XGroupCreate(ctx, "outbox:order", "billing", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{"outbox:order", ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}

	out, errOut, code := run(t, append(global, "status")...)
	t.Logf("status:\n%s", out)
	for _, want := range []string{"mode:      binlog", "position:  mysql-bin.", "behind:    ", "retention: ", "stream:    outbox:order, 5 entries",
		"group:   billing, 1 consumers, pending 2, lag 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	if code != 0 || t.Failed() {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = run(t, append(global, "status", "--json")...)
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if r.Mode != "binlog" || r.Position == nil || r.Position.File == "" || r.Position.BytesBehind == nil || r.Server.File == "" {
		t.Errorf("status --json: %+v, want the mode, the position and how far behind it is", r)
	}
	var order *statusStream
	for i := range r.Streams {
		if r.Streams[i].Key == "outbox:order" {
			order = &r.Streams[i]
		}
	}
	if order == nil || order.Length != 5 || len(order.Groups) != 1 || order.Groups[0].Pending != 2 || order.Groups[0].Lag != 3 {
		t.Errorf("status --json streams: %+v, want outbox:order with 5 entries and group billing with 2 pending, lag 3", r.Streams)
	}
}

// TestStatus_SecondsBehindAndRetentionHeadroom: a position behind by one
// transaction shows its age, and, once the server rotated away from the
// position's file, how long until the file expires.
func TestStatus_SecondsBehindAndRetentionHeadroom(t *testing.T) {
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-expire-logs-seconds=7200"}})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "position", "set", "--start-from", "now")...); code != 0 {
		t.Fatalf("position set: exit %d\n%s%s", code, out, errOut)
	}
	status := func() statusReport {
		t.Helper()
		out, errOut, code := run(t, append(global, "status", "--json")...)
		var r statusReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Position == nil {
			t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
		}
		return r
	}
	r := status()
	if p := r.Position; p.BytesBehind == nil || *p.BytesBehind != 0 || p.SecondsBehind == nil || *p.SecondsBehind != 0 || p.RetentionSeconds != nil ||
		!strings.HasPrefix(p.Retention, "not at risk") {
		t.Errorf("caught up: %+v; want 0 bytes and 0 seconds behind, in the current file", *p)
	}

	insertEvent(t, env.DB, relaytest.NewProduced(), "a", 0)
	time.Sleep(1100 * time.Millisecond) // binlog times are in whole seconds
	srv.Exec(t, "FLUSH BINARY LOGS")
	r = status()
	p := r.Position
	if p.BytesBehind == nil || *p.BytesBehind == 0 || p.SecondsBehind == nil || *p.SecondsBehind < 1 || *p.SecondsBehind > 60 {
		t.Errorf("behind: %+v; want bytes behind and the age of the inserted transaction", *p)
	}
	if p.RetentionSeconds == nil || *p.RetentionSeconds > 7200 || *p.RetentionSeconds < 7200-60 || !strings.Contains(p.Retention, "left") {
		t.Errorf("rotated: retention %v %q; want about 7200 seconds left", p.RetentionSeconds, p.Retention)
	}
	out, errOut, code := run(t, append(global, "status")...)
	t.Logf("status:\n%s", out)
	for _, want := range []string{"behind:    ", " bytes of binlog, ", "retention: ", " left: mysql-bin."} {
		if !strings.Contains(out, want) || code != 0 {
			t.Errorf("status output (exit %d) lacks %q\n%s", code, want, errOut)
		}
	}
	// The file was last written a moment ago: the headroom is the whole
	// expiry, less the seconds the test took (whole seconds: 2h0m0s or
	// 1h59m...).
	if !strings.Contains(out, "retention: 2h0m0s left") && !strings.Contains(out, "retention: 1h59m") {
		t.Errorf("status output's retention is not about 2h:\n%s", out)
	}
}
