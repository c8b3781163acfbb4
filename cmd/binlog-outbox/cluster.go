package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// clusterCommands are the commands that know Redis Cluster (by their path,
// e.g. "position show"): the others read keys (SCAN, the position) as one
// standalone Redis holds them. cleanup reads the position key, a lower
// bound of every slot's, and waits for the replicas (clusterGuard).
var clusterCommands = map[string]bool{
	"run": true, "check": true, "cleanup": true,
	"status": true, "verify": true, "mark-appended": true,
	"position show": true, "position set": true, "position reset": true,
	"dead-letters list": true, "dead-letters replay": true, "dead-letters purge": true,
}

// commandPath is the command's name after its parents', e.g. "position
// show" (urfave/cli v2's FullName gives the last name only).
func commandPath(c *cli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	return strings.Join(slices.Compact(names), " ")
}

// redisClient opens the client of the relay's appends: a cluster client
// with --redis-cluster, a client of cfg.Redis otherwise.
func (c config) redisClient() redis.UniversalClient {
	if c.RedisCluster != nil {
		return redisstream.NewClusterClientFromOptions(c.RedisCluster)
	}
	return c.Redis.NewClient(redisstream.DefaultTimeout)
}

// seedTimeout bounds the PING of each node checkedRedis tries.
const seedTimeout = 2 * time.Second

// checkedRedis is the Redis the preflight inspects: cfg.Redis or, with
// --redis-cluster, the first node of --redis-url that answers a PING. The
// cluster client finds every node from any one of them, so a dead first
// node (a master that failed over and is not back) must not keep the relay
// from starting; when none answers, the first is checked, and its failure
// reported.
func (c config) checkedRedis(ctx context.Context) *redisstream.Target {
	if c.RedisCluster == nil || len(c.RedisCluster.Addrs) < 2 {
		return c.Redis
	}
	for i, addr := range c.RedisCluster.Addrs {
		o := *c.Redis.Options
		o.Addr = addr
		client := redis.NewClient(redisstream.ClientOptions(&o, seedTimeout))
		pctx, cancel := context.WithTimeout(ctx, seedTimeout)
		err := client.Ping(pctx).Err()
		cancel()
		client.Close()
		if err == nil || isRedisReply(err) {
			// A reply, even an error (credentials, ACL), is the node to
			// report on.
			if i > 0 {
				c.Logger.Info("the first node of --redis-url does not answer; checking the cluster through another", "first", c.RedisCluster.Addrs[0], "node", addr)
			}
			return &redisstream.Target{Options: &o}
		}
	}
	return c.Redis
}

// isRedisReply reports whether err is an error reply of a Redis server.
func isRedisReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
