package testsvc

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// redisDatabases is how many logical databases a private Redis has, so that
// every test gets an empty one of its own.
const redisDatabases = 10000

// DefaultRedisArgs make a private Redis durable across kill -9: every
// acknowledged write is in the AOF before the reply.
var DefaultRedisArgs = []string{
	"--appendonly", "yes",
	"--appendfsync", "always",
	"--save", "",
	"--maxmemory-policy", "noeviction",
	"--databases", strconv.Itoa(redisDatabases),
}

// RedisOptions configures a private Redis server.
type RedisOptions struct {
	// Args are appended to DefaultRedisArgs, e.g. "--maxmemory", "2mb".
	Args []string
	// TLS, when set, makes the server speak TLS only: URL returns
	// rediss:// URLs, and Client connects with the server's probe
	// configuration (servers.Redis.ProbeTLS).
	TLS *servers.RedisTLS
}

// Redis is a Redis server for tests: a private process or, with
// BINLOG_OUTBOX_TEST_REDIS_URL, an external server.
type Redis struct {
	external *redis.Options

	srv    *servers.Redis
	nextDB atomic.Int64
}

// SharedRedis returns the test binary's shared Redis, starting it on first use.
func SharedRedis(t testing.TB) *Redis {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedRedis == nil && sharedErrRDS == nil {
		sharedRedis, sharedErrRDS = startRedis(RedisOptions{}, true)
		if sharedErrRDS == nil {
			r := sharedRedis
			registerCleanup(func() { r.shutdown() })
		}
	}
	if sharedErrRDS != nil {
		t.Fatalf("start shared Redis: %v", sharedErrRDS)
	}
	return sharedRedis
}

// StartRedis starts a private Redis for one test, stopped when the test ends.
// In external mode the test is skipped.
func StartRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	if os.Getenv(EnvRedisURL) != "" {
		skipExternal(t, "start a Redis of its own", EnvRedisURL)
	}
	r, err := startRedis(opts, false)
	if err != nil {
		t.Fatalf("start Redis: %v", err)
	}
	t.Cleanup(r.shutdown)
	return r
}

func startRedis(opts RedisOptions, allowExternal bool) (*Redis, error) {
	if u := os.Getenv(EnvRedisURL); u != "" && allowExternal {
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", EnvRedisURL, err)
		}
		return &Redis{external: o}, nil
	}
	dir, err := tempDir("bo-redis-")
	if err != nil {
		return nil, err
	}
	srv, err := servers.StartRedisTLS(context.Background(), dir, append(append([]string{}, DefaultRedisArgs...), opts.Args...), opts.TLS)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &Redis{srv: srv}, nil
}

// External reports whether the server is external.
func (r *Redis) External() bool { return r.external != nil }

// Addr returns host:port.
func (r *Redis) Addr() string {
	if r.external != nil {
		return r.external.Addr
	}
	return r.srv.Addr()
}

// URL returns a redis:// URL for logical database db.
func (r *Redis) URL(db int) string {
	if r.external != nil {
		auth := ""
		if r.external.Password != "" {
			auth = r.external.Username + ":" + r.external.Password + "@"
		}
		return fmt.Sprintf("redis://%s%s/%d", auth, r.external.Addr, db)
	}
	return r.srv.URL(db)
}

// NewDB reserves an empty logical database for the test and returns its URL.
// External servers have few databases: one is flushed for the test instead.
func (r *Redis) NewDB(t testing.TB) string {
	t.Helper()
	var db int
	if r.external != nil {
		db = 1 + int(r.nextDB.Add(1)-1)%15
	} else {
		db = 1 + int(r.nextDB.Add(1)-1)%(redisDatabases-1)
	}
	u := r.URL(db)
	c := r.Client(t, u)
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush Redis db %d: %v", db, err)
	}
	return u
}

// Client returns a client for url, closed at the end of the test.
func (r *Redis) Client(t testing.TB, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse Redis URL: %v", err)
	}
	if r.srv != nil && o.TLSConfig != nil {
		if o.TLSConfig, err = r.srv.ProbeTLS(); err != nil {
			t.Fatal(err)
		}
	}
	// The tests read whole streams of large entries with it; on a loaded
	// machine under the race detector a 17 MiB reply outlasted go-redis's
	// 3 s default. A dead server still fails at once (a reset, not a wait).
	o.ReadTimeout = 15 * time.Second
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// SetUser creates (or replaces) the ACL user name with password and the ACL
// rules (space-separated, as ACL SETUSER takes them) less those in drop, so
// that a test can take away one permission of a documented set.
func (r *Redis) SetUser(t testing.TB, name, password, rules string, drop ...string) {
	t.Helper()
	if err := r.Client(t, r.URL(0)).Do(context.Background(), setUserArgs(name, password, rules, drop)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
}

// setUserArgs is the ACL SETUSER command of Redis.SetUser.
func setUserArgs(name, password, rules string, drop []string) []any {
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, rule := range strings.Fields(rules) {
		if !slices.Contains(drop, rule) {
			args = append(args, rule)
		}
	}
	return args
}

// Kill sends SIGKILL to the server; Restart starts it again from its AOF.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	if r.external != nil {
		skipExternal(t, "kill Redis", EnvRedisURL)
	}
	r.srv.Kill()
}

// Restart kills the server if it runs and starts it again from its AOF.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if r.external != nil {
		skipExternal(t, "restart Redis", EnvRedisURL)
	}
	r.srv.Kill()
	if err := r.srv.Start(context.Background()); err != nil {
		t.Fatalf("restart Redis: %v", err)
	}
}

// RequirePrivate skips the test in external mode.
func (r *Redis) RequirePrivate(t testing.TB, what string) {
	t.Helper()
	if r.external != nil {
		skipExternal(t, what, EnvRedisURL)
	}
}

// Dir returns the private server's directory (AOF and log), "" when external.
func (r *Redis) Dir() string {
	if r.external != nil {
		return ""
	}
	return r.srv.Dir()
}

func (r *Redis) shutdown() {
	if r.external != nil {
		return
	}
	r.srv.Stop(10 * time.Second)
	_ = os.RemoveAll(r.srv.Dir())
}
