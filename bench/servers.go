package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// mariadbArgs are the settings of a private MariaDB: what the relay needs,
// and durable commits (the live workloads measure durable producers; the
// backlog loads relax them with SET GLOBAL for their duration).
var mariadbArgs = []string{
	"--log-bin=mysql-bin",
	"--binlog-format=ROW",
	"--binlog-row-image=FULL",
	"--binlog-row-metadata=FULL",
	"--server-id=1",
	"--innodb-flush-log-at-trx-commit=1",
	"--sync-binlog=1",
	"--innodb-buffer-pool-size=512M",
	"--innodb-log-file-size=512M",
	"--max-binlog-size=1G",
	"--max-connections=200",
	// Room for the giant workload's 16 MiB rows, and for a statement
	// carrying one.
	"--max-allowed-packet=256M",
	"--skip-name-resolve",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_unicode_ci",
}

// redisArgs: an append-only file fsynced every second, the usual production
// setting; no RDB snapshots, whose fork would disturb the measurement.
var redisArgs = []string{
	"--appendonly", "yes",
	"--appendfsync", "everysec",
	"--save", "",
	"--maxmemory-policy", "noeviction",
}

// localServers are private MariaDB and Redis processes in a temporary directory.
type localServers struct {
	dir      string
	mysqlDSN string
	redisURL string
	mariadb  *servers.MariaDB
	redis    *servers.Redis
}

// startServers starts MariaDB and Redis on free loopback ports; Redis under
// callgrind when callgrindDir is set, its dumps written there.
func startServers(ctx context.Context, callgrindDir string) (*localServers, error) {
	dir, err := os.MkdirTemp("", "bo-bench-")
	if err != nil {
		return nil, err
	}
	s := &localServers{dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	mdir, rdir := filepath.Join(dir, "mariadb"), filepath.Join(dir, "redis")
	for _, d := range []string{mdir, rdir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if s.mariadb, err = servers.StartMariaDB(ctx, mdir, mariadbArgs); err != nil {
		return nil, withoutServers(err)
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", s.mariadb.Addr()
	s.mysqlDSN = cfg.FormatDSN()
	var wrapper []string
	if callgrindDir != "" {
		wrapper = callgrindArgs(callgrindOut(callgrindDir))
	}
	if s.redis, err = servers.StartRedisUnder(ctx, rdir, redisArgs, wrapper); err != nil {
		return nil, withoutServers(err)
	}
	s.redisURL = s.redis.URL(0)
	ok = true
	return s, nil
}

// withoutServers adds the way around a missing server binary.
func withoutServers(err error) error {
	if errors.Is(err, servers.ErrNotFound) {
		return fmt.Errorf("%w; or pass --mysql-dsn and --redis-url", err)
	}
	return err
}

// stop terminates the servers (SIGTERM, then SIGKILL after 20s) and removes
// their directory.
func (s *localServers) stop() {
	if s.redis != nil {
		s.redis.Stop(20 * time.Second)
	}
	if s.mariadb != nil {
		s.mariadb.Stop(20 * time.Second)
	}
	_ = os.RemoveAll(s.dir)
}
