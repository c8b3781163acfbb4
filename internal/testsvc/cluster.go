package testsvc

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/servers"
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
	dir, err := tempDir("bo-redis-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	// Cluster nodes have one database; a node that loses its master for
	// 2s is replaced by its replica.
	args := []string{"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction",
		"--cluster-node-timeout", "2000"}
	c, err := servers.StartRedisCluster(context.Background(), dir, 3, 1, args)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("start Redis Cluster: %v", err)
	}
	t.Cleanup(func() {
		c.Kill()
		_ = os.RemoveAll(dir)
	})
	return &RedisCluster{RedisCluster: c}
}

// Client returns a cluster client, closed at the end of the test.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := c.RedisCluster.Client()
	t.Cleanup(func() { cl.Close() })
	return cl
}
