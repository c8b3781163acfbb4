package settings

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// RedisClient opens the client of the relay's appends: a cluster client
// with --redis-cluster, a client of c.Redis otherwise.
func (c Config) RedisClient() redis.UniversalClient {
	if c.RedisCluster != nil {
		return redisconn.NewClusterClientFromOptions(c.RedisCluster)
	}
	return c.Redis.NewClient(redisconn.DefaultTimeout)
}

// redisLogger adapts go-redis's internal logging to slog at debug level.
type redisLogger struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// redis resolves the Redis URL (the command line, the environment, the
// .env, the default), adds the password file and parses it into the target
// or, with --redis-cluster, the cluster.
func (c *Config) redis(vs values, env *laravelEnv, in Input, files secretReader) error {
	c.RedisURL = vs.str(nameRedisURL)
	pwFile := vs.str(nameRedisPasswordFile)
	if env != nil {
		c.LaravelEnv = env.path
		if vs[nameRedisURL].Source == Default {
			var err error
			if c.RedisURL, err = env.redisURL(pwFile == ""); err != nil {
				return err
			}
		}
	}
	if pwFile != "" {
		var err error
		if c.RedisURL, err = withRedisPassword(c.RedisURL, pwFile, files); err != nil {
			return err
		}
	}
	if vs.bool(nameRedisCluster) {
		return c.redisCluster(vs, in, files)
	}
	var err error
	c.Redis, err = redisTarget(vs, c.RedisURL, files)
	return err
}

// redisTarget parses the Redis URL with the --redis-sentinel-* and
// --redis-tls-* flags into the one description every command connects by.
func redisTarget(vs values, rawURL string, files secretReader) (*redisconn.Target, error) {
	t, err := redisconn.ParseTarget(rawURL, vs.str(nameSentinelMaster))
	if errors.Is(err, outbox.ErrConfig) {
		return nil, err
	}
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse: %s", outbox.ErrConfig, logging.RedactURL(rawURL), withheld(rawURL, err)),
			"write it as redis://[user:pass@]host:6379/0, or rediss:// for TLS, or redis+sentinel://[user:pass@]host1:26379,host2:26379/<master>/0 for Sentinel; percent-encode special characters in the password")
	}
	user, pwFile := vs.str(nameSentinelUser), vs.str(nameSentinelPWFile)
	if t.Sentinel == nil && (user != "" || pwFile != "") {
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-sentinel-user or --redis-sentinel-password-file is set, but --redis-url names no Sentinel", outbox.ErrConfig),
			"write --redis-url as redis+sentinel://host1:26379,host2:26379/<master>/<db> (or set --redis-sentinel-master), or drop the sentinel flags")
	}
	if t.Sentinel != nil {
		t.Sentinel.Username = user
		if pwFile != "" {
			if t.Sentinel.Password, err = files.read(pwFile, "--"+nameSentinelPWFile); err != nil {
				return nil, err
			}
		}
	}
	if err := applyRedisTLS(readTLSFiles(vs, "redis"), t, files); err != nil {
		return nil, err
	}
	return t, nil
}

// withRedisPassword puts the password from path into a Redis URL that has
// none, keeping its user name (an ACL user) if it has one.
func withRedisPassword(rawURL, path string, files secretReader) (string, error) {
	pw, err := files.read(path, "--"+nameRedisPasswordFile)
	if err != nil {
		return "", err
	}
	out, had, err := redisconn.SetURLPassword(rawURL, pw)
	if err != nil {
		return "", outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse", outbox.ErrConfig, logging.RedactURL(rawURL)),
			"write it as redis://[user@]host:6379/0, or rediss:// for TLS, or redis+sentinel://[user@]host1:26379,host2:26379/<master>/0")
	}
	if had {
		return "", outbox.WithHint(fmt.Errorf("%w: --redis-url has a password and --redis-password-file is set", outbox.ErrConfig),
			"keep the password in one place: drop it from the URL (redis://[user@]host:6379/0) when it comes from the file")
	}
	return out, nil
}

// redisCluster parses --redis-url as a cluster URL. c.Redis then holds the
// options of the first node, which check inspects, with the TLS flags
// applied; c.RedisCluster shares them.
func (c *Config) redisCluster(vs values, in Input, files secretReader) error {
	if !in.ClusterOK {
		return outbox.WithHint(fmt.Errorf("%w: %s does not support --redis-cluster yet", outbox.ErrConfig, in.Command),
			"run it against one master with --redis-url redis://host:port and without --redis-cluster; the commands that know a cluster's slots are run, check, status, verify, repair, mark-appended, position, dead-letters and cleanup")
	}
	co, err := redis.ParseClusterURL(c.RedisURL)
	if err != nil {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url %s is not a cluster URL: %s", outbox.ErrConfig, logging.RedactURL(c.RedisURL), withheld(c.RedisURL, err)),
			"write it as redis://[user:pass@]host1:port1?addr=host2:port2&addr=host3:port3 (any nodes of the cluster; the rest are discovered), rediss:// for TLS")
	}
	u, err := url.Parse(c.RedisURL)
	if err != nil {
		return fmt.Errorf("%w: --redis-url %s does not parse", outbox.ErrConfig, logging.RedactURL(c.RedisURL))
	}
	q := u.Query()
	q.Del("addr")
	u.RawQuery = q.Encode()
	if u.Path != "" && u.Path != "/" && u.Path != "/0" {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url names database %s: a Redis Cluster has database 0 only", outbox.ErrConfig, u.Path[1:]),
			"drop the database from the URL, or write /0")
	}
	if vs.str(nameSentinelMaster) != "" {
		return outbox.WithHint(fmt.Errorf("%w: --redis-cluster and --redis-sentinel-master name two kinds of Redis", outbox.ErrConfig),
			"give one: a cluster's nodes with --redis-cluster, or the sentinels of one master with --redis-sentinel-master")
	}
	first, err := redis.ParseURL(u.String())
	if err != nil {
		return outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse: %s", outbox.ErrConfig, logging.RedactURL(c.RedisURL), withheld(c.RedisURL, err)),
			"write it as redis://[user:pass@]host1:port1?addr=host2:port2")
	}
	c.Redis = &redisconn.Target{Options: first}
	if err := applyRedisTLS(readTLSFiles(vs, "redis"), c.Redis, files); err != nil {
		return err
	}
	co.TLSConfig = first.TLSConfig
	c.RedisCluster = co
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

// clusterCommands are the commands that know Redis Cluster (by their path,
// e.g. "position show"): the others read keys (SCAN, the position) as one
// standalone Redis holds them. cleanup reads the position key, a lower
// bound of every slot's, and waits for the replicas (admin's cluster
// guard).
var clusterCommands = map[string]bool{
	"run": true, "check": true, "cleanup": true,
	"status": true, "verify": true, "mark-appended": true, "repair": true,
	"position show": true, "position set": true, "position reset": true,
	"dead-letters list": true, "dead-letters replay": true, "dead-letters purge": true,
}

// KnowsCluster says the command of that path ("position show") knows Redis
// Cluster: Input.ClusterOK for it.
func KnowsCluster(command string) bool { return clusterCommands[command] }
