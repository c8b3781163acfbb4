package testsvc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// RedisCluster is a private Redis Cluster for one test: 3 masters with a
// replica each, durable as DefaultRedisArgs makes a single server.
type RedisCluster struct {
	*servers.RedisCluster
}

// StartRedisCluster starts a private cluster, killed when the test ends.
// There is no external mode: the tests fail over and kill its nodes.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c, stop, err := startRedisCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c
}

// SharedRedisCluster returns the test binary's shared cluster, starting it
// on first use, for tests that neither kill nor fail over its nodes: they
// isolate themselves by key prefix (a cluster has database 0 only).
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedCluster == nil && sharedErrCluster == nil {
		var stop func()
		if sharedCluster, stop, sharedErrCluster = startRedisCluster(); sharedErrCluster == nil {
			registerCleanup(stop)
		}
	}
	if sharedErrCluster != nil {
		t.Fatalf("start the shared Redis Cluster: %v", sharedErrCluster)
	}
	return sharedCluster
}

// startRedisCluster starts 3 masters with a replica each in a directory of
// their own; stop kills them and removes it.
func startRedisCluster() (c *RedisCluster, stop func(), err error) {
	dir, err := tempDir("bo-redis-cluster-")
	if err != nil {
		return nil, nil, err
	}
	// Cluster nodes have one database; a node that loses its master for
	// 2s is replaced by its replica.
	args := []string{"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction",
		"--cluster-node-timeout", "2000"}
	rc, err := servers.StartRedisCluster(context.Background(), dir, 3, 1, args)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start Redis Cluster: %w", err)
	}
	return &RedisCluster{RedisCluster: rc}, func() {
		rc.Kill()
		_ = os.RemoveAll(dir)
	}, nil
}

// Client returns a cluster client, closed at the end of the test.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := c.RedisCluster.Client()
	t.Cleanup(func() { cl.Close() })
	return cl
}

// nodeClient returns a client of node i alone, without retries, so that a
// check sees the node's own answer.
func (c *RedisCluster) nodeClient(i int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr(), MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
}

// NodeClient returns a client of node i alone (no redirects, no retries),
// closed at the end of the test: what that node holds, not what the cluster
// routes to.
func (c *RedisCluster) NodeClient(t testing.TB, i int) *redis.Client {
	t.Helper()
	n := c.nodeClient(i)
	t.Cleanup(func() { n.Close() })
	return n
}

// Pause stops node i with SIGSTOP: it neither reads its sockets nor answers,
// while the kernel still accepts what fits in its receive buffers. resume
// (SIGCONT) is also run at the end of the test, so that a paused node can be
// shut down.
func (c *RedisCluster) Pause(t testing.TB, i int) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := c.nodeClient(i)
	info, err := n.Info(ctx, "server").Result()
	n.Close()
	if err != nil {
		t.Fatalf("INFO server of node %d: %v", i, err)
	}
	pid, err := infoInt(info, "process_id")
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP node %d (pid %d): %v", i, pid, err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(int(pid), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}

// ReplicaBacklog returns how many bytes of the replication stream master m
// holds in its output buffers for its replicas, not yet handed to the
// kernel (the omem of CLIENT LIST TYPE replica, summed): writes that die
// with m if it is killed now.
func (c *RedisCluster) ReplicaBacklog(ctx context.Context, m int) (int64, error) {
	n := c.nodeClient(m)
	defer n.Close()
	list, err := n.Do(ctx, "CLIENT", "LIST", "TYPE", "replica").Text()
	if err != nil {
		return 0, fmt.Errorf("CLIENT LIST TYPE replica on node %d: %w", m, err)
	}
	var total int64
	for _, field := range strings.Fields(list) {
		if v, ok := strings.CutPrefix(field, "omem="); ok {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("node %d: omem %q: %w", m, v, err)
			}
			total += b
		}
	}
	return total, nil
}

// WaitReplicated waits until replica r has processed the replication
// stream of master m as far as m had written when called: what m held
// then survives the loss of m.
func (c *RedisCluster) WaitReplicated(ctx context.Context, m, r int) error {
	offset := func(i int, field string) (int64, error) {
		n := c.nodeClient(i)
		defer n.Close()
		info, err := n.Info(ctx, "replication").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO replication of node %d: %w", i, err)
		}
		return infoInt(info, field)
	}
	want, err := offset(m, "master_repl_offset")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := offset(r, "slave_repl_offset")
		if err == nil && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %d at offset %d (%v) 30s after its master %d was at %d", r, got, err, m, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Takeover makes replica i its master's master without the agreement of
// the other nodes or of its master (CLUSTER FAILOVER TAKEOVER: what an
// operator does when the master is gone and the cluster cannot promote on
// its own), and waits until the cluster is healthy. Whatever the replica
// had not received is gone.
func (c *RedisCluster) Takeover(ctx context.Context, i int) error {
	n := c.nodeClient(i)
	defer n.Close()
	if err := n.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		return fmt.Errorf("CLUSTER FAILOVER TAKEOVER on node %d: %w", i, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		role, err := c.Role(ctx, i)
		if err == nil && role == "master" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d is not a master 30s after CLUSTER FAILOVER TAKEOVER (role %q, %v)", i, role, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c.WaitHealthy(ctx)
}

// infoInt returns the integer field name of an INFO reply.
func infoInt(info, name string) (int64, error) {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}
