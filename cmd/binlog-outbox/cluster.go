package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

const envRedisCluster = "BINLOG_OUTBOX_REDIS_CLUSTER"

func redisClusterFlag() cli.Flag {
	return &cli.BoolFlag{
		Name:    "redis-cluster",
		Usage:   "--redis-url names a Redis Cluster by some of its nodes, redis://[user:pass@]host1:port1?addr=host2:port2&addr=host3:port3 (rediss:// and the --redis-tls-* flags for TLS); binlog mode keeps a position per hash slot, and --lease a fence per hash slot (docs/scaling.md)",
		EnvVars: []string{envRedisCluster},
	}
}

// clusterCommands are the commands that know Redis Cluster (by their path,
// e.g. "position show"): the others read keys (SCAN, the position) as one
// standalone Redis holds them. cleanup reads the position key, a lower
// bound of every slot's, and waits for the replicas (clusterGuard).
var clusterCommands = map[string]bool{
	"run": true, "check": true, "cleanup": true,
	"status": true, "verify": true, "mark-appended": true,
	"position show": true, "position set": true, "position reset": true,
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

// loadRedisCluster parses --redis-url as a cluster URL when --redis-cluster
// is set. cfg.Redis then holds the options of the first node, which check
// inspects, with the TLS flags applied; cfg.RedisCluster shares them.
func loadRedisCluster(c *cli.Context, cfg *config) error {
	if !globalCtx(c, "redis-cluster").Bool("redis-cluster") {
		return nil
	}
	if name := commandPath(c); !clusterCommands[name] {
		return usageError{outbox.WithHint(fmt.Errorf("%w: %s does not support --redis-cluster yet", outbox.ErrConfig, name),
			"run it against one master with --redis-url redis://host:port and without --redis-cluster; the commands that know a cluster's slots are run, check, status, verify, mark-appended, position and cleanup")}
	}
	co, err := redis.ParseClusterURL(cfg.redisURL)
	if err != nil {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url %s is not a cluster URL: %s", outbox.ErrConfig, logging.RedactURL(cfg.redisURL), withheld(cfg.redisURL, err)),
			"write it as redis://[user:pass@]host1:port1?addr=host2:port2&addr=host3:port3 (any nodes of the cluster; the rest are discovered), rediss:// for TLS")
	}
	u, err := url.Parse(cfg.redisURL)
	if err != nil {
		return fmt.Errorf("%w: --redis-url %s does not parse", outbox.ErrConfig, logging.RedactURL(cfg.redisURL))
	}
	q := u.Query()
	q.Del("addr")
	u.RawQuery = q.Encode()
	if u.Path != "" && u.Path != "/" && u.Path != "/0" {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url names database %s: a Redis Cluster has database 0 only", outbox.ErrConfig, u.Path[1:]),
			"drop the database from the URL, or write /0")
	}
	if globalString(c, "redis-sentinel-master") != "" {
		return usageError{outbox.WithHint(fmt.Errorf("%w: --redis-cluster and --redis-sentinel-master name two kinds of Redis", outbox.ErrConfig),
			"give one: a cluster's nodes with --redis-cluster, or the sentinels of one master with --redis-sentinel-master")}
	}
	first, err := redis.ParseURL(u.String())
	if err != nil {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse: %s", outbox.ErrConfig, logging.RedactURL(cfg.redisURL), withheld(cfg.redisURL, err)),
			"write it as redis://[user:pass@]host1:port1?addr=host2:port2")
	}
	cfg.Redis = &redisstream.Target{Options: first}
	if err := applyRedisTLS(c, cfg.Redis); err != nil {
		return err
	}
	co.TLSConfig = first.TLSConfig
	cfg.RedisCluster = co
	return nil
}

// withheld is a URL parser's message, unless the URL has a password the
// message may quote part of.
func withheld(rawURL string, err error) string {
	if logging.URLPassword(rawURL) != "" {
		return "the parser's message is withheld, as it may quote part of the password"
	}
	return err.Error()
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
