package admin

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestStatus_GroupHealth: per group, the entries not yet delivered after an
// XDEL (where XINFO GROUPS lag is unknown), the oldest pending entry and how
// often it was delivered after claims, the idle consumers, and which group
// holds back --trim acked; a group nobody reads that holds it back is
// warned of. The JSON carries the same.
func TestStatus_GroupHealth(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	c := env.RDB
	old := time.Now().Add(-time.Hour).UnixMilli()
	var ids []string
	for i := range 6 {
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", ID: fmt.Sprintf("%d-0", old+int64(i)), Values: []string{"outbox_id", fmt.Sprint(i)}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:invoice", ID: fmt.Sprintf("%d-0", old), Values: []string{"outbox_id", "9"}})
	for _, g := range [][2]string{{"outbox:order", "billing"}, {"outbox:order", "audit"}, {"outbox:invoice", "dead"}} {
		if err := c.XGroupCreate(ctx, g[0], g[1], "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// audit is done with everything; billing's c1 read 2 entries, the
	// first claimed 3 times by c2, and an entry after them is deleted.
	res := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "a1", Streams: []string{"outbox:order", ">"}, Count: 10, Block: -1}).Val()
	for _, m := range res[0].Messages {
		c.XAck(ctx, "outbox:order", "audit", m.ID)
	}
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{"outbox:order", ">"}, Count: 2, Block: -1})
	for range 3 {
		c.XClaim(ctx, &redis.XClaimArgs{Stream: "outbox:order", Group: "billing", Consumer: "c2", Messages: []string{ids[0]}})
	}
	c.XDel(ctx, "outbox:order", ids[3])
	t.Logf("XINFO GROUPS after the XDEL (lag -1: none): %+v", c.XInfoGroups(ctx, "outbox:order").Val())
	// c2 reads 5 s after c1, and the idle threshold lies between them with
	// seconds to spare on either side: 200 ms after a 300 ms pause failed
	// on a loaded machine, where status read the consumers' idle times
	// seconds after c2's read.
	time.Sleep(5 * time.Second)
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c2", Streams: []string{"outbox:order", "0"}, Count: 1, Block: -1})
	const threshold = 3 * time.Second

	r, err := Status(ctx, StatusOptions{
		DB: env.DB, Database: env.Database, Table: env.Table, Redis: env.RDB, Keys: keys(env), Streams: streams(t),
		Dumper: lag.Dumper{Addr: env.MariaDB.Addr(), User: env.MariaDB.User(), Password: env.MariaDB.Password()}, GroupIdleThreshold: threshold,
	})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	groups := map[string]GroupStatus{}
	for _, s := range r.Streams {
		for _, g := range s.Groups {
			groups[g.Name] = g
		}
	}
	b, a, d := groups["billing"], groups["audit"], groups["dead"]
	if p := b.OldestPending; b.Lag != 3 || b.Pending != 2 || p == nil || p.ID != ids[0] || p.Consumer != "c2" || p.Deliveries != 5 || p.AgeSeconds < 3600 || p.AgeSeconds > 3700 {
		t.Errorf("billing: %+v, oldest pending %+v; want lag 3, 2 pending, the oldest %s at c2 delivered 5 times an hour ago", b, p, ids[0])
	}
	if len(b.IdleConsumers) != 1 || b.IdleConsumers[0].Name != "c1" || b.IdleConsumers[0].IdleSeconds < threshold.Seconds() {
		t.Errorf("billing idle consumers: %+v, want c1 alone", b.IdleConsumers)
	}
	if !b.HoldsBackTrim || b.TrimHeldID != ids[0] || b.TrimHeldAgeSeconds < 3600 {
		t.Errorf("billing: holds back %v from %s (%v s); want it to hold back trimming from %s", b.HoldsBackTrim, b.TrimHeldID, b.TrimHeldAgeSeconds, ids[0])
	}
	if a.HoldsBackTrim || a.Lag != 0 || a.Pending != 0 || a.OldestPending != nil {
		t.Errorf("audit: %+v; want nothing pending, undelivered or held back", a)
	}
	if !d.HoldsBackTrim || d.Lag != 1 || d.Consumers != 0 {
		t.Errorf("dead: %+v; want 1 undelivered, no consumer, trimming held back", d)
	}
	var warned []string
	for _, w := range r.Warnings {
		if strings.HasPrefix(w, "group ") {
			warned = append(warned, w)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "group dead of outbox:invoice holds back --trim acked") || !strings.Contains(warned[0], "XGROUP DESTROY outbox:invoice dead") {
		t.Errorf("warnings %q; want one of the group dead, nobody reads it (billing's c2 read a moment ago)", warned)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"holds_back_trim":true`, `"holds_back_trim":false`, `"oldest_pending":{"id":"` + ids[0] + `","consumer":"c2","deliveries":5,`,
		`"idle_consumers":[{"name":"c1","idle_seconds":`, `"trim_held_id":"` + ids[0] + `"`, `"group_idle_threshold_seconds":3`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON lacks %s:\n%s", want, out)
		}
	}
}
