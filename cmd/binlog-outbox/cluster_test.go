package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// clusterPartitions spreads the streams over the slots of all masters.
const clusterPartitions = 16

// clusterArgs run the relay on a cluster, with streams over many slots and
// small batches, so that a batch spans many slots' scripts.
var clusterArgs = []string{"--mode", "binlog", "--lease=false", "--stream", "outbox:{aggregate_type}:{partition}",
	"--partitions", fmt.Sprint(clusterPartitions), "--max-batch-events", "50"}

// clusterStream is the stream of an event under clusterArgs.
func clusterStream(s relaytest.Sent) string {
	return fmt.Sprintf("outbox:%s:%d", s.AggregateType, crc32.ChecksumIEEE([]byte(s.AggregateID))%clusterPartitions)
}

// produceInBackground runs producers until stop is called, which waits for
// them.
func produceInBackground(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, o relaytest.ProduceOptions) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, o, rec)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// finishCluster waits for every committed event, stops the relay cleanly
// and checks the streams: each committed event exactly once, in its
// partition's stream, in per-aggregate order; and each stream's slot holds
// a position of its own.
func finishCluster(t *testing.T, env *relaytest.Env, p *relayProc, rec *relaytest.Produced) int {
	t.Helper()
	ctx := context.Background()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	if p.Exited() {
		t.Fatalf("relay exited:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	stopRelay(t, p)
	n := relaytest.Check(ctx, t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true, StreamOf: clusterStream})
	slots := map[int]bool{}
	for _, typ := range []string{"order", "invoice"} {
		for part := range clusterPartitions {
			stream := fmt.Sprintf("outbox:%s:%d", typ, part)
			if env.Cluster.Exists(ctx, stream).Val() == 0 {
				continue
			}
			slot := redisstream.Slot(stream)
			slots[slot] = true
			if env.Cluster.Exists(ctx, redisstream.SlotPositionKey(posKey(env), slot)).Val() == 0 {
				t.Errorf("stream %s (slot %d) has no slot position", stream, slot)
			}
		}
	}
	if len(slots) < 8 {
		t.Errorf("the streams lie in %d slots, want them spread over many", len(slots))
	}
	return n
}

// TestRun_RedisClusterKilledExactlyOnce kills the relay (kill -9) under load
// several times while it appends to streams in many slots of a Redis
// Cluster: a kill between the scripts of one batch leaves some slots ahead,
// and the restarted relay appends every committed event exactly once.
func TestRun_RedisClusterKilledExactlyOnce(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
	rec := relaytest.NewProduced()
	p := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, posKey(env))

	stop := produceInBackground(t, env, rec, relaytest.ProduceOptions{Producers: 4, Transactions: 100000, Pause: time.Millisecond})
	defer stop()
	kills, ahead := 0, 0
	for i := range 6 {
		time.Sleep(time.Duration(300+i*67) * time.Millisecond)
		if i > 0 && strings.Contains(p.Out.String(), "some hash slots are ahead") {
			ahead++
		}
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		kills++
		p = startRelay(t, env, clusterArgs...)
		waitLog(t, p, "reading binlog")
	}
	stop()
	n := finishCluster(t, env, p, rec)
	t.Logf("%d kills (%d restarts found slots ahead of the position), %d committed events, %d entries", kills, ahead, len(rec.Committed), n)
}

// TestRun_RedisClusterFailoverNoLoss fails the master of a stream's slot
// over to its replica (CLUSTER FAILOVER) and then kills another master
// outright (the cluster promotes its replica after the node timeout) while
// producers commit and the relay appends. Nothing is lost; a slot whose new
// master lacks writes the old one acknowledged has its position rolled back
// with them, and the relay appends them again: exactly once.
func TestRun_RedisClusterFailoverNoLoss(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, posKey(env))
	stop := produceInBackground(t, env, rec, relaytest.ProduceOptions{Producers: 4, Transactions: 100000, Pause: time.Millisecond})
	defer stop()

	appended := func() int { return relaytest.CountEntries(ctx, env.Cluster, "outbox:") }
	progress := func(what string) {
		before := appended()
		relaytest.WaitFor(t, 60*time.Second, "appends "+what, func() bool { return appended() > before+100 || p.Exited() })
		if p.Exited() {
			t.Fatalf("relay exited %s:\n%s", what, relaytest.TailLines(p.Out.String(), 20))
		}
	}
	progress("before the failover")
	m, err := rc.MasterOf(ctx, redisstream.Slot("outbox:order:0"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if err := rc.Failover(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("manual failover of node %d to %d took %s", m, r, time.Since(at).Round(time.Millisecond))
	progress("after the manual failover")

	// Kill a master the failover left alone: its replica takes over once
	// the others miss it for the node timeout (2s).
	victim := -1
	for i := range rc.Nodes {
		if role, err := rc.Role(ctx, i); err == nil && role == "master" && i != r {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no other master to kill")
	}
	at = time.Now()
	rc.Nodes[victim].Kill()
	if err := rc.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the cluster replaced the killed master %d after %s", victim, time.Since(at).Round(time.Millisecond))
	progress("after the master was killed")
	stop()
	n := finishCluster(t, env, p, rec)
	t.Logf("%d committed events, %d entries, rolled back slots re-read %d times", len(rec.Committed), n, strings.Count(p.Out.String(), "older than the last one written"))
}

// What the cluster cannot do yet is refused with the way on, before any
// connection.
func TestRedisCluster_RefusedWhereUnsupported(t *testing.T) {
	url := "redis://127.0.0.1:1?addr=127.0.0.1:2"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-cluster", "--redis-url", url, "schema", "apply"}, "schema apply does not support --redis-cluster"},
		{[]string{"--redis-cluster", "--redis-url", "redis://127.0.0.1:1/3?addr=127.0.0.1:2", "check"}, "database 0 only"},
		// cleanup knows a cluster: it gets as far as the URL.
		{[]string{"--redis-cluster", "--redis-url", "redis://127.0.0.1:1/3?addr=127.0.0.1:2", "cleanup", "--older-than", "7d"}, "database 0 only"},
	} {
		_, errOut, code := run(t, append([]string{"--mysql-dsn", "u:p@tcp(127.0.0.1:1)/app"}, tt.args...)...)
		if code == 0 || !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "hint:") {
			t.Errorf("%v: exit %d, stderr %q; want a failure saying %q with a hint", tt.args, code, errOut, tt.want)
		}
	}
}

// Poll mode on a cluster: one script per slot of each round, every event
// once (no fault here, so no dedupe window is needed for that).
func TestRun_RedisClusterPollMode(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
	rec := relaytest.NewProduced()
	args := append([]string{}, clusterArgs...)
	args[1] = "poll"
	p := startRelay(t, env, args...)
	waitLog(t, p, "poll relay starting")
	relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 150, Pause: time.Millisecond}, rec)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	stopRelay(t, p)
	n := relaytest.Check(context.Background(), t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true, StreamOf: clusterStream})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}
