package servers

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadyTimeout bounds a start, AOF loading included.
const redisReadyTimeout = 30 * time.Second

// Redis is a private redis-server process without a password.
type Redis struct {
	bin  string
	dir  string
	args []string
	port int
	handle
}

// StartRedis starts redis-server on a free loopback port with its AOF and
// log in dir (which must exist). args follow the fixed ones (port, dir, log),
// so they carry the server settings; a later option overrides an earlier one.
func StartRedis(ctx context.Context, dir string, args []string) (*Redis, error) {
	bin, err := LookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, args: args}
	if r.port, err = onFreePort(func(port int) error { r.port = port; return r.Start(ctx) }); err != nil {
		return nil, err
	}
	return r, nil
}

// Start starts the server on its port and directory and waits until it takes
// writes: after Kill, it is a restart from the AOF.
func (r *Redis) Start(ctx context.Context) error {
	args := append([]string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--logfile", r.LogPath(),
		"--daemonize", "no",
		"--protected-mode", "no",
	}, r.args...)
	if err := r.run(ctx, r.bin, args, filepath.Join(r.dir, "stdout.log"), r.LogPath(), redisReadyTimeout, func(ctx context.Context) error {
		// A bare probe, not redisstream.ClientOptions: redisstream's tests
		// start their servers through this package. One attempt per poll.
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
		defer c.Close()
		// PING answers while the AOF still loads; a write proves readiness.
		// An OOM reply also proves it: the data set is loaded and full.
		err := c.Set(ctx, "binlog-outbox:ready", "1", time.Second).Err()
		if redis.IsOOMError(err) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Addr returns 127.0.0.1:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// URL returns a redis:// URL for logical database db.
func (r *Redis) URL(db int) string { return fmt.Sprintf("redis://%s/%d", r.Addr(), db) }

// Dir returns the server's directory (AOF and log).
func (r *Redis) Dir() string { return r.dir }

// LogPath returns the server's log.
func (r *Redis) LogPath() string { return filepath.Join(r.dir, "redis.log") }
