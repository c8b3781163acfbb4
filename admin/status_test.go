package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// status runs Status on env's table.
func status(t *testing.T, env *relaytest.Env) StatusReport {
	t.Helper()
	r, err := Status(context.Background(), StatusOptions{
		DB: env.DB, Database: env.Database, Table: env.Table, Redis: env.RDB, Keys: keys(env), Streams: streams(t),
		Dumper: lag.Dumper{Addr: env.MariaDB.Addr(), User: env.MariaDB.User(), Password: env.MariaDB.Password()},
	})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return r
}

func TestStatus_PositionStreamsGroups(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	for i := 0; i < 5; i++ {
		relaytest.InsertEvent(t, env.DB, rec, "a", i)
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	if err := env.RDB.XGroupCreate(ctx, "outbox:order", "billing", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{"outbox:order", ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	r := status(t, env)
	if r.Mode != "binlog" || r.Position == nil || !strings.HasPrefix(r.Position.File, "mysql-bin.") || r.Position.BytesBehind == nil ||
		r.Server.File == "" || r.Position.Retention == "" || r.Table != env.Database+".outbox" {
		t.Errorf("status: %+v, want the mode, the position and how far behind it is", r)
	}
	var order *StreamStatus
	for i := range r.Streams {
		if r.Streams[i].Key == "outbox:order" {
			order = &r.Streams[i]
		}
	}
	if order == nil || order.Length != 5 || len(order.Groups) != 1 || order.Groups[0].Name != "billing" || order.Groups[0].Consumers != 1 ||
		order.Groups[0].Pending != 2 || order.Groups[0].Lag != 3 {
		t.Errorf("status streams: %+v, want outbox:order with 5 entries and group billing with 1 consumer, 2 pending, lag 3", r.Streams)
	}
	if r.Lease != nil || r.Slots != nil {
		t.Errorf("status: lease %+v, slots %+v; want neither", r.Lease, r.Slots)
	}
}

// TestStatus_SecondsBehindAndRetentionHeadroom: a position behind by one
// transaction shows its age, and, once the server rotated away from the
// position's file, how long until the file expires.
func TestStatus_SecondsBehindAndRetentionHeadroom(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-expire-logs-seconds=7200"}})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	reader, sink := newReader(t, env)
	if _, err := PositionSet(context.Background(), PositionSetOptions{PositionOptions: PositionOptions{Redis: env.RDB, Sink: sink},
		Reader: reader, Start: position.Start{Kind: position.StartNow}}); err != nil {
		t.Fatalf("position set: %v", err)
	}
	r := status(t, env)
	if p := r.Position; p == nil || p.BytesBehind == nil || *p.BytesBehind != 0 || p.SecondsBehind == nil || *p.SecondsBehind != 0 || p.RetentionSeconds != nil ||
		!strings.HasPrefix(p.Retention, "not at risk") {
		t.Fatalf("caught up: %+v; want 0 bytes and 0 seconds behind, in the current file", p)
	}

	relaytest.InsertEvent(t, env.DB, relaytest.NewProduced(), "a", 0)
	time.Sleep(1100 * time.Millisecond) // binlog times are in whole seconds
	srv.Exec(t, "FLUSH BINARY LOGS")
	p := status(t, env).Position
	if p.BytesBehind == nil || *p.BytesBehind == 0 || p.SecondsBehind == nil || *p.SecondsBehind < 1 || *p.SecondsBehind > 60 {
		t.Errorf("behind: %+v; want bytes behind and the age of the inserted transaction", *p)
	}
	// The file was last written a moment ago: the headroom is the whole
	// expiry, less the seconds the test took.
	if p.RetentionSeconds == nil || *p.RetentionSeconds > 7200 || *p.RetentionSeconds < 7200-60 || !strings.Contains(p.Retention, " left: mysql-bin.") ||
		!strings.HasPrefix(p.Retention, "2h0m0s left") && !strings.HasPrefix(p.Retention, "1h59m") {
		t.Errorf("rotated: retention %v %q; want about 7200 seconds left", p.RetentionSeconds, p.Retention)
	}
}
