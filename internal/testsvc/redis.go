package testsvc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// Redis is a Redis server for tests: a private process or, with
// BINLOG_OUTBOX_TEST_REDIS_URL, an external server.
type Redis struct {
	external *redis.Options

	bin     string
	dir     string
	args    []string
	port    int
	logPath string
	proc    *process
	nextDB  atomic.Int64
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
	bin, err := lookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("bo-redis-")
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log")}
	r.args = append(append([]string{}, DefaultRedisArgs...), opts.Args...)
	for attempt := 0; ; attempt++ {
		if r.port, err = freePort(); err != nil {
			return nil, err
		}
		err = r.start()
		if err == nil {
			return r, nil
		}
		if attempt == 2 || !strings.Contains(err.Error(), "in use") {
			return nil, err
		}
	}
}

func (r *Redis) start() error {
	args := append([]string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--logfile", r.logPath,
		"--daemonize", "no",
		"--protected-mode", "no",
	}, r.args...)
	p, err := startProcess(r.bin, args, filepath.Join(r.dir, "stdout.log"))
	if err != nil {
		return err
	}
	r.proc = p
	err = waitFor(30*time.Second, func() error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// PING answers while the AOF still loads; a write proves readiness.
		// An OOM reply also proves it: the data set is loaded and full.
		err := c.Set(ctx, "testsvc:ready", "1", 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			return nil
		}
		return err
	}, p.exited, r.logPath)
	if err != nil {
		p.kill()
		r.proc = nil
		return err
	}
	return nil
}

// External reports whether the server is external.
func (r *Redis) External() bool { return r.external != nil }

// Addr returns host:port.
func (r *Redis) Addr() string {
	if r.external != nil {
		return r.external.Addr
	}
	return "127.0.0.1:" + strconv.Itoa(r.port)
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
	return fmt.Sprintf("redis://%s/%d", r.Addr(), db)
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
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill sends SIGKILL to the server; Restart starts it again from its AOF.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	if r.external != nil {
		skipExternal(t, "kill Redis", EnvRedisURL)
	}
	r.proc.kill()
	r.proc = nil
}

// Restart kills the server if it runs and starts it again from its AOF.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if r.external != nil {
		skipExternal(t, "restart Redis", EnvRedisURL)
	}
	if r.proc != nil {
		r.proc.kill()
		r.proc = nil
	}
	if err := r.start(); err != nil {
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
func (r *Redis) Dir() string { return r.dir }

func (r *Redis) shutdown() {
	if r.external != nil {
		return
	}
	r.proc.stop(10 * time.Second)
	r.proc = nil
	_ = os.RemoveAll(r.dir)
}
