package servers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReadyTimeout bounds the wait for a cluster to agree on its slots,
// after a create or a failover.
const clusterReadyTimeout = 60 * time.Second

// RedisCluster is a private Redis Cluster: redis-server processes with
// cluster mode on, masters with replicas, on loopback ports.
type RedisCluster struct {
	// Nodes are every node, masters first as created; a failover swaps
	// roles without reordering them.
	Nodes []*Redis
}

// StartRedisCluster starts masters*(1+replicas) nodes in subdirectories of
// dir, creates the cluster with redis-cli --cluster create (the slots spread
// evenly over the masters, replicas replicas each) and waits until every
// node sees every slot served. args follow the fixed ones of each node.
func StartRedisCluster(ctx context.Context, dir string, masters, replicas int, args []string) (*RedisCluster, error) {
	bin, err := lookRedis("-server")
	if err != nil {
		return nil, err
	}
	cli, err := lookRedis("-cli")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{}
	for i := range masters * (1 + replicas) {
		ndir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			c.Kill()
			return nil, fmt.Errorf("redis cluster: %w", err)
		}
		r := &Redis{bin: bin, dir: ndir, args: args}
		if r.port, err = onFreePort(func(port int) error {
			bus, err := FreePort()
			if err != nil {
				return err
			}
			r.port, r.clusterPort = port, bus
			return r.Start(ctx)
		}); err != nil {
			c.Kill()
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
	}
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := cli.command(ctx, create...).CombinedOutput(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("%s --cluster create: %v\n%s", cli, err, out)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// Addrs returns the addresses of the nodes.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL returns the cluster in go-redis's cluster URL form: the first node,
// the others as addr parameters.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
}

// Client returns a cluster client for administration and checks.
func (c *RedisCluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: time.Second})
}

// node returns a client of one node.
func node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
}

// Role returns "master" or "slave" as the node at index i says of itself.
func (c *RedisCluster) Role(ctx context.Context, i int) (string, error) {
	n := node(c.Nodes[i].Addr())
	defer n.Close()
	v, err := n.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE of %s: %w", c.Nodes[i].Addr(), err)
	}
	role, _ := v[0].(string)
	return role, nil
}

// MasterOf returns the index of the node that serves slot.
func (c *RedisCluster) MasterOf(ctx context.Context, slot int) (int, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := node(n.Addr())
		slots, err := cl.ClusterSlots(ctx).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if slot >= int(s.Start) && slot <= int(s.End) && len(s.Nodes) > 0 {
				return c.index(s.Nodes[0].Addr)
			}
		}
	}
	return 0, fmt.Errorf("no running node knows who serves slot %d", slot)
}

// ReplicaOf returns the index of a replica of the master at index m.
func (c *RedisCluster) ReplicaOf(ctx context.Context, m int) (int, error) {
	for i, n := range c.Nodes {
		if i == m || !n.Running() {
			continue
		}
		cl := node(n.Addr())
		info, err := cl.Info(ctx, "replication").Result()
		cl.Close()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+strconv.Itoa(c.Nodes[m].port)+"\r\n") {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no running replica of %s", c.Nodes[m].Addr())
}

func (c *RedisCluster) index(addr string) (int, error) {
	for i, n := range c.Nodes {
		if n.Addr() == addr {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%s is not a node of the cluster", addr)
}

// Failover makes the replica at index i take over from its master (CLUSTER
// FAILOVER: the master stops taking writes until the replica caught up, so
// no acknowledged write is lost) and waits until the cluster is healthy.
func (c *RedisCluster) Failover(ctx context.Context, i int) error {
	n := node(c.Nodes[i].Addr())
	defer n.Close()
	if err := n.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return fmt.Errorf("CLUSTER FAILOVER on %s: %w", c.Nodes[i].Addr(), err)
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		role, err := c.Role(ctx, i)
		if err == nil && role == "master" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not a master %s after CLUSTER FAILOVER (role %q, %v)", c.Nodes[i].Addr(), clusterReadyTimeout, role, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c.WaitHealthy(ctx)
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// sees each slot served by a running master, and every running replica's
// link to its master is up.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(clusterReadyTimeout)
	var last error
	for {
		if last = c.healthy(ctx); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis cluster not healthy after %s: %w", clusterReadyTimeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) healthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := node(n.Addr())
		info, err := cl.ClusterInfo(ctx).Result()
		var slots []redis.ClusterSlot
		var repl string
		if err == nil {
			slots, err = cl.ClusterSlots(ctx).Result()
		}
		if err == nil {
			repl, err = cl.Info(ctx, "replication").Result()
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", n.Addr())
		}
		// A replica still in its first sync would lose everything in a
		// failover: tests of failovers start from synced replicas.
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: the replica's link to its master is not up", n.Addr())
		}
		covered := 0
		for _, s := range slots {
			if len(s.Nodes) == 0 {
				continue
			}
			i, err := c.index(s.Nodes[0].Addr)
			if err != nil {
				return fmt.Errorf("%s: slots %d-%d served by %s, which is not a node of this cluster", n.Addr(), s.Start, s.End, s.Nodes[0].Addr)
			}
			if !c.Nodes[i].Running() {
				return fmt.Errorf("%s: slots %d-%d served by %s, which is down", n.Addr(), s.Start, s.End, s.Nodes[0].Addr)
			}
			covered += int(s.End-s.Start) + 1
		}
		if covered != 16384 {
			return fmt.Errorf("%s: %d of 16384 slots served", n.Addr(), covered)
		}
	}
	return nil
}

// Kill kills every running node.
func (c *RedisCluster) Kill() {
	for _, n := range c.Nodes {
		if n.Running() {
			n.Kill()
		}
	}
}
