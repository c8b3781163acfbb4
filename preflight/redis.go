package preflight

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// redisTimeout bounds each command of the checks: INFO and CONFIG GET answer
// at once on a healthy server, and a check must report, not hang.
const redisTimeout = 3 * time.Second

// afterRedis lists the requirements checked once Redis answers.
var afterRedis = []requirement{{NameRedisEviction, both}, {NameRedisPersistence, both}}

// errRedisUnchecked is why the stored position was not read: the Redis
// result says what is wrong.
var errRedisUnchecked = errors.New("the redis check failed")

// checkRedis checks that Redis answers, has streams, does not evict keys and
// persists what it acknowledges, and reads the position stored at
// positionKey for checkFailover (nil: none). Messages name the address,
// never the URL, which may carry a password.
func checkRedis(ctx context.Context, rawURL, positionKey string) (results []Result, stored []byte, storedErr error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		// url.Parse errors quote the whole URL, password included.
		msg := parseError(err, logging.URLPassword(rawURL))
		return append([]Result{fail(NameRedis, "cannot parse --redis-url "+logging.RedactURL(rawURL)+": "+msg,
			"write it as redis://[user:password@]host:6379/0, or rediss:// for TLS; percent-encode special characters in the password", both)},
			skipAll(afterRedis, "not checked: the Redis URL is invalid")...), nil, errRedisUnchecked
	}
	scrub := func(err error) string { return safeError(err, opts.Password) }
	// One attempt: the check reports, the relay's own client retries.
	c := redis.NewClient(redisstream.ClientOptions(opts, redisTimeout))
	defer c.Close()

	info, err := c.Info(ctx).Result()
	if err != nil {
		return append([]Result{fail(NameRedis, fmt.Sprintf("cannot reach Redis at %s: %s", opts.Addr, scrub(err)),
			"check host, port and password in --redis-url, and that Redis runs and accepts connections from this host", both)},
			skipAll(afterRedis, "not checked: Redis is unreachable")...), nil, errRedisUnchecked
	}
	fields := parseInfo(info)
	version := fields["redis_version"]
	var out []Result
	if major, _, _ := strings.Cut(version, "."); atoi(major) < 5 {
		out = append(out, fail(NameRedis, fmt.Sprintf("Redis %s at %s has no streams", orUnset(version), opts.Addr),
			"upgrade to Redis 5.0 or later (7.0 or later recommended)", both))
	} else {
		out = append(out, pass(NameRedis, fmt.Sprintf("Redis %s at %s, db %d", version, opts.Addr, opts.DB), both))
	}
	out = append(out, checkEviction(fields["maxmemory_policy"]))
	fsync := ""
	if cfg, err := c.ConfigGet(ctx, "appendfsync").Result(); err == nil {
		fsync = cfg["appendfsync"]
	}
	out = append(out, checkPersistence(fields["aof_enabled"], fsync))
	stored, err = storedPosition(ctx, c, positionKey)
	if err != nil {
		err = errors.New(scrub(err))
	}
	return out, stored, err
}

// checkEviction reads maxmemory_policy from INFO rather than CONFIG GET,
// which managed Redis services often disable.
func checkEviction(policy string) Result {
	const fix = "set maxmemory-policy noeviction in redis.conf or with CONFIG SET maxmemory-policy noeviction (on a managed service, in its parameter group); then a full Redis refuses appends, which the relay retries, instead of dropping streams"
	switch policy {
	case "noeviction":
		return pass(NameRedisEviction, "maxmemory-policy is noeviction", both)
	case "":
		return warn(NameRedisEviction, "maxmemory-policy is unknown: INFO does not show it", "make sure it is noeviction: "+fix, both)
	}
	return warn(NameRedisEviction, "maxmemory-policy is "+policy+": when memory runs out, Redis silently deletes keys, whole streams and the relay's position included",
		fix, both)
}

// checkPersistence warns when Redis can lose appends it acknowledged. The
// relay's position lives in the same Redis and rolls back with the streams,
// so binlog mode re-appends what was lost if the binlog still holds it; poll
// mode has already marked or deleted those rows, so their events are gone.
func checkPersistence(aofEnabled, fsync string) Result {
	const aofFix = "set appendonly yes and appendfsync everysec (or always) in redis.conf, or CONFIG SET appendonly yes + CONFIG REWRITE"
	if aofEnabled != "1" {
		return warn(NameRedisPersistence, "appendonly is off: a Redis restart loses every append since the last RDB snapshot (all of them without one); binlog mode re-appends them only while the binlog still holds them, poll mode loses them",
			aofFix, both)
	}
	switch fsync {
	case "always":
		return pass(NameRedisPersistence, "appendonly yes, appendfsync always: acknowledged appends survive a crash", both)
	case "everysec":
		return pass(NameRedisPersistence, "appendonly yes, appendfsync everysec: an OS crash or power loss can lose up to about a second of appends", both)
	case "":
		return warn(NameRedisPersistence, "appendonly yes, appendfsync unknown (CONFIG GET is not allowed)",
			"make sure appendfsync is everysec or always", both)
	}
	return warn(NameRedisPersistence, "appendonly yes, appendfsync "+fsync+": the OS flushes when it likes (often every 30 s), so an OS crash or power loss loses that much; binlog mode re-appends it only while the binlog still holds it, poll mode loses it",
		"set appendfsync everysec (or always) in redis.conf, or CONFIG SET appendfsync everysec + CONFIG REWRITE", both)
}

// parseInfo parses INFO output: "key:value" lines, "# Section" headers.
func parseInfo(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
