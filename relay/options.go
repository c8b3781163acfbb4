// Package relay runs the relay: the preflight checks of check, then binlog
// or poll mode over one table or several, with the lag monitor, the
// metrics server, the stream trimmer and, in binlog mode, the lease. It
// takes plain options; the command line only builds them.
package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// Options is everything run's flags give; a zero field of the reader's or
// the poller's sizes and periods is that component's default.
type Options struct {
	// Config is the resolved global configuration.
	Config Config
	// Version is logged at start.
	Version string
	// Mode is --mode as given: binlog, poll or auto.
	Mode string
	// PositionKey is --position-key, "" for the table's default key.
	PositionKey string
	// StartFrom is --start-from: where binlog mode starts without a
	// stored position.
	StartFrom string
	// MetricsAddr serves /metrics, /healthz and /readyz; "" is off.
	MetricsAddr string
	// OwnsProcess says the relay is the whole process (the command), not
	// a part of one (a test, a program embedding it): binlog mode then
	// sets GOMAXPROCS by whether it is caught up (internal/tuning).
	OwnsProcess bool

	// Binlog mode: the reader's sizes and periods.
	Heartbeat       time.Duration
	MaxBatchEvents  int
	MaxTxBytes      int
	EventCacheBytes int

	// Binlog mode: the lease (--lease and its timings).
	Lease         bool
	LeaseTTL      time.Duration
	LeaseRenew    time.Duration
	LeaseStepDown time.Duration

	// Stream is --stream when given, "" for the table's default.
	Stream           string
	Partitions       int
	DeadLetterStream string
	// Format is the entry format of the format flags.
	Format redisstream.Format
	// EnsureGroups are the --ensure-group names, trimmed.
	EnsureGroups []string
	DedupeWindow time.Duration

	// Trim is --trim (off or acked), with --max-len and --trim-interval.
	Trim         string
	MaxLen       int64
	TrimInterval time.Duration

	// The lag probe, /readyz and the consumer group metrics.
	ProbeInterval        time.Duration
	ReadyMaxStall        time.Duration
	GroupMetrics         bool
	GroupMetricsInterval time.Duration
	// GroupIdleThreshold is --group-idle-threshold: a consumer that has
	// not read for longer is idle in the group metrics.
	GroupIdleThreshold time.Duration

	// Poll mode.
	PollInterval     time.Duration
	BatchSize        int
	MaxBatchBytes    int
	OnSent           string
	MaxPayloadBytes  int
	ShutdownGrace    time.Duration
	PollListInterval time.Duration
}

// Config is the configuration every command shares, resolved from the
// global flags, with what the commands that connect learn of the table.
type Config struct {
	settings.Config
	// LowerCaseTableNames is the server's lower_case_table_names, set by
	// ResolveTable.
	LowerCaseTableNames int
	// Given is database.table as configured, when the server's names
	// differ from it in letter case (set by ResolveTable).
	Given string
	// Resolved says ResolveTable ran: Database and Table are the server's.
	Resolved bool
}

// OpenTable connects to MySQL and sees the outbox table as `run` does: by
// the server's name for it (ResolveTable) and with the mapping resolved
// against its columns (schema.Resolve), which replaces cfg.Mapping. With
// usable it refuses a table the mapping cannot read, with the problems and
// their fixes. The admin commands use it, so that they read the rows and
// the streams `run` writes; command names the caller in errors. The caller
// closes the pool.
func OpenTable(ctx context.Context, cfg *Config, command string, usable bool) (*sql.DB, schema.Resolution, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, schema.Resolution{}, fmt.Errorf("open mysql: %w", err)
	}
	if err := ResolveTable(ctx, cfg, db); err != nil {
		db.Close()
		return nil, schema.Resolution{}, err
	}
	res, err := schema.Resolve(ctx, db, cfg.Database, cfg.Table, cfg.Mapping, cfg.Declared, cfg.Extra)
	if err != nil {
		db.Close()
		return nil, schema.Resolution{}, fmt.Errorf("%s: inspect the outbox table: %w", command, err)
	}
	cfg.Mapping = res.Mapping
	if usable {
		if err := schema.ProblemsError(cfg.Table, res.Problems); err != nil {
			db.Close()
			return nil, res, err
		}
	}
	return db, res, nil
}

// PositionSink opens the Redis client and the sink that hold the position
// under key (--position-key; "" for the default, which embeds the table's
// name as the server stores it, as run builds it, so cfg's names are
// resolved first). The caller closes the client.
func PositionSink(ctx context.Context, cfg *Config, key string) (*redisstream.Sink, redis.UniversalClient, error) {
	if err := RequirePositionKey(*cfg, key); err != nil {
		return nil, nil, err
	}
	if key == "" {
		if err := ResolveTableName(ctx, cfg); err != nil {
			return nil, nil, err
		}
	}
	client := cfg.RedisClient()
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: PositionKey(*cfg, key), Cluster: cfg.RedisCluster != nil})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return sink, client, nil
}

// ResolveTableName is ResolveTable over a connection of its own, for the
// callers that need only the names (check's mode switch line, the
// position commands).
func ResolveTableName(ctx context.Context, cfg *Config) error {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return fmt.Errorf("open mysql: %w", err)
	}
	defer db.Close()
	return ResolveTable(ctx, cfg, db)
}

// ResolveTable replaces the configured database and table with the names
// the server stores them under: the binlog carries those, and the Redis keys
// embed them, so that `--table Outbox` and `--table outbox` on a server that
// folds names are one table with one position. A name that matches no table
// is an error: a relay comparing the binlog with it would skip every row.
func ResolveTable(ctx context.Context, cfg *Config, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := schema.ResolveName(ctx, db, cfg.Database, cfg.Table)
	if err != nil {
		return fmt.Errorf("outbox table: %w", err)
	}
	if given := cfg.Database + "." + cfg.Table; given != n.String() {
		cfg.Given = given
		cfg.Logger.Info("using the outbox table's name as the server stores it", "given", given, "table", n.String(),
			"lower_case_table_names", n.LowerCaseTableNames)
	}
	cfg.Database, cfg.Table, cfg.LowerCaseTableNames, cfg.Resolved = n.Database, n.Table, n.LowerCaseTableNames, true
	return nil
}

// RedisClient opens the client of the relay's appends: a cluster client
// with --redis-cluster, a client of cfg.Redis otherwise.
func (c Config) RedisClient() redis.UniversalClient {
	if c.RedisCluster != nil {
		return redisconn.NewClusterClientFromOptions(c.RedisCluster)
	}
	return c.Redis.NewClient(redisconn.DefaultTimeout)
}

// seedTimeout bounds the PING of each node CheckedRedis tries.
const seedTimeout = 2 * time.Second

// CheckedRedis is the Redis the preflight inspects: cfg.Redis or, with
// --redis-cluster, the first node of --redis-url that answers a PING. The
// cluster client finds every node from any one of them, so a dead first
// node (a master that failed over and is not back) must not keep the relay
// from starting; when none answers, the first is checked, and its failure
// reported.
func (c Config) CheckedRedis(ctx context.Context) *redisconn.Target {
	if c.RedisCluster == nil || len(c.RedisCluster.Addrs) < 2 {
		return c.Redis
	}
	for i, addr := range c.RedisCluster.Addrs {
		o := *c.Redis.Options
		o.Addr = addr
		client := redis.NewClient(redisconn.ClientOptions(&o, seedTimeout))
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
			return &redisconn.Target{Options: &o}
		}
	}
	return c.Redis
}

// isRedisReply reports whether err is an error reply of a Redis server.
func isRedisReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
