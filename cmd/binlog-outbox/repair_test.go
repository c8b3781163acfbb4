package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
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
	if code != 1 || !strings.Contains(out, "missing:    1") || !strings.Contains(out, "row id=3 message_id="+mids[2]) || !strings.Contains(out, "dry run: nothing written") ||
		!strings.Contains(errOut, "hint: with every relay of the position stopped, run repair --apply") {
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
	for _, args := range [][]string{{"--chunk-rows", "0"}, {"--apply", "--snapshot", "later"}, {"--apply", "--accept-foreign", "-1"}, {"--on-sent", "keep"}} {
		if _, errOut, code := run(t, append(append(global, "repair"), args...)...); code != 2 || !strings.Contains(errOut, "\nhint: ") {
			t.Fatalf("repair %s: exit %d, want 2 and a hint\n%s", strings.Join(args, " "), code, errOut)
		}
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

// TestRepair_FailoverLostTransactions: the primary commits rows it never
// ships (replication stopped) and the relay appends them; the replica is
// promoted and producers write there. run refuses the stored GTID set;
// repair reports the foreign entries with the rows the new primary has and
// the streams lack, and --apply refuses naming them, writing nothing, until
// --accept-foreign gives their count. Then it appends the missing rows while
// producers write, the foreign entries stay, and run goes on from the
// position repair stored on the new primary: every row it has once.
func TestRepair_FailoverLostTransactions(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	f := newFailoverEnv(t)
	ctx := context.Background()
	rec, lost := relaytest.NewProduced(), relaytest.NewProduced()
	p := startRelay(t, f.Env, "--mode", "binlog", "--start-from", f.primary.GTIDBinlogPos(t))
	waitStoredPosition(t, f.Env, posKey(f.Env))
	produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	f.replica.WaitReplicated(t, f.primary)
	f.replica.Exec(t, "STOP SLAVE")
	produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, lost)()
	relaytest.WaitDelivered(t, f.Env, lost, 60*time.Second)
	stopRelay(t, p)
	f.primary.Kill(t)
	f.replica.Promote(t)
	newPrimary := f.replica.Open(t, f.Database)
	produce(t, newPrimary, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)()

	p = startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog")
	if code := p.Wait(t, 60*time.Second); code == 0 || !strings.Contains(p.Out.String(), "repair --apply --accept-foreign") {
		t.Fatalf("run on the promoted replica: exit %d, want a refusal pointing to repair:\n%s", code, relaytest.TailLines(p.Out.String(), 10))
	}
	global := []string{"--mysql-dsn", f.replica.DSN(f.Database), "--redis-url", f.RedisURL}
	out, errOut, code := run(t, append(global, "repair", "--json")...)
	var r admin.RepairReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.Foreign != len(lost.Committed) || r.Missing == 0 || len(r.Foreigns) == 0 {
		t.Fatalf("repair dry run on the promoted replica: exit %d, %+v, %v; want %d foreign entries and missing rows\n%s", code, r, err, len(lost.Committed), errOut)
	}
	if _, ok := lost.Committed[r.Foreigns[0].MessageID]; !ok {
		t.Errorf("foreign example %+v is not one of the lost rows", r.Foreigns[0])
	}
	entries := relaytest.CountEntries(ctx, f.RDB, "outbox:")
	pos := f.RDB.Get(ctx, posKey(f.Env)).Val()
	want := "--accept-foreign " + strconv.Itoa(r.Foreign)
	for _, args := range [][]string{{"repair", "--apply"}, {"repair", "--apply", "--accept-foreign", strconv.Itoa(r.Foreign + 1)}} {
		out, errOut, code = run(t, append(global, args...)...)
		if code != 1 || !strings.Contains(errOut, "entries name rows the table does not have") || !strings.Contains(errOut, r.Foreigns[0].MessageID) || !strings.Contains(errOut, want) {
			t.Fatalf("%s: exit %d, want a refusal naming the foreign entries and %q\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		if n := relaytest.CountEntries(ctx, f.RDB, "outbox:"); n != entries || f.RDB.Get(ctx, posKey(f.Env)).Val() != pos {
			t.Fatalf("%s wrote: %d entries, want %d, or moved the position", strings.Join(args, " "), n, entries)
		}
	}

	wait := produce(t, newPrimary, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100, Pause: 2 * time.Millisecond}, rec)
	out, errOut, code = run(t, append(global, "repair", "--apply", "--accept-foreign", strconv.Itoa(r.Foreign))...)
	if code != 0 || !strings.Contains(out, "appended") || !strings.Contains(out, "foreign entries left in the streams") {
		t.Fatalf("repair --apply --accept-foreign: exit %d, want 0\n%s%s", code, out, errOut)
	}
	wait()
	p = startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog")
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	stopRelay(t, p)
	skip := map[string]bool{}
	for id := range lost.Committed {
		skip[id] = true
	}
	relaytest.Check(ctx, t, f.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true, Skip: skip})
	for _, e := range relaytest.ReadAll(ctx, t, f.RDB, "outbox:") {
		delete(skip, field(e, "message_id"))
	}
	if len(skip) != 0 {
		t.Errorf("%d of the lost rows' entries are gone; repair never deletes them", len(skip))
	}
	t.Logf("%d rows on the new primary once, %d foreign entries kept", len(rec.Committed), len(lost.Committed))
}

// TestRepair_RedisCluster: on a Redis Cluster, with streams over many hash
// slots, repair --apply appends the rows the relay never read while
// producers write, stores the position and deletes the slot positions; the
// relay then goes on from there: every row once.
func TestRepair_RedisCluster(t *testing.T) {
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	key := posKey(env)
	rec := relaytest.NewProduced()
	streamArgs := []string{"--stream", "outbox:{aggregate_type}:{partition}", "--partitions", strconv.Itoa(clusterPartitions)}
	relayArgs := append([]string{"--mode", "binlog", "--max-batch-events", "50"}, streamArgs...)
	p := startRelay(t, env, relayArgs...)
	waitStoredPosition(t, env, key)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	stopRelay(t, p)
	const lost = 1200
	relaytest.InsertOldEvents(t, env.DB, rec, "lost", lost)

	repair := append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--redis-cluster", "repair"}, streamArgs...)
	out, errOut, code := run(t, append(repair, "--json")...)
	var r admin.RepairReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.Missing != lost {
		t.Fatalf("repair dry run on the cluster: exit %d, %+v, %v; want %d missing\n%s%s", code, r, err, lost, out, errOut)
	}
	wait := produce(t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100, Pause: 2 * time.Millisecond}, rec)
	time.Sleep(100 * time.Millisecond)
	out, errOut, code = run(t, append(repair, "--apply", "--json")...)
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || !r.Applied || r.Appended < lost || r.Appended != r.Missing {
		t.Fatalf("repair --apply on the cluster: exit %d, %+v, %v; want at least %d appended\n%s", code, r, err, lost, errOut)
	}
	cp, err := redisadmin.ReadClusterPositions(ctx, env.Cluster, key)
	if err != nil || len(cp.Slots) != 0 || cp.Base == nil {
		t.Fatalf("after repair --apply: %d slot positions, position %q, %v; want the position key alone", len(cp.Slots), cp.Base, err)
	}
	wait()
	p = startRelay(t, env, relayArgs...)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	stopRelay(t, p)
	n := relaytest.Check(ctx, t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true, StreamOf: clusterStream})
	t.Logf("repair --apply on the cluster: %d rows compared, %d appended; %d entries at the end", r.Rows, r.Appended, n)
}

// TestRepair_MarkedPositionRefused: the position as an interrupted repair
// --apply leaves it, marked as the repair's. check fails naming the holder
// (in auto mode too: no fallback to polling), run refuses it with exit 1
// and the way on (with --lease=false as with a lease) and appends nothing,
// status and position show say who holds it; repair --apply finishes from
// it and clears it, and run goes on: every row once.
func TestRepair_MarkedPositionRefused(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog", "--lease=false")
	waitStoredPosition(t, env, posKey(env))
	produce(t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5}, rec)()
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	const lost = 20
	relaytest.InsertOldEvents(t, env.DB, rec, "lost", lost)
	b, err := position.Decode([]byte(env.RDB.Get(ctx, posKey(env)).Val()))
	if err != nil {
		t.Fatal(err)
	}
	const holder = "repair elsewhere/42"
	env.RDB.Set(ctx, posKey(env), b.HeldBy(holder, time.Now()).Encode(), 0)
	entries := relaytest.CountEntries(ctx, env.RDB, "outbox:")

	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	for _, m := range []string{"binlog", "auto"} {
		out, errOut, code := run(t, append(global, "check", "--mode", m)...)
		if code == 0 || !strings.Contains(out, "position held by repair") || !strings.Contains(out, holder) || !strings.Contains(out, "repair --apply") {
			t.Errorf("check --mode %s on the marked position: exit %d, want a failure naming the holder and the way on\n%s%s", m, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"--mode", "binlog", "--lease=false"}, {"--mode", "auto"}} {
		p := startRelay(t, env, args...)
		out := func() string { return p.Out.String() }
		if code := p.Wait(t, 60*time.Second); code != 1 || !strings.Contains(out(), "a repair holds the stored position") || !strings.Contains(out(), holder) || !strings.Contains(out(), "repair --apply") {
			t.Errorf("run %s on the marked position: exit %d, want 1 with the refusal and the way on\n%s", strings.Join(args, " "), code, relaytest.TailLines(out(), 10))
		}
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != entries {
		t.Fatalf("%d entries after the refused starts, want %d", n, entries)
	}
	if out, errOut, code := run(t, append(global, "status")...); code != 0 || !strings.Contains(out, "repair:    "+holder+" since ") || !strings.Contains(out, "warning: held by "+holder) {
		t.Errorf("status on the marked position: exit %d, want the holder named\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, append(global, "position", "show")...); code != 0 || !strings.Contains(out, "warning: held by "+holder) {
		t.Errorf("position show on the marked position: exit %d, want the holder named\n%s%s", code, out, errOut)
	}

	out, errOut, code := run(t, append(global, "repair", "--apply")...)
	if code != 0 || !strings.Contains(out, "warning: the position is marked by a repair ("+holder) || !strings.Contains(out, "appended "+strconv.Itoa(lost)+" entries; stored the position") {
		t.Fatalf("repair --apply on the marked position: exit %d, want the rows appended and the mark named\n%s%s", code, out, errOut)
	}
	if b, err := position.Decode([]byte(env.RDB.Get(ctx, posKey(env)).Val())); err != nil || b.Repairing() {
		t.Fatalf("position after repair --apply: %+v, %v; want no mark", b, err)
	}
	p = startRelay(t, env, "--mode", "binlog", "--lease=false")
	produce(t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5}, rec)()
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
