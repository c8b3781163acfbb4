package relaytest

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// StartFunc starts a relay for env in the background: it must dial MySQL at
// env.MySQLAddr (env.RelayDB for its connection pool) and Redis at
// env.RedisURL, which the fault cases point at proxies, as env.Topology
// says (a cluster client and per-slot positions on a Cluster; a lease taken
// before reading, and checked by every append, with Topology.Lease), append
// to env.Prefix+"{aggregate_type}" with dead letters in
// env.Prefix+"dead-letter", map the table with
// env.Mapping and env.Extra, and use timeouts no
// longer than the suite's (a binlog heartbeat of at most 250ms, ReadTimeout 3
// heartbeats; the Redis timeouts come in the URL). The returned stop function
// shuts it down and returns what the relay returned.
type StartFunc func(t *testing.T, env *Env) (stop func() error)

// Features say what a relay mode promises; every case whose outcome depends
// on a promise is gated by the feature that makes it.
type Features struct {
	// ExactlyOnce: no committed event is ever appended twice, whatever
	// fails (binlog mode: the position is committed with the entries).
	ExactlyOnce bool
	// AtLeastOnceWithDedupe: a re-append after a lost reply or a crash is
	// skipped by a dedupe window (poll mode with --dedupe-window), so no
	// case sees a duplicate either. Without this or ExactlyOnce, duplicates
	// are allowed after a fault that makes an append's outcome uncertain,
	// and only then.
	AtLeastOnceWithDedupe bool
	// PerAggregateOrder: the events of one aggregate reach its stream in
	// commit order.
	PerAggregateOrder bool
	// DeadLettersInvalidJSON: a payload that is not JSON in a column
	// declared JSON (MariaDB's JSON is a LONGTEXT whose CHECK can be
	// skipped) goes to the dead-letter stream; without it the payload is
	// relayed as it is.
	DeadLettersInvalidJSON bool
	// PromptStopOnDeadMySQLLink: a relay whose MySQL link went silent and
	// whose Redis failed still stops within seconds. Poll mode has it only
	// through the I/O timeouts of its DSN (the relay's default is 60s, the
	// suite's 2s): the ROLLBACK after a failed round gets no context from
	// database/sql and waits on the dead link until they strike.
	PromptStopOnDeadMySQLLink bool
}

// RedisKind is the kind of Redis deployment a topology appends to.
type RedisKind string

// The kinds of Redis the suite runs on.
const (
	// Standalone is one Redis server, the test binary's shared one or, for
	// a case that kills it, a private one; each case has a database.
	Standalone RedisKind = "Standalone"
	// Sentinel is a master with a replica behind three sentinels, shared
	// by the test binary (testsvc.SharedSentinels), the relay finding the
	// master through a redis+sentinel:// URL; each case has a database.
	Sentinel RedisKind = "Sentinel"
	// Cluster is a Redis Cluster of three masters with a replica each,
	// shared by the test binary (testsvc.SharedRedisCluster); each case
	// has a stream prefix (Env.Prefix) and a position key of its own.
	Cluster RedisKind = "Cluster"
)

// Topology is where the relay under test appends: a kind of Redis, with or
// without a lease.
type Topology struct {
	Redis RedisKind
	// Lease: the relay reads only while it holds the lease of its position
	// (binlog mode's --lease, standby relays), and every append checks it
	// (on a Cluster through the per-slot fences).
	Lease bool
}

// String names the topology as its subtest: Standalone, ClusterLease, ...
func (tp Topology) String() string {
	if tp.Lease {
		return string(tp.Redis) + "Lease"
	}
	return string(tp.Redis)
}

// Topologies returns every kind of Redis, each without and with a lease.
func Topologies() []Topology {
	var out []Topology
	for _, k := range []RedisKind{Standalone, Sentinel, Cluster} {
		out = append(out, Topology{Redis: k}, Topology{Redis: k, Lease: true})
	}
	return out
}

// RedisFaults reports whether the suite can make the relay's Redis fail:
// kill and restart it, fill its memory, or put a proxy between it and the
// relay that stalls, cuts and drops replies. Only a standalone Redis is
// reached at an address the suite hands out; the sentinels and the
// cluster hand the relay the servers' own addresses (a proxy in front of
// the first would be bypassed), and the shared servers must stay up for
// the other cases. A topology's failovers have tests of their own.
func (tp Topology) RedisFaults() bool { return tp.Redis == Standalone }

// Timeouts of the relays under test and the faults that outlast them.
const (
	// RedisTimeout is the relay's Redis read and write timeout, set in the
	// URL the suite hands to StartFunc.
	RedisTimeout = time.Second
	// FaultStall is how long a stall lasts: longer than every timeout the
	// relays under test use, so that they give up on the link.
	FaultStall = 3 * time.Second
	// deliveryTimeout bounds the wait for a case's events.
	deliveryTimeout = 60 * time.Second
)

// RunSuite runs the conformance suite against a relay mode on a standalone
// Redis without a lease.
func RunSuite(t *testing.T, start StartFunc, f Features) {
	RunSuiteOn(t, Topology{Redis: Standalone}, start, f)
}

// RunSuiteOn runs the conformance suite against a relay mode on topology
// tp: every case whose faults the topology can make (Topology.RedisFaults)
// and whose promise the mode makes.
func RunSuiteOn(t *testing.T, tp Topology, start StartFunc, f Features) {
	s := &suite{start: start, f: f, tp: tp}
	for _, c := range []struct {
		name       string
		run        func(t *testing.T)
		redisFault bool
	}{
		{"ConcurrentProducersWithRollbacks", s.concurrentProducers, false},
		{"ResumeAfterRestart", s.resumeAfterRestart, false},
		{"StopIsPromptAndClean", s.stopIsPrompt, false},
		{"DeadLetters", s.deadLetters, false},
		{"PayloadBytesPassThrough", s.payloadPassThrough, false},
		{"CarriedColumns", s.carriedColumns, false},
		{"TextCharsets", s.textCharsets, false},
		{"MySQLRestartUnderLoad", s.mysqlRestart, false},
		{"RedisRestartFromAOF", s.redisRestart, true},
		{"RedisOutOfMemory", s.redisOutOfMemory, true},
		{"MySQLStall", s.mysqlStall, false},
		{"RedisStall", s.redisStall, true},
		{"RedisLostReply", s.redisLostReply, true},
		{"MySQLCut", s.mysqlCut, false},
		{"RedisCut", s.redisCut, true},
		{"MySQLThrottledLargeRow", s.throttledLargeRow, false},
		{"StopWhileMySQLStalledAfterRedisFailed", s.stopWhileStalled, true},
	} {
		if c.name == "StopWhileMySQLStalledAfterRedisFailed" && !f.PromptStopOnDeadMySQLLink {
			continue
		}
		if c.redisFault && !tp.RedisFaults() {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			// Every case has its own database, Redis database and
			// proxies, and those that kill a server their own server.
			t.Parallel()
			c.run(t)
		})
	}
}

type suite struct {
	start StartFunc
	f     Features
	tp    Topology
}

// check verifies the streams; faulty says whether the case made an append's
// outcome uncertain (a lost reply, a crash), the only excuse for a duplicate.
func (s *suite) check(t *testing.T, env *Env, rec *Produced, faulty bool, skip map[string]bool) {
	t.Helper()
	exact := s.f.ExactlyOnce || s.f.AtLeastOnceWithDedupe || !faulty
	Check(context.Background(), t, env.Streams(), rec, CheckOptions{ExactlyOnce: exact, AnyOrder: !s.f.PerAggregateOrder, Skip: skip, Prefix: env.Prefix})
}

// envOptions say which servers a case needs for itself and where proxies
// go.
type envOptions struct {
	privateMySQL, privateRedis bool
	mysqlProxy, redisProxy     bool
}

// faultEnv is an Env with the proxies a case put in front of the servers.
type faultEnv struct {
	*Env
	MySQLProxy, RedisProxy *testsvc.Proxy
}

func (s *suite) newEnv(t *testing.T, o envOptions) *faultEnv {
	t.Helper()
	var my *testsvc.MariaDB
	if o.privateMySQL {
		my = testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	} else {
		my = testsvc.SharedMariaDB(t)
	}
	var e *faultEnv
	switch s.tp.Redis {
	case Sentinel:
		e = &faultEnv{Env: NewSentinelEnv(t, my, testsvc.SharedSentinels(t))}
	case Cluster:
		e = &faultEnv{Env: NewSharedClusterEnv(t, my, testsvc.SharedRedisCluster(t))}
	default:
		var rs *testsvc.Redis
		if o.privateRedis {
			rs = testsvc.StartRedis(t, testsvc.RedisOptions{})
		} else {
			rs = testsvc.SharedRedis(t)
		}
		e = &faultEnv{Env: NewEnv(t, my, rs)}
	}
	e.Topology = s.tp
	if (o.privateRedis || o.redisProxy) && !s.tp.RedisFaults() {
		t.Fatalf("a case that makes Redis fail runs on %s, whose Redis the suite cannot make fail (Topology.RedisFaults)", s.tp)
	}
	if o.mysqlProxy {
		e.MySQLProxy = testsvc.StartProxy(t, my.Addr())
		e.MySQLAddr = e.MySQLProxy.Addr()
	}
	if o.redisProxy {
		u, err := url.Parse(e.RedisURL)
		if err != nil {
			t.Fatalf("parse Redis URL: %v", err)
		}
		e.RedisProxy = testsvc.StartProxy(t, e.Redis.Addr())
		u.Host = e.RedisProxy.Addr()
		e.RedisURL = u.String()
	}
	// Appended as text: the hosts of a redis+sentinel:// URL are a list,
	// which net/url does not parse.
	q := url.Values{}
	for _, k := range []string{"read_timeout", "write_timeout", "dial_timeout"} {
		q.Set(k, RedisTimeout.String())
	}
	sep := "?"
	if strings.Contains(e.RedisURL, "?") {
		sep = "&"
	}
	e.RedisURL += sep + q.Encode()
	return e
}

// startRelay starts the relay and stops it when the test ends, unless the
// case stopped it itself.
func (s *suite) startRelay(t *testing.T, env *faultEnv) (stop func() error) {
	t.Helper()
	stopRelay := s.start(t, env.Env)
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { err = stopRelay() })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// stopClean stops the relay and fails the test if it returned an error.
func stopClean(t *testing.T, stop func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay returned %v after a clean stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("relay did not stop within 15s")
	}
}

func (s *suite) concurrentProducers(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	ctx := context.Background()
	stop := s.startRelay(t, env)
	rec := NewProduced()
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 6, Transactions: 40}, rec)
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	stopClean(t, stop)
	s.check(t, env.Env, rec, false, nil)
}

func (s *suite) resumeAfterRestart(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	ctx := context.Background()
	rec := NewProduced()
	stop := s.startRelay(t, env)
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 3, Transactions: 20}, rec)
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	stopClean(t, stop)
	// Written while no relay runs: the next one must pick them up.
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 3, Transactions: 20}, rec)
	stop = s.startRelay(t, env)
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	stopClean(t, stop)
	s.check(t, env.Env, rec, false, nil)
}

func (s *suite) stopIsPrompt(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	stop := s.startRelay(t, env)
	time.Sleep(200 * time.Millisecond)
	stopClean(t, stop)
}

// WaitDelivered waits until the streams hold at least as many entries as
// events were committed (Check then tells whether they are the right ones).
func WaitDelivered(t testing.TB, env *Env, rec *Produced, timeout time.Duration) {
	t.Helper()
	rec.mu.Lock()
	want := len(rec.Committed)
	rec.mu.Unlock()
	WaitFor(t, timeout, "all committed events in the streams", func() bool {
		return CountEntries(context.Background(), env.Streams(), env.Prefix) >= want
	})
}
