package testsvc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// SentinelMaster is the name the sentinels of StartSentinels monitor the
// master under.
const SentinelMaster = "outbox-master"

// Timing of the sentinels of StartSentinels: a master that does not answer
// for three seconds is down, and a failover takes a few seconds. The
// sentinels promote no replica whose link has been down for more than ten
// down-afters before the master was: with one second, a test that cut
// replication (CutReplication) and then loaded a busy machine for ten
// seconds before the kill never saw a promotion.
const (
	sentinelDownAfter       = 3 * time.Second
	sentinelFailoverTimeout = 10 * time.Second
	// sentinelWait bounds waiting for the sentinels to see the topology or
	// to finish a failover, on a loaded machine.
	sentinelWait = 45 * time.Second
)

// replicationUser is the ACL user the replica authenticates to the master
// as (masteruser), so that a test can cut replication (CutReplication)
// without making the master look down to the sentinels.
const replicationUser, replicationPassword = "replication", "repl-pw-9t"

// SentinelOptions configures StartSentinels.
type SentinelOptions struct {
	// Password, when set, is the sentinels' requirepass: clients
	// authenticate to the sentinels with it, not to the master.
	Password string
}

// Sentinels is a private Redis master with one replica, watched by three
// sentinels (quorum 2), for one test: a failover test can make a sentinel
// fail the master over (Failover), kill it (KillMaster) and cut its
// replication first, so that the master acknowledges writes the replica
// that takes its place never gets (CutReplication).
type Sentinels struct {
	nodes     []*Redis
	sentinels []*servers.Sentinel
	password  string
	nextDB    atomic.Int64
}

// StartSentinels starts the master, its replica (caught up) and the three
// sentinels, and waits until every sentinel knows the replica and the other
// two, so that either kind of failover can happen. Everything stops when
// the test ends. In external mode the test is skipped.
func StartSentinels(t testing.TB, opts SentinelOptions) *Sentinels {
	t.Helper()
	if os.Getenv(EnvRedisURL) != "" {
		skipExternal(t, "start Redis servers and sentinels of its own", EnvRedisURL)
	}
	s, stop, err := startSentinels(opts)
	if stop != nil {
		t.Cleanup(stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SharedSentinels returns the test binary's shared Sentinel set (no
// sentinel password), starting it on first use, for tests that neither fail
// over nor kill its servers: they isolate themselves with NewDB. In
// external mode the test is skipped.
func SharedSentinels(t testing.TB) *Sentinels {
	t.Helper()
	if os.Getenv(EnvRedisURL) != "" {
		skipExternal(t, "start Redis servers and sentinels of its own", EnvRedisURL)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSentinels == nil && sharedErrSentinel == nil {
		s, stop, err := startSentinels(SentinelOptions{})
		if stop != nil {
			registerCleanup(stop)
		}
		sharedSentinels, sharedErrSentinel = s, err
	}
	if sharedErrSentinel != nil {
		t.Fatalf("start the shared sentinels: %v", sharedErrSentinel)
	}
	return sharedSentinels
}

// startSentinels starts what StartSentinels describes; stop, when not nil,
// stops what was started, also after an error.
func startSentinels(opts SentinelOptions) (s *Sentinels, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	repl := []string{"--masteruser", replicationUser, "--masterauth", replicationPassword}
	s = &Sentinels{password: opts.Password}
	for i := 0; i < 2; i++ {
		args := repl
		if i == 1 {
			args = append(append([]string{}, repl...), "--replicaof", "127.0.0.1", strconv.Itoa(s.nodes[0].srv.Port()))
		}
		r, err := startRedis(RedisOptions{Args: args}, false)
		if err != nil {
			return nil, stop, fmt.Errorf("start Redis: %w", err)
		}
		stops = append(stops, r.shutdown)
		if err := r.setReplicationUser(); err != nil {
			return nil, stop, err
		}
		s.nodes = append(s.nodes, r)
	}
	for i := 0; i < 3; i++ {
		dir, err := tempDir("bo-sentinel-")
		if err != nil {
			return nil, stop, err
		}
		sn, err := servers.StartSentinel(context.Background(), dir, servers.SentinelConfig{
			Master: SentinelMaster, MasterAddr: s.nodes[0].Addr(), Quorum: 2,
			DownAfter: sentinelDownAfter, FailoverTimeout: sentinelFailoverTimeout, Password: opts.Password,
		})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, stop, fmt.Errorf("start sentinel: %w", err)
		}
		stops = append(stops, func() {
			sn.Stop(10 * time.Second)
			_ = os.RemoveAll(dir)
		})
		s.sentinels = append(s.sentinels, sn)
	}
	err = s.wait("every sentinel to know the replica and the other sentinels", func(ctx context.Context) (bool, error) {
		for _, sn := range s.sentinels {
			if ok, err := sn.Knows(ctx, 1, len(s.sentinels)-1); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	return s, stop, err
}

// setReplicationUser creates the ACL user replicas authenticate as. ACL
// users are not replicated: each node has its own.
func (r *Redis) setReplicationUser() error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if err := c.Do(context.Background(), setUserArgs(replicationUser, replicationPassword, "~* &* +@all", nil)...).Err(); err != nil {
		return fmt.Errorf("ACL SETUSER %s: %w", replicationUser, err)
	}
	return nil
}

// ACLLog returns the entries of the sentinels' ACL LOG: the commands,
// keys and channels they refused a user.
func (s *Sentinels) ACLLog(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, sn := range s.sentinels {
		c := sn.Client()
		cmd := redis.NewSliceCmd(context.Background(), "ACL", "LOG")
		err := c.Process(context.Background(), cmd)
		c.Close()
		if err != nil {
			t.Fatalf("ACL LOG on sentinel %s: %v", sn.Addr(), err)
		}
		for _, e := range cmd.Val() {
			out = append(out, fmt.Sprintf("%s: %v", sn.Addr(), e))
		}
	}
	return out
}

// Addrs returns the sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	out := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		out[i] = sn.Addr()
	}
	return out
}

// URL returns the redis+sentinel:// URL of logical database db of the
// master the sentinels name.
func (s *Sentinels) URL(db int) string {
	return fmt.Sprintf("redis+sentinel://%s/%s/%d", strings.Join(s.Addrs(), ","), SentinelMaster, db)
}

// NewDB reserves an empty logical database for the test and returns its
// redis+sentinel:// URL and its number.
func (s *Sentinels) NewDB(t testing.TB) (string, int) {
	t.Helper()
	db := 1 + int(s.nextDB.Add(1)-1)%(redisDatabases-1)
	c := s.Client(t, db)
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush Redis db %d: %v", db, err)
	}
	return s.URL(db), db
}

// Client returns a client of database db that follows the master through
// the sentinels (go-redis's failover client), closed at the end of the test.
func (s *Sentinels) Client(t testing.TB, db int) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.Addrs(), SentinelPassword: s.password, DB: db})
	t.Cleanup(func() { c.Close() })
	return c
}

// SetUser creates (or replaces) the ACL user name on the master and its
// replica, as Redis.SetUser does: ACL users are not replicated, and the
// replica must know the relay's user by the time it is promoted.
func (s *Sentinels) SetUser(t testing.TB, name, password, rules string) {
	t.Helper()
	for _, n := range s.nodes {
		n.SetUser(t, name, password, rules)
	}
}

// SetSentinelUser creates (or replaces) the ACL user name with password
// and the ACL rules on every sentinel, as Redis.SetUser does on a server.
func (s *Sentinels) SetSentinelUser(t testing.TB, name, password, rules string) {
	t.Helper()
	for _, sn := range s.sentinels {
		c := sn.Client()
		err := c.Process(context.Background(), redis.NewStatusCmd(context.Background(), setUserArgs(name, password, rules, nil)...))
		c.Close()
		if err != nil {
			t.Fatalf("ACL SETUSER %s on sentinel %s: %v", name, sn.Addr(), err)
		}
	}
}

// MasterAddr returns the master's address as the first sentinel names it.
func (s *Sentinels) MasterAddr(t testing.TB) string {
	t.Helper()
	addr, err := s.sentinels[0].MasterAddr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// master returns the node the sentinels name master now.
func (s *Sentinels) master(t testing.TB) *Redis {
	t.Helper()
	addr := s.MasterAddr(t)
	for _, n := range s.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	t.Fatalf("the sentinels name %s master, which is none of the test's servers", addr)
	return nil
}

// Node returns a client of database db on the server the sentinels name
// master now or, with replica, on the other one, bypassing the sentinels:
// to see what each server holds. It is closed at the end of the test.
func (s *Sentinels) Node(t testing.TB, replica bool, db int) *redis.Client {
	t.Helper()
	m := s.master(t)
	for _, n := range s.nodes {
		if (n == m) != replica {
			c := redis.NewClient(&redis.Options{Addr: n.Addr(), DB: db, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		}
	}
	t.Fatalf("no replica of %s", m.Addr())
	return nil
}

// CutReplication stops the master's replication for good: the replica's
// user is turned off and its link killed, so that it cannot resynchronize,
// while the sentinels still see the master up and the replica healthy. What
// the master acknowledges from now on no replica has: a failover loses it,
// as asynchronous replication does when the master dies with a backlog.
// Kill the master within seconds: the sentinels promote no replica whose
// link has been down for more than ten times their down-after time (30s).
func (s *Sentinels) CutReplication(t testing.TB) {
	t.Helper()
	c := s.master(t).Client(t, s.master(t).URL(0))
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", replicationUser, "off").Err(); err != nil {
		t.Fatalf("turn the replication user off: %v", err)
	}
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("kill the replica's link: %v", err)
	}
}

// WaitReplicated waits until the replica has everything the master has
// acknowledged so far.
func (s *Sentinels) WaitReplicated(t testing.TB) {
	t.Helper()
	c := s.master(t).Client(t, s.master(t).URL(0))
	ctx := context.Background()
	if err := c.Set(ctx, "binlog-outbox:test:replicated", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := c.Wait(ctx, 1, 30*time.Second).Result()
	if err != nil || n < 1 {
		t.Fatalf("WAIT 1: %d replicas, %v; want the replica to catch up", n, err)
	}
}

// Failover makes a sentinel fail the master over (SENTINEL FAILOVER) and
// waits until every sentinel names the replica master and it takes writes.
// It returns the old master's and the new master's addresses.
func (s *Sentinels) Failover(t testing.TB) (from, to string) {
	t.Helper()
	from = s.MasterAddr(t)
	if err := s.sentinels[0].Failover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return from, s.waitNewMaster(t, from)
}

// KillMaster sends SIGKILL to the master and waits until the sentinels
// have agreed it is down and promoted the replica, which takes writes. It
// returns the old master's and the new master's addresses.
func (s *Sentinels) KillMaster(t testing.TB) (from, to string) {
	t.Helper()
	m := s.master(t)
	from = m.Addr()
	m.Kill(t)
	return from, s.waitNewMaster(t, from)
}

// waitNewMaster waits until every sentinel names another master than old
// and that one accepts writes.
func (s *Sentinels) waitNewMaster(t testing.TB, old string) string {
	t.Helper()
	var now string
	s.waitFor(t, "the sentinels to promote the replica in place of "+old, func(ctx context.Context) (bool, error) {
		for _, sn := range s.sentinels {
			addr, err := sn.MasterAddr(ctx)
			if err != nil || addr == old {
				return false, err
			}
			now = addr
		}
		c := redis.NewClient(&redis.Options{Addr: now, MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		defer c.Close()
		return c.Set(ctx, "binlog-outbox:test:promoted", "1", time.Minute).Err() == nil, nil
	})
	return now
}

// waitFor polls cond until it holds, failing the test after sentinelWait
// with the last error and the sentinels' logs' tails.
func (s *Sentinels) waitFor(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := s.wait(what, cond); err != nil {
		t.Fatal(err)
	}
}

// wait is waitFor returning the failure.
func (s *Sentinels) wait(what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(sentinelWait)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	logs := ""
	for _, sn := range s.sentinels {
		b, _ := os.ReadFile(sn.LogPath())
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		logs += "\n--- " + sn.LogPath() + "\n" + strings.Join(lines[max(0, len(lines)-15):], "\n")
	}
	return fmt.Errorf("waited %s for %s; last error: %v%s", sentinelWait, what, last, logs)
}
