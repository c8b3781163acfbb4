package preflight

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// redisTimeout bounds each command of the checks: INFO and CONFIG GET answer
// at once on a healthy server, and a check must report, not hang.
const redisTimeout = 3 * time.Second

// afterRedis lists the requirements checked once Redis answers.
var afterRedis = []requirement{{NameRedisEviction, both}, {NameRedisPersistence, both}}

// errRedisUnchecked is why the stored position was not read: the Redis
// result says what is wrong.
var errRedisUnchecked = errors.New("the redis check failed")

// checkRedis checks that Redis answers, is a master, has streams, does not
// evict keys and persists what it acknowledges, over TLS when t has a TLS
// configuration, and reads the position stored at positionKey for
// checkFailover (nil: none), and, with start, what `run` asks of Redis at
// start (checkStartRedis) of keys. With Sentinel it first asks the sentinels for
// the master, and says what a failover means for each mode. Messages name
// addresses, never the URL, which may carry a password.
func checkRedis(ctx context.Context, t *redisconn.Target, positionKey string, start *Start, keys []string) (results []Result, stored []byte, storedErr error) {
	if t == nil {
		return append([]Result{fail(NameRedis, "no Redis configured", "set --redis-url", both)},
			skipAll(afterRedis, "not checked: no Redis configured")...), nil, errRedisUnchecked
	}
	opts := t.Options
	scrub := func(err error) string { return safeError(err, opts.Password) }
	var out []Result
	addr, role := opts.Addr, ""
	if s := t.Sentinel; s != nil {
		master, from, err := s.MasterAddr(ctx, opts, redisTimeout)
		if err != nil {
			// The sentinels' password and the master's alike stay out.
			detail := scrub(errors.New(safeError(err, s.Password)))
			return append([]Result{fail(NameRedisSentinel, fmt.Sprintf("no master %q from sentinels %s%s: %s", s.Master, strings.Join(s.Addrs, ", "), overTLS(opts.TLSConfig), detail),
				outbox.HintOf(err), both), skip(NameRedis, "not checked: no sentinel named the master", both)},
				skipAll(afterRedis, "not checked: no sentinel named the master")...), nil, errRedisUnchecked
		}
		out = append(out, pass(NameRedisSentinel, fmt.Sprintf("master %q is at %s, says sentinel %s (of %d given)", s.Master, master, from, len(s.Addrs)), both))
		addr, role = master, fmt.Sprintf(" (master %q)", s.Master)
	}
	// One attempt: the check reports, the relay's own client retries.
	c := t.NewClient(redisTimeout)
	defer c.Close()

	info, err := c.Info(ctx).Result()
	if err != nil {
		fix := "check host, port and password in --redis-url, and that Redis runs and accepts connections from this host; a Redis that requires TLS needs a rediss:// URL"
		var rerr redis.Error
		if errors.As(err, &rerr) {
			// Redis answered: its error's hint (credentials, permissions)
			// is the fix, as is a database the server does not have
			// (the client's hint, redisconn.NoDatabaseHint).
			if hint := outbox.HintOf(redisconn.Classify(err)); hint != "" {
				fix = hint
			}
		}
		if f := tlsFix(err, "redis", opts.TLSConfig); f != "" {
			fix = f
		}
		return append(append(out, fail(NameRedis, fmt.Sprintf("cannot reach Redis at %s%s: %s", addr, overTLS(opts.TLSConfig), scrub(err)), fix, both)),
			skipAll(afterRedis, "not checked: Redis is unreachable")...), nil, errRedisUnchecked
	}
	fields := parseInfo(info)
	version := fields["redis_version"]
	if major, _, _ := strings.Cut(version, "."); atoi(major) < 5 {
		out = append(out, fail(NameRedis, fmt.Sprintf("Redis %s at %s has no streams", orUnset(version), addr),
			"upgrade to Redis 5.0 or later (7.0 or later recommended)", both))
	} else if r := fields["role"]; r != "" && r != "master" {
		fix := "point --redis-url at the primary: a replica refuses every append (READONLY)"
		if t.Sentinel != nil {
			fix = "the sentinels name a server that is no master: a failover is under way (check again in a moment) or the sentinels disagree (SENTINEL CKQUORUM <master> on each)"
		}
		out = append(out, fail(NameRedis, fmt.Sprintf("Redis %s at %s%s is a %s of %s:%s", version, addr, role, r, orUnset(fields["master_host"]), fields["master_port"]), fix, both))
	} else {
		out = append(out, pass(NameRedis, fmt.Sprintf("Redis %s at %s%s, db %d, %s", version, addr, role, opts.DB, link(opts.TLSConfig)), both))
	}
	out = append(out, checkEviction(fields["maxmemory_policy"]))
	fsync := ""
	if cfg, err := c.ConfigGet(ctx, "appendfsync").Result(); err == nil {
		fsync = cfg["appendfsync"]
	}
	out = append(out, checkPersistence(fields["aof_enabled"], fsync))
	if t.Sentinel != nil {
		out = append(out, checkSentinelFailover(fields["connected_slaves"], fields["min_slaves_good_slaves"]))
	}
	if start != nil {
		out = append(out, checkStartRedis(ctx, c, start, keys)...)
	}
	stored, err = storedPosition(ctx, c, positionKey)
	if err != nil {
		err = errors.New(scrub(err))
	}
	return out, stored, err
}

// checkSentinelFailover says what a Sentinel failover does to each mode.
// Replication is asynchronous: the master acknowledges an append before a
// replica has it, and a failover promotes a replica that may lack the last
// ones. Binlog mode's position rolls back with the streams on the promoted
// replica and the relay appends them again; poll mode has marked those rows
// sent, so their events are lost. replicas and good are INFO's
// connected_slaves and min_slaves_good_slaves ("" without
// min-replicas-to-write).
func checkSentinelFailover(replicas, good string) Result {
	detail := fmt.Sprintf("poll mode: a failover can lose appends the old master acknowledged before a replica had them, whose rows poll mode has marked sent (%s connected replica(s)); binlog mode appends them again, as its position rolls back with the streams", orUnset(replicas))
	if good != "" {
		detail += fmt.Sprintf(" (min-replicas-to-write is set: %s good replica(s) now)", good)
	}
	return warn(NameRedisFailover, detail,
		"run in binlog mode; for poll mode, narrow the loss with min-replicas-to-write 1 and min-replicas-max-lag 10 on the master and replica (see docs/redis-sentinel.md)", pollOnly)
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
		return warn(NameRedisPersistence, "appendonly is off: a Redis restart loses every append since the last RDB snapshot; binlog mode's position rolls back with the streams and it re-appends them, as long as the binlog still holds them; "+
			"a restart without a snapshot loses the position too: the relay then refuses to start rather than guess, and `repair --mode binlog --apply` appends again the rows the table still holds; poll mode loses the appends",
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
