package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/relaytest"
	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
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

func TestBinlogBehind(t *testing.T) {
	files := []binlogFile{{"b.000001", 1000}, {"b.000002", 500}, {"b.000003", 300}}
	tests := []struct {
		name      string
		file      string
		pos       uint32
		curFile   string
		curPos    uint32
		wantBytes int64
		wantIdx   int
	}{
		{"caught up", "b.000003", 300, "b.000003", 300, 0, 2},
		{"same file", "b.000003", 100, "b.000003", 300, 200, 2},
		{"two files back", "b.000001", 900, "b.000003", 250, 100 + 500 + 250, 0},
		{"purged", "b.000000", 4, "b.000003", 300, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, idx := binlogBehind(files, tt.file, tt.pos, tt.curFile, tt.curPos)
			if got != tt.wantBytes || idx != tt.wantIdx {
				t.Errorf("binlogBehind(%s:%d) = %d, %d; want %d, %d", tt.file, tt.pos, got, idx, tt.wantBytes, tt.wantIdx)
			}
		})
	}
}
