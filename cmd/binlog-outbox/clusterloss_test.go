package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// lossBacklog is how much of the replication stream a master must hold
// unsent for its stopped replica before it is killed: those writes are
// acknowledged to the relay and die with the master.
const lossBacklog = 1 << 20

// largePayload is the size of the events that fill the replication stream
// quickly: the kernel buffers several MiB of it for a stopped replica
// before the master has to keep any.
const largePayload = 64 << 10

// TestRun_RedisClusterLostWritesAppendedAgain makes Redis Cluster lose
// writes it acknowledged, for real, while producers commit and the relay
// appends: the replica of a master is stopped (SIGSTOP) until the master
// holds a MiB of replication stream it could not send, the master is
// killed, and the replica takes over (CLUSTER FAILOVER TAKEOVER) without
// those writes: entries and slot positions of that master's slots go back
// together. First on a master that does not hold the position key: the
// running relay finds its slot position older than the one it wrote and
// appends again from there. Then on the master that holds the position key,
// with the relay killed before it noticed: the restarted relay reads the
// position key, gone back with the slots of its master, and appends again
// too. Every committed event ends in its stream exactly once.
func TestRun_RedisClusterLostWritesAppendedAgain(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	measureWait(t, rc)

	rec := relaytest.NewProduced()
	large := &largeEvents{committed: map[string]relaytest.Sent{}}
	p := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, posKey(env))
	stop := produceInBackground(t, env, rec, relaytest.ProduceOptions{Producers: 2, Transactions: 100000, Pause: 2 * time.Millisecond})
	defer stop()
	// Every aggregate of the producers has had events: the slots the
	// producers write are known before the first loss.
	relaytest.WaitFor(t, 60*time.Second, "appends before the first loss", func() bool {
		return relaytest.CountEntries(ctx, env.Cluster, "outbox:") >= 300 || p.Exited()
	})

	posMaster, err := rc.MasterOf(ctx, redisstream.Slot(posKey(env)))
	if err != nil {
		t.Fatal(err)
	}
	other := -1
	for i := range rc.Nodes {
		if role, err := rc.Role(ctx, i); err == nil && role == "master" && i != posMaster {
			other = i
			break
		}
	}
	if other < 0 {
		t.Fatal("no master without the position key")
	}
	third := -1
	for i := range rc.Nodes {
		if role, err := rc.Role(ctx, i); err == nil && role == "master" && i != posMaster && i != other {
			third = i
			break
		}
	}
	if third < 0 {
		t.Fatal("no third master")
	}
	p = loseWrites(t, env, rc, p, other, large, false)
	p = loseWrites(t, env, rc, p, posMaster, large, true)
	// Restarted, with the position key on a master that kept everything:
	// the slot record beside it says what the lost slots held.
	p = loseWrites(t, env, rc, p, third, large, true)
	stop()
	large.addTo(rec)
	n := finishCluster(t, env, p, rec)
	t.Logf("%d committed events (%d of %d KiB), %d entries", len(rec.Committed), len(large.committed), largePayload>>10, n)
}

// loseWrites makes master m lose acknowledged writes of the relay p (see
// TestRun_RedisClusterLostWritesAppendedAgain) and waits until the entries
// m lost are back in their streams, right after what the new master kept:
// the relay, the same one or (restart) a new one started after the loss,
// appended them again. It returns the relay that runs.
func loseWrites(t *testing.T, env *relaytest.Env, rc *testsvc.RedisCluster, p *relayProc, m int, large *largeEvents, restart bool) *relayProc {
	t.Helper()
	ctx := context.Background()
	r, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	streams, orderParts := streamsOn(t, rc, m)
	master := rc.NodeClient(t, m)
	// The large events go to streams the relay wrote already, and the
	// replica has every slot position there is before it stops: the loss
	// of a slot's very first script is another case (see
	// TestRun_RedisClusterLostFirstSlotWrite).
	var parts []int
	for _, part := range orderParts {
		if master.Exists(ctx, fmt.Sprintf("outbox:order:%d", part)).Val() == 1 {
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 {
		t.Fatalf("master %d holds none of the order streams yet", m)
	}
	if err := rc.WaitReplicated(ctx, m, r); err != nil {
		t.Fatal(err)
	}

	resume := rc.Pause(t, r)
	stopLarge := large.produce(t, env, parts)
	at := time.Now()
	var backlog int64
	relaytest.WaitFor(t, 90*time.Second, "the master to hold a MiB for its stopped replica", func() bool {
		backlog, err = rc.ReplicaBacklog(ctx, m)
		return (err == nil && backlog >= lossBacklog) || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("relay exited while the replica was stopped:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	filled := time.Since(at)
	stopLarge()

	posThere := false
	if pm, err := rc.MasterOf(ctx, redisstream.Slot(posKey(env))); err == nil {
		posThere = pm == m
	}
	// The relay is stopped too, so that what the master acknowledged is
	// known exactly: nothing writes to it once its last script ran.
	p.Signal(t, syscall.SIGSTOP)
	time.Sleep(300 * time.Millisecond)
	acked := map[string][]tailEntry{}
	for _, s := range streams {
		acked[s] = streamTail(t, master, s)
	}
	backlog, err = rc.ReplicaBacklog(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	rc.Nodes[m].Kill()
	resume()
	at = time.Now()
	if err := rc.Takeover(ctx, r); err != nil {
		t.Fatal(err)
	}
	took := time.Since(at)
	// The checks' client would dial the dead master until a redirect.
	env.Cluster.ReloadState(ctx)

	// What the new master lacks of what the old one acknowledged: the
	// entries past its last one, which it holds as a prefix.
	replica := rc.NodeClient(t, r)
	lostOf := map[string][]tailEntry{}
	last := map[string]string{}
	lost := 0
	for _, s := range streams {
		top := "0-0"
		if e := streamTail(t, replica, s); len(e) > 0 {
			top = e[len(e)-1].id
		}
		i := slices.IndexFunc(acked[s], func(e tailEntry) bool { return e.id == top })
		if i < 0 && top != "0-0" {
			t.Fatalf("stream %s: the new master's last entry %s is not among the old one's last %d", s, top, len(acked[s]))
		}
		if missing := acked[s][i+1:]; len(missing) > 0 {
			lostOf[s], last[s] = missing, top
			lost += len(missing)
		}
	}
	if lost == 0 {
		t.Fatalf("no acknowledged write was lost (the master held %d bytes for its replica when killed): the test made no loss", backlog)
	}

	at = time.Now()
	if restart {
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		p = startRelay(t, env, clusterArgs...)
		if !rc.Nodes[0].Running() {
			// The URL's first node is the dead master: the relay checks
			// the cluster through the next one that answers.
			relaytest.WaitFor(t, 30*time.Second, "the relay to start past the dead first node", func() bool {
				return p.Exited() || strings.Contains(p.Out.String(), "reading binlog")
			})
			if p.Exited() {
				t.Fatalf("with the first node of --redis-url down, the relay did not start:\n%s", relaytest.TailLines(p.Out.String(), 3))
			}
			if !p.Said("the first node of --redis-url does not answer", 5*time.Second) {
				t.Error("the relay did not say it checked the cluster through another node")
			}
		}
	} else {
		p.Signal(t, syscall.SIGCONT)
	}
	// The lost entries must come back first, in their order, right after
	// what the new master kept: the slot's position went back with them,
	// and nothing later of that slot is appended before them.
	relaytest.WaitFor(t, 60*time.Second, "the lost entries appended again", func() bool {
		if p.Exited() {
			return true
		}
		for s, want := range lostOf {
			// Errors pass: the client may still dial the dead master.
			got, err := env.Cluster.XRangeN(ctx, s, "("+last[s], "+", int64(len(want))).Result()
			if err != nil || len(got) < len(want) {
				return false
			}
			for i := range want {
				if id, _ := got[i].Values["message_id"].(string); id != want[i].messageID {
					t.Fatalf("stream %s: after the entries the new master kept, entry %d is %s, want the lost %s: the lost entries were not appended again", s, i, id, want[i].messageID)
				}
			}
			delete(lostOf, s)
		}
		return true
	})
	if p.Exited() {
		t.Fatalf("relay exited after the loss:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	caughtUp := time.Since(at)
	if !restart && !p.Said("stored position went back", 5*time.Second) {
		t.Errorf("the relay did not log that a stored position went back:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	t.Logf("master %d (position key there: %v) killed with %d KiB unsent to its stopped replica %d (filled in %s); takeover %s; "+
		"Redis lost %d acknowledged entries in %d of its %d streams; the %s relay appended them again within %s",
		m, posThere, backlog>>10, r, filled.Round(time.Millisecond), took.Round(time.Millisecond),
		lost, len(last), len(streams), map[bool]string{false: "same", true: "restarted"}[restart], caughtUp.Round(time.Millisecond))
	return p
}

// streamsOn returns the relay's streams (under clusterArgs) whose slots
// master m serves, and the partitions of its "order" streams among them.
func streamsOn(t *testing.T, rc *testsvc.RedisCluster, m int) (streams []string, orderParts []int) {
	t.Helper()
	for _, typ := range []string{"order", "invoice"} {
		for part := range clusterPartitions {
			s := fmt.Sprintf("outbox:%s:%d", typ, part)
			at, err := rc.MasterOf(context.Background(), redisstream.Slot(s))
			if err != nil {
				t.Fatal(err)
			}
			if at == m {
				streams = append(streams, s)
				if typ == "order" {
					orderParts = append(orderParts, part)
				}
			}
		}
	}
	if len(orderParts) == 0 {
		t.Fatalf("master %d serves none of the order streams", m)
	}
	return streams, orderParts
}

// tailDepth is how many of a stream's last entries streamTail returns: more
// than a master can lose for its stopped replica here (lossBacklog).
const tailDepth = 3000

// tailEntry is a stream entry's id and message_id.
type tailEntry struct{ id, messageID string }

// tailScript returns the id and message_id of the last ARGV[1] entries of
// the stream KEYS[1], oldest first: the server reads the payloads, the test
// gets the ids only.
var tailScript = redis.NewScript(`
local es = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])
local out = {}
for i = #es, 1, -1 do
  local mid = ''
  local f = es[i][2]
  for j = 1, #f, 2 do
    if f[j] == 'message_id' then mid = f[j + 1] end
  end
  out[#out + 1] = es[i][1]
  out[#out + 1] = mid
end
return out
`)

// streamTail returns the last tailDepth entries of stream as the node c
// holds them.
func streamTail(t *testing.T, c *redis.Client, stream string) []tailEntry {
	t.Helper()
	v, err := tailScript.Run(context.Background(), c, []string{stream}, tailDepth).StringSlice()
	if err != nil {
		t.Fatalf("last entries of %s on %s: %v", stream, c.Options().Addr, err)
	}
	out := make([]tailEntry, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		out = append(out, tailEntry{id: v[i], messageID: v[i+1]})
	}
	return out
}

// largeEvents records the large events committed beside the producers.
type largeEvents struct {
	mu        sync.Mutex
	n         int
	committed map[string]relaytest.Sent
}

// produce commits large events, one per transaction, into the order streams
// of the partitions parts, until stop is called (which waits). An insert is
// never cancelled halfway, so each one is known committed or failed.
func (l *largeEvents) produce(t *testing.T, env *relaytest.Env, parts []int) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			id := relaytest.MessageID()
			var agg string
			for {
				l.mu.Lock()
				l.n++
				agg = fmt.Sprintf("large-%d", l.n)
				l.mu.Unlock()
				if slices.Contains(parts, int(crc32.ChecksumIEEE([]byte(agg))%clusterPartitions)) {
					break
				}
			}
			if err := insertPadded(env, id, "order", agg, 1, largePayload); err != nil {
				t.Error(err)
				return
			}
			l.mu.Lock()
			l.committed[id] = relaytest.Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: 1}
			l.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// insertPadded commits one event of aggregate agg with sequence number seq
// and about pad bytes of padding in its payload, in the shape Check
// expects. The server builds the padding, so that the statement text in
// the binlog (MariaDB's annotate event) stays small. It is never cancelled
// halfway, so the event is known committed or failed.
func insertPadded(env *relaytest.Env, id, typ, agg string, seq, pad int) error {
	prefix := fmt.Sprintf(`{"seq":%d,"agg":"%s","text":"héllo \"quoted\" 🙂","pad":"`, seq, agg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.DB.ExecContext(ctx, "INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) "+
		"VALUES (?, ?, ?, ?, CONCAT(?, REPEAT('x', ?), '\"}'), '{}', UTC_TIMESTAMP(6))", id, typ, agg, typ+".changed", prefix, pad); err != nil {
		return fmt.Errorf("insert an event of %s: %w", agg, err)
	}
	return nil
}

// addTo adds the large events to rec; no producer may run.
func (l *largeEvents) addTo(rec *relaytest.Produced) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.committed {
		rec.Committed[id] = s
	}
}

// measureWait logs what WAIT 1 costs after an append script: scripts of the
// relay's shape (50 entries and a position, one slot) on an idle master,
// alone and each followed by WAIT 1 on the same connection (WAIT counts the
// replicas that acknowledged that connection's writes; the cluster client
// would send a keyless WAIT to any node).
func measureWait(t *testing.T, rc *testsvc.RedisCluster) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"wait-bench:{w}:stream", "wait-bench:{w}:position"}
	m, err := rc.MasterOf(ctx, redisstream.Slot(keys[0]))
	if err != nil {
		t.Fatal(err)
	}
	conn := rc.NodeClient(t, m).Conn()
	defer conn.Close()
	script := redis.NewScript(`
for i = 1, 50 do redis.call('XADD', KEYS[1], '*', 'payload', ARGV[1]) end
redis.call('SET', KEYS[2], ARGV[2])
return 1`)
	payload := strings.Repeat("p", 300)
	const rounds = 100
	round := func(wait bool) time.Duration {
		at := time.Now()
		if err := script.Run(ctx, conn, keys, payload, at.UnixNano()).Err(); err != nil {
			t.Fatalf("append script: %v", err)
		}
		if wait {
			n, err := conn.Do(ctx, "WAIT", 1, 1000).Int()
			if err != nil || n != 1 {
				t.Fatalf("WAIT 1 1000 = %d, %v; want 1 replica", n, err)
			}
		}
		return time.Since(at)
	}
	round(false) // load the script, warm the connection
	// Alternated, so that the noise of a shared machine falls on both.
	var plain, waited []time.Duration
	for range rounds {
		plain = append(plain, round(false))
		waited = append(waited, round(true))
	}
	slices.Sort(plain)
	slices.Sort(waited)
	q := func(d []time.Duration, f float64) time.Duration {
		return d[int(f*float64(len(d)-1))].Round(10 * time.Microsecond)
	}
	t.Logf("append script of 50 entries: median %s, p90 %s; followed by WAIT 1: median %s, p90 %s (%d rounds each)",
		q(plain, 0.5), q(plain, 0.9), q(waited, 0.5), q(waited, 0.9), rounds)
	if err := conn.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRun_RedisClusterLostFirstSlotWrite loses, the same way as
// TestRun_RedisClusterLostWritesAppendedAgain, the very first script the
// relay ran in a hash slot: the new master has no position for that slot at
// all. The slot held none when the relay first wrote there, so the relay
// reads again from before that write, as it does for a slot that went back
// to an older position of its own, instead of stopping as if someone had
// deleted the position: the lost entries come back, once, in order.
func TestRun_RedisClusterLostFirstSlotWrite(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), rc)
	ctx := context.Background()
	p := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, posKey(env))

	// A stream of master m whose slot the relay wrote once, replicated.
	filler := "outbox:order:0"
	m, err := rc.MasterOf(ctx, redisstream.Slot(filler))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	master := rc.NodeClient(t, m)
	aggOf := func(prefix string, part int) string {
		for i := 0; ; i++ {
			if agg := fmt.Sprintf("%s-%d", prefix, i); int(crc32.ChecksumIEEE([]byte(agg))%clusterPartitions) == part {
				return agg
			}
		}
	}
	fillAgg := aggOf("fill", 0)
	seq := 1
	if err := insertPadded(env, relaytest.MessageID(), "order", fillAgg, seq, 10); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the first event appended", func() bool { return master.Exists(ctx, filler).Val() == 1 })
	if err := rc.WaitReplicated(ctx, m, r); err != nil {
		t.Fatal(err)
	}

	// A stream of m in a slot the relay never wrote.
	var fresh string
	var freshPart int
	for part := range clusterPartitions {
		s := fmt.Sprintf("outbox:refund:%d", part)
		slot := redisstream.Slot(s)
		if at, err := rc.MasterOf(ctx, slot); err == nil && at == m && slot != redisstream.Slot(filler) &&
			master.Exists(ctx, redisstream.SlotPositionKey(posKey(env), slot)).Val() == 0 {
			fresh, freshPart = s, part
			break
		}
	}
	if fresh == "" {
		t.Fatalf("master %d serves no refund stream in a slot of its own", m)
	}

	resume := rc.Pause(t, r)
	relaytest.WaitFor(t, 90*time.Second, "the master to hold a MiB for its stopped replica", func() bool {
		seq++
		if err := insertPadded(env, relaytest.MessageID(), "order", fillAgg, seq, largePayload); err != nil {
			t.Fatal(err)
		}
		b, err := rc.ReplicaBacklog(ctx, m)
		return err == nil && b >= lossBacklog
	})
	freshAgg := aggOf("refund", freshPart)
	var lostIDs []string
	for i := 1; i <= 3; i++ {
		id := relaytest.MessageID()
		if err := insertPadded(env, id, "refund", freshAgg, i, 10); err != nil {
			t.Fatal(err)
		}
		lostIDs = append(lostIDs, id)
	}
	relaytest.WaitFor(t, 30*time.Second, "the fresh slot's first entries appended", func() bool { return master.XLen(ctx, fresh).Val() == 3 })
	posMaster, err := rc.MasterOf(ctx, redisstream.Slot(posKey(env)))
	if err != nil {
		t.Fatal(err)
	}
	posThere := posMaster == m
	p.Signal(t, syscall.SIGSTOP)
	time.Sleep(300 * time.Millisecond)
	rc.Nodes[m].Kill()
	resume()
	if err := rc.Takeover(ctx, r); err != nil {
		t.Fatal(err)
	}
	env.Cluster.ReloadState(ctx)
	replica := rc.NodeClient(t, r)
	if n := replica.Exists(ctx, fresh, redisstream.SlotPositionKey(posKey(env), redisstream.Slot(fresh))).Val(); n != 0 {
		t.Fatalf("the new master holds %d of %s and its slot position: the first script of the slot was not lost", n, fresh)
	}

	p.Signal(t, syscall.SIGCONT)
	at := time.Now()
	// The relay notices at its next script in the slot: one more event of
	// each stream.
	later := relaytest.MessageID()
	if err := insertPadded(env, later, "refund", freshAgg, len(lostIDs)+1, 10); err != nil {
		t.Fatal(err)
	}
	if err := insertPadded(env, relaytest.MessageID(), "order", fillAgg, seq+1, 10); err != nil {
		t.Fatal(err)
	}
	lostIDs = append(lostIDs, later)
	back := func() bool {
		got, err := env.Cluster.XRange(ctx, fresh, "-", "+").Result()
		if err != nil || len(got) < len(lostIDs) {
			return false
		}
		for i, id := range lostIDs {
			if got[i].Values["message_id"] != id {
				t.Fatalf("%s: entry %d is %v, want the lost %s", fresh, i, got[i].Values["message_id"], id)
			}
		}
		return true
	}
	relaytest.WaitFor(t, 30*time.Second, "the relay to append the lost first entries again", func() bool { return p.Exited() || back() })
	if p.Exited() {
		t.Fatalf("the relay stopped instead of appending the lost first entries of %s again:\n%s", fresh, relaytest.TailLines(p.Out.String(), 5))
	}
	if n := len(env.Cluster.XRange(ctx, fresh, "-", "+").Val()); n != len(lostIDs) {
		t.Errorf("%s holds %d entries, want the %d lost ones and the later one, once each", fresh, n, len(lostIDs)-1)
	}
	t.Logf("the relay appended the lost first entries of %s again within %s (position key on the lost master: %v)", fresh, time.Since(at).Round(time.Millisecond), posThere)
}
