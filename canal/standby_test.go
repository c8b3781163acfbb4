package canal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestReader_LeaseRefusedByTheScript takes the lease away from a reading
// reader right after it renewed it, so that its next append, not a renewal,
// finds it lost: the script refuses the batch, the reader stops reading and
// waits instead of returning, and once it holds the lease again it resumes
// from the stored position, not from where it had read to: the refused
// batch is appended then, once.
func TestReader_LeaseRefusedByTheScript(t *testing.T) {
	// Its database and Redis database are its own, its server id too.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	key := "binlog-outbox:position:" + env.Database + "." + env.Table + ":lease"
	const ttl, renew = time.Minute, 2 * time.Second
	newLease := func(holder string) *redisstream.Lease {
		l, err := redisstream.NewLease(env.RDB, redisstream.LeaseConfig{Key: key, TTL: ttl, Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var logs relaytest.Logs
	r, _ := newReaderLogging(t, env, func(c *Config) { c.Lease, c.LeaseRenew = newLease("reader/1"), renew }, logs.Logger())
	ctx1, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx1) }()
	waitStarted(t, r)
	rec := relaytest.NewProduced()
	produceDelivered(ctx, t, env, rec, 5)
	if !r.Stats().Leader {
		t.Fatal("Stats().Leader unset while the reader reads")
	}

	// Right after a renewal the next one is 2s away: the append of the
	// events below comes first.
	relaytest.WaitFor(t, 10*time.Second, "a renewal", func() bool {
		return env.RDB.PTTL(ctx, key).Val() > ttl-200*time.Millisecond
	})
	thief := newLease("thief/9")
	if err := env.RDB.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if held, _, err := thief.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("thief.TryAcquire = %v, %v", held, err)
	}
	before := relaytest.CountEntries(ctx, env.RDB, "outbox:")
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 3, RollbackRatio: 0.01}, rec)
	relaytest.WaitFor(t, 10*time.Second, "the reader to stop reading", func() bool {
		return strings.Contains(logs.String(), "waiting for the lease held by thief/9/")
	})
	lost := ""
	for _, l := range logs.Lines("WARN") {
		if strings.HasPrefix(l["msg"].(string), "lost the lease") {
			lost, _ = l["error"].(string)
		}
	}
	if !strings.Contains(lost, "append") || !strings.Contains(lost, "held by thief/9/") {
		t.Errorf("lost the lease with %q, want the append refused for the thief's lease", lost)
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != before {
		t.Errorf("the streams went from %d to %d entries while the thief held the lease", before, n)
	}
	if r.Stats().Leader {
		t.Error("Stats().Leader set while the reader waits for the lease")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after losing the lease; want it to wait", err)
	default:
	}

	if err := thief.Release(ctx); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if !r.Stats().Leader {
		t.Error("Stats().Leader unset after the reader took the lease again")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := env.RDB.Exists(ctx, key).Val(); n != 0 {
		t.Error("the lease is still held after the reader stopped; a clean stop gives it up")
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// A holder that can reach Redis but not MySQL keeps renewing its lease: it
// must give it up after LeaseStepDown, so that a standby that reaches MySQL
// takes over, and then wait as a standby itself rather than exit.
func TestReader_HolderThatCannotReadStepsDown(t *testing.T) {
	// Its database and Redis database are its own, its server id too.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	key := "binlog-outbox:position:" + env.Database + "." + env.Table + ":lease"
	newLease := func(holder string) *redisstream.Lease {
		l, err := redisstream.NewLease(env.RDB, redisstream.LeaseConfig{Key: key, Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const stepDown = 2 * time.Second
	proxy := testsvc.StartProxy(t, srv.Addr())
	env.MySQLAddr = proxy.Addr()
	var logsA relaytest.Logs
	a, _ := newReaderLogging(t, env, func(c *Config) { c.Lease, c.LeaseStepDown = newLease("a/1"), stepDown }, logsA.Logger())
	env.MySQLAddr = srv.Addr()
	b, _ := newReader(t, env, func(c *Config) { c.Lease, c.LeaseStepDown = newLease("b/2"), stepDown })

	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	waitStarted(t, a)
	rec := relaytest.NewProduced()
	produceDelivered(ctx, t, env, rec, 5)
	stopB := startReader(b)
	relaytest.WaitFor(t, 10*time.Second, "b to stand by", func() bool { return b.Stats().Standby })

	proxy.Close() // a reaches Redis, and no longer MySQL
	cut := time.Now()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10, RollbackRatio: 0.1}, rec)
	relaytest.WaitFor(t, 30*time.Second, "b to take over", func() bool { return b.Stats().Leader })
	took := time.Since(cut)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	t.Logf("b took over %s after a lost its MySQL connection", took.Round(time.Millisecond))
	if took > stepDown+10*time.Second {
		t.Errorf("b took over after %s; want about LeaseStepDown (%s) plus a renewal", took, stepDown)
	}
	found := false
	for _, l := range logsA.Lines("WARN") {
		if strings.HasPrefix(l["msg"].(string), "gave the lease up") {
			found = true
		}
	}
	if !found {
		t.Errorf("a logged no step-down; its WARN lines: %v", logsA.Lines("WARN"))
	}
	select {
	case err := <-doneA:
		t.Fatalf("a returned %v after stepping down; want it to stand by", err)
	default:
	}
	if a.Stats().Leader {
		t.Error("a still says it leads")
	}
	cancelA()
	if err := <-doneA; err != nil {
		t.Fatalf("a: %v", err)
	}
	stopChecked(ctx, t, env, rec, stopB)
}
