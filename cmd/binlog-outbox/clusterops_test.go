package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// clusterTrimPartitions puts the streams outbox:order:0..3 on all three
// masters of a test cluster (slots 11138, 15267, 3008, 7137).
const clusterTrimPartitions = 4

// clusterTrimArgs relay the "order" events to four streams of a cluster.
var clusterTrimArgs = []string{"--mode", "binlog", "--lease=false", "--stream", "outbox:{aggregate_type}:{partition}",
	"--partitions", fmt.Sprint(clusterTrimPartitions), "--ensure-group", "g"}

// trimStream is what the test did with one stream.
type trimStream struct {
	key    string
	master int
	all    []redis.XMessage
	// delivered entries were read by group g, the first acked of them
	// acknowledged.
	delivered, acked int
}

// TestRun_RedisClusterTrimAndGroupMetrics runs --trim acked and
// --group-metrics on a cluster whose streams lie on all three masters,
// with a consumer of group g that acknowledged part of what it read: each
// stream is trimmed to its first unacknowledged entry, nothing else goes,
// and the metrics show each stream's pending entries and lag. A master
// killed while the trimmer runs fails its passes until the replica took
// over; they are retried, and then more acknowledgements are trimmed. Restarted with --max-len,
// the relay cuts every stream down to about the cap.
func TestRun_RedisClusterTrimAndGroupMetrics(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	// Small stream nodes, so that MAXLEN ~ can cut a stream of a few dozen
	// entries (it removes whole nodes, of 100 entries by default).
	const nodeEntries = 4
	// Every node, replicas included: a replica builds its own nodes of
	// what it replicates, and the failover below promotes one.
	for _, n := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		err := c.ConfigSet(ctx, "stream-node-max-entries", fmt.Sprint(nodeEntries)).Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	port := closedPort(t)
	p := startRelay(t, env, append([]string{"--trim", "acked", "--trim-interval", "100ms",
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--group-metrics", "--group-metrics-interval", "200ms"}, clusterTrimArgs...)...)
	waitStoredPosition(t, env, posKey(env))
	rec := relaytest.NewProduced()
	const perStream = 45
	for _, agg := range aggregatePerPartition(clusterTrimPartitions) {
		for seq := 1; seq <= perStream; seq++ {
			insertEvent(t, env.DB, rec, agg, seq)
		}
	}
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)

	var streams []*trimStream
	masters := map[int]bool{}
	for part := range clusterTrimPartitions {
		s := &trimStream{key: fmt.Sprintf("outbox:order:%d", part)}
		all, err := env.Cluster.XRange(ctx, s.key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != perStream {
			t.Fatalf("%s has %d entries, want %d", s.key, len(all), perStream)
		}
		if s.master, err = rc.MasterOf(ctx, redisstream.Slot(s.key)); err != nil {
			t.Fatal(err)
		}
		masters[s.master] = true
		s.all, s.delivered, s.acked = all, 2*len(all)/3, len(all)/3
		consumeGroup(t, env.Cluster, s.key, s.delivered, s.acked)
		streams = append(streams, s)
	}
	if len(masters) < 2 {
		t.Fatalf("the streams lie on %d master(s), want at least 2", len(masters))
	}
	waitTrimmed := func(what string) {
		for _, s := range streams {
			relaytest.WaitFor(t, 30*time.Second, s.key+" trimmed to its first unacknowledged entry "+what, func() bool {
				return env.Cluster.XLen(ctx, s.key).Val() == int64(len(s.all)-s.acked) || p.Exited()
			})
			if p.Exited() {
				t.Fatalf("relay exited:\n%s", relaytest.TailLines(p.Out.String(), 20))
			}
			left, err := env.Cluster.XRange(ctx, s.key, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != len(s.all)-s.acked || left[0].ID != s.all[s.acked].ID || left[len(left)-1].ID != s.all[len(s.all)-1].ID {
				t.Errorf("%s %s: %d entries from %s; want the %d from %s, the first one g has not acknowledged, to the last",
					s.key, what, len(left), left[0].ID, len(s.all)-s.acked, s.all[s.acked].ID)
			}
		}
	}
	waitTrimmed("")

	sc := scraper{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for _, s := range streams {
		series := fmt.Sprintf(`{group="g",mode="binlog",stream=%q}`, s.key)
		pending := s.delivered - s.acked
		sc.waitValue("binlog_outbox_group_pending"+series, fmt.Sprintf("= %d (master %d)", pending, s.master), func(v float64) bool { return v == float64(pending) })
		lag := len(s.all) - s.delivered
		sc.waitValue("binlog_outbox_group_lag"+series, fmt.Sprintf("= %d (master %d)", lag, s.master), func(v float64) bool { return v == float64(lag) })
		sc.waitValue("binlog_outbox_group_holds_back_trim"+series, fmt.Sprintf("= 1: g has entries pending (master %d)", s.master), func(v float64) bool { return v == 1 })
		sc.waitValue("binlog_outbox_group_oldest_pending_deliveries"+series, fmt.Sprintf("= 1 (master %d)", s.master), func(v float64) bool { return v == 1 })
	}

	// Kill the first stream's master while the trimmer runs: its passes
	// fail until the replica took over, and are retried. Then acknowledge
	// the rest of what g read: it goes too, on the new master as well.
	rc.Nodes[streams[0].master].Kill()
	if err := rc.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the test's client to find the new master", func() bool {
		env.Cluster.ReloadState(ctx)
		return env.Cluster.XLen(ctx, streams[0].key).Err() == nil
	})
	if !p.Said("trim pass failed; retrying", 5*time.Second) {
		t.Errorf("no failed trim pass logged while a master was down:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	for _, s := range streams {
		consumeGroup(t, env.Cluster, s.key, 0, s.delivered)
		s.acked = s.delivered
	}
	waitTrimmed("after a master was killed")
	stopRelay(t, p)

	const maxLen = 10
	p = startRelay(t, env, append([]string{"--max-len", fmt.Sprint(maxLen), "--trim-interval", "100ms"}, clusterTrimArgs...)...)
	for _, s := range streams {
		deadline := time.Now().Add(30 * time.Second)
		for env.Cluster.XLen(ctx, s.key).Val() >= maxLen+nodeEntries && !p.Exited() {
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d entries after 30s, want fewer than %d\n%s", s.key, env.Cluster.XLen(ctx, s.key).Val(), maxLen+nodeEntries, relaytest.TailLines(p.Out.String(), 30))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := env.Cluster.XLen(ctx, s.key).Val(); n < maxLen {
			t.Errorf("%s has %d entries, want at least --max-len %d: MAXLEN ~ keeps whole nodes", s.key, n, maxLen)
		}
	}
	if !p.Said("--max-len cut entries some consumer group had not acknowledged", 5*time.Second) {
		t.Errorf("the relay did not warn of the unacknowledged entries --max-len cut:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	stopRelay(t, p)
}

// aggregatePerPartition returns an aggregate id for each of n partitions,
// as the {partition} of a stream template spreads them.
func aggregatePerPartition(n int) []string {
	aggs := make([]string, n)
	for i, left := 0, n; left > 0; i++ {
		a := fmt.Sprintf("agg-%d", i)
		if part := crc32.ChecksumIEEE([]byte(a)) % uint32(n); aggs[part] == "" {
			aggs[part] = a
			left--
		}
	}
	return aggs
}

// consumeGroup reads n more entries of key as group g and acknowledges the
// first ack entries g has pending.
func consumeGroup(t *testing.T, rdb redis.UniversalClient, key string, n, ack int) {
	t.Helper()
	ctx := context.Background()
	if n > 0 {
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: int64(n), Block: -1}).Err(); err != nil {
			t.Fatalf("XREADGROUP %s: %v", key, err)
		}
	}
	if ack == 0 {
		return
	}
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: "-", End: "+", Count: int64(ack)}).Result()
	if err != nil {
		t.Fatalf("XPENDING %s: %v", key, err)
	}
	ids := make([]string, 0, len(pending))
	for _, e := range pending {
		ids = append(ids, e.ID)
	}
	if len(ids) > 0 {
		if err := rdb.XAck(ctx, key, "g", ids...).Err(); err != nil {
			t.Fatalf("XACK %s: %v", key, err)
		}
	}
}

// TestCleanup_RedisCluster runs cleanup with --redis-cluster beside a
// binlog relay appending to streams in many slots: it deletes the old rows
// the relay appended, once the position key passed them and every replica
// holds what its master does. With the relay stopped, rows it has not read
// stay, and cleanup says why; so do they when a failover happens while
// cleanup waits. In poll mode, the rows marked sent go.
func TestCleanup_RedisCluster(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	relay := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, posKey(env))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--redis-cluster"}
	const n = 50
	for i := range 8 {
		insertOldEvents(t, env, rec, fmt.Sprintf("old-%d", i), n)
	}
	r, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--batch", "100")
	if code != 0 || r.Mode != "binlog" || r.Candidates != 8*n || r.Deleted != 8*n {
		t.Errorf("cleanup beside the relay: exit %d, %+v; want exit 0 and %d rows deleted\n%s", code, r, 8*n, errOut)
	}
	if got := countRows(t, env, oldRows); got != 0 {
		t.Errorf("%d old rows left, want none", got)
	}
	// Every deleted row's event is in its stream, on whichever master.
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, relay)
	relaytest.Check(ctx, t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true, StreamOf: clusterStream})

	insertOldEvents(t, env, relaytest.NewProduced(), "unread", 10)
	_, errOut, code = cleanupJSON(t, global, "--older-than", "7d", "--wait", "1s")
	if code != exitFailure || !strings.Contains(errOut, "the relay is behind or stopped") || !strings.Contains(errOut, "hint: see `binlog-outbox status`") {
		t.Errorf("cleanup with the relay stopped: exit %d, want 1 with the reason and the hint\n%s", code, errOut)
	}
	if got := countRows(t, env, oldRows); got != 10 {
		t.Errorf("cleanup with the relay stopped left %d old rows, want all 10", got)
	}

	// A failover while cleanup waits for the relay: the master that went
	// may have lost appends, so the rows stay, even once the relay passed
	// them; the next run deletes them.
	type result struct {
		errOut string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		// The relay's binary, at once: an in-process run could wait for
		// appMu past the failover.
		_, errOut, code, _ := runUntil(t, 90*time.Second, append(global, "cleanup", "--older-than", "7d", "--wait", "60s")...)
		done <- result{errOut, code}
	}()
	// The failover must come after cleanup has read the masters it waits
	// against: on a loaded machine the command took over a second to get
	// there, saw the new masters only and deleted the rows. It waits up to
	// 60s for the stopped relay, so 5s leaves a wide margin on both sides.
	time.Sleep(5 * time.Second)
	m, err := rc.MasterOf(ctx, redisstream.Slot("outbox:order:0"))
	if err != nil {
		t.Fatal(err)
	}
	replica, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Failover(ctx, replica); err != nil {
		t.Fatal(err)
	}
	relay = startRelay(t, env, clusterArgs...)
	defer stopRelay(t, relay)
	res := <-done
	if res.code != exitFailure || !strings.Contains(res.errOut, "the cluster's masters changed while cleanup waited") || !strings.Contains(res.errOut, "hint:") {
		t.Errorf("cleanup across a failover: exit %d, want 1 saying the masters changed, with a hint\n%s", res.code, res.errOut)
	}
	if got := countRows(t, env, oldRows); got != 10 {
		t.Errorf("cleanup across a failover left %d old rows, want all 10", got)
	}
	r, errOut, code = cleanupJSON(t, global, "--older-than", "7d")
	if code != 0 || r.Deleted != 10 {
		t.Errorf("cleanup after the failover: exit %d, %+v; want exit 0 and 10 rows deleted\n%s", code, r, errOut)
	}

	// Poll mode, on another table of the same cluster: the rows the
	// poller marked sent go once the replicas hold the appends; unsent
	// ones stay.
	poll := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	global = []string{"--mysql-dsn", poll.MariaDB.DSN(poll.Database), "--redis-url", poll.RedisURL, "--redis-cluster"}
	args := append([]string{}, clusterArgs...)
	args[1] = "poll"
	poller := startRelay(t, poll, args...)
	for i := range 4 {
		insertOldEvents(t, poll, relaytest.NewProduced(), fmt.Sprintf("sent-%d", i), 10)
	}
	relaytest.WaitFor(t, 30*time.Second, "the poller to mark every row sent", func() bool { return countRows(t, poll, "sent_at IS NULL") == 0 })
	stopRelay(t, poller)
	insertOldEvents(t, poll, relaytest.NewProduced(), "unsent", 4)
	r, errOut, code = cleanupJSON(t, global, "--older-than", "7d", "--batch", "10")
	if code != 0 || r.Mode != "poll" || r.Deleted != 40 || r.KeptUnsent != 4 {
		t.Errorf("cleanup in poll mode on a cluster: exit %d, %+v; want 40 deleted and 4 unsent kept\n%s", code, r, errOut)
	}
	if unsent, all := countRows(t, poll, "sent_at IS NULL AND "+oldRows), countRows(t, poll, "1"); unsent != 4 || all != 4 {
		t.Errorf("after cleanup in poll mode: %d old unsent rows, %d in all; want 4 and 4", unsent, all)
	}
}
