package servers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelConfig configures a private Redis Sentinel.
type SentinelConfig struct {
	// Master is the name the sentinel monitors the master under, and
	// MasterAddr the master's host:port at the first start.
	Master, MasterAddr string
	// Quorum is how many sentinels must find the master down before one
	// of them fails it over.
	Quorum int
	// DownAfter is how long the master may not answer before it counts as
	// down (sentinel down-after-milliseconds), FailoverTimeout bounds a
	// failover and spaces the next (sentinel failover-timeout). Tests keep
	// both small, so that a failover takes seconds.
	DownAfter, FailoverTimeout time.Duration
	// Password, when set, is the sentinel's requirepass: clients of the
	// sentinel (not of the master) authenticate with it.
	Password string
}

// Sentinel is a private redis-sentinel process (redis-server --sentinel)
// watching one master, with its configuration file, which it rewrites as
// it learns the other sentinels, the replicas and each failover, and its
// log in its directory.
type Sentinel struct {
	bin  binary
	dir  string
	cfg  SentinelConfig
	port int
	handle
}

// StartSentinel starts a sentinel on a free loopback port with its
// configuration and log in dir (which must exist).
func StartSentinel(ctx context.Context, dir string, cfg SentinelConfig) (*Sentinel, error) {
	bin, err := lookRedis("-server")
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(cfg.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("sentinel: master address %q: %w", cfg.MasterAddr, err)
	}
	s := &Sentinel{bin: bin, dir: dir, cfg: cfg}
	if s.port, err = onFreePort(func(p int) error {
		s.port = p
		conf := []string{
			"port " + strconv.Itoa(p),
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			"dir " + dir,
			"logfile " + s.LogPath(),
			fmt.Sprintf("sentinel monitor %s %s %s %d", cfg.Master, host, port, cfg.Quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", cfg.Master, cfg.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", cfg.Master, cfg.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", cfg.Master),
		}
		if cfg.Password != "" {
			conf = append(conf, "requirepass "+cfg.Password)
		}
		if err := os.WriteFile(s.confPath(), []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return fmt.Errorf("sentinel: write %s: %w", s.confPath(), err)
		}
		return s.Start(ctx)
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the sentinel from its configuration file and waits until it
// names the master: after Kill, a restart that remembers what it learnt.
func (s *Sentinel) Start(ctx context.Context) error {
	err := s.run(ctx, s.bin, []string{s.confPath(), "--sentinel"}, filepath.Join(s.dir, "stdout.log"), s.LogPath(), redisReadyTimeout, func(ctx context.Context) error {
		c := s.Client()
		defer c.Close()
		return c.GetMasterAddrByName(ctx, s.cfg.Master).Err()
	})
	if err != nil {
		return fmt.Errorf("sentinel: %w", err)
	}
	return nil
}

// Client returns an administrative client of the sentinel (one attempt per
// command, the sentinel's password); the caller closes it.
func (s *Sentinel) Client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), Password: s.cfg.Password, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 5 * time.Second, ContextTimeoutEnabled: true})
}

// MasterAddr returns the master's address as the sentinel names it now.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	c := s.Client()
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, s.cfg.Master).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", s.Addr(), err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: unexpected master address %q", s.Addr(), hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// Knows reports whether the sentinel has found replicas replicas that are
// up and others other sentinels: only then can it fail the master over
// (SENTINEL FAILOVER needs a replica; a vote needs the quorum).
func (s *Sentinel) Knows(ctx context.Context, replicas, others int) (bool, error) {
	c := s.Client()
	defer c.Close()
	rs, err := c.Replicas(ctx, s.cfg.Master).Result()
	if err != nil {
		return false, err
	}
	up := 0
	for _, r := range rs {
		if !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") && r["master-link-status"] == "ok" {
			up++
		}
	}
	ss, err := c.Sentinels(ctx, s.cfg.Master).Result()
	if err != nil {
		return false, err
	}
	return up >= replicas && len(ss) >= others, nil
}

// Failover makes the sentinel fail the master over at once (SENTINEL
// FAILOVER), without the other sentinels' agreement.
func (s *Sentinel) Failover(ctx context.Context) error {
	c := s.Client()
	defer c.Close()
	if err := c.Failover(ctx, s.cfg.Master).Err(); err != nil {
		return fmt.Errorf("sentinel %s: SENTINEL FAILOVER %s: %w", s.Addr(), s.cfg.Master, err)
	}
	return nil
}

// Addr returns 127.0.0.1:port.
func (s *Sentinel) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Dir returns the sentinel's directory (configuration and log).
func (s *Sentinel) Dir() string { return s.dir }

// LogPath returns the sentinel's log, which records each failover step.
func (s *Sentinel) LogPath() string { return filepath.Join(s.dir, "sentinel.log") }

func (s *Sentinel) confPath() string { return filepath.Join(s.dir, "sentinel.conf") }
