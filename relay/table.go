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

// TableName is what ResolveTable learns of the outbox table from the
// server, beside the names it writes into the configuration.
type TableName struct {
	// Name is the table as the server stores it, with the server's
	// lower_case_table_names; zero before ResolveTable ran (the binlog
	// reader then resolves it itself).
	schema.Name
	// Given is database.table as configured, when the server's names
	// differ from it in letter case; "" otherwise.
	Given string
}

// OpenTable connects to MySQL and sees the outbox table as `run` does: by
// the server's name for it (ResolveTable) and with the mapping resolved
// against its columns (schema.Resolve), which replaces cfg.Mapping. With
// usable it refuses a table the mapping cannot read, with the problems and
// their fixes. The admin commands use it, so that they read the rows and
// the streams `run` writes; command names the caller in errors. The caller
// closes the pool.
func OpenTable(ctx context.Context, cfg *settings.Config, command string, usable bool) (*sql.DB, schema.Resolution, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, schema.Resolution{}, fmt.Errorf("open mysql: %w", err)
	}
	if _, err := ResolveTable(ctx, cfg, db); err != nil {
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
func PositionSink(ctx context.Context, cfg *settings.Config, key string) (*redisstream.Sink, redis.UniversalClient, error) {
	if err := RequirePositionKey(*cfg, key); err != nil {
		return nil, nil, err
	}
	if key == "" {
		if err := ResolveTableName(ctx, cfg); err != nil {
			return nil, nil, err
		}
	}
	client := cfg.RedisClient()
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: cfg.PositionKey(key), Cluster: cfg.RedisCluster != nil})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return sink, client, nil
}

// ResolveTableName is ResolveTable over a connection of its own, for the
// callers that need only the names (check's mode switch line, the
// position commands).
func ResolveTableName(ctx context.Context, cfg *settings.Config) error {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return fmt.Errorf("open mysql: %w", err)
	}
	defer db.Close()
	_, err = ResolveTable(ctx, cfg, db)
	return err
}

// ResolveTable replaces the configured database and table with the names
// the server stores them under: the binlog carries those, and the Redis keys
// embed them, so that `--table Outbox` and `--table outbox` on a server that
// folds names are one table with one position. A name that matches no table
// is an error: a relay comparing the binlog with it would skip every row.
// It returns what it learned beside the names.
func ResolveTable(ctx context.Context, cfg *settings.Config, db *sql.DB) (TableName, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := schema.ResolveName(ctx, db, cfg.Database, cfg.Table)
	if err != nil {
		return TableName{}, fmt.Errorf("outbox table: %w", err)
	}
	out := TableName{Name: n}
	if given := cfg.Database + "." + cfg.Table; given != n.String() {
		out.Given = given
		cfg.Logger.Info("using the outbox table's name as the server stores it", "given", given, "table", n.String(),
			"lower_case_table_names", n.LowerCaseTableNames)
	}
	cfg.Database, cfg.Table = n.Database, n.Table
	return out, nil
}

// seedTimeout bounds the PING of each node checkedRedis tries.
const seedTimeout = 2 * time.Second

// checkedRedis is the Redis the preflight inspects: cfg.Redis or, with
// --redis-cluster, the first node of --redis-url that answers a PING. The
// cluster client finds every node from any one of them, so a dead first
// node (a master that failed over and is not back) must not keep the relay
// from starting; when none answers, the first is checked, and its failure
// reported.
func checkedRedis(ctx context.Context, cfg settings.Config) *redisconn.Target {
	if cfg.RedisCluster == nil || len(cfg.RedisCluster.Addrs) < 2 {
		return cfg.Redis
	}
	for i, addr := range cfg.RedisCluster.Addrs {
		o := *cfg.Redis.Options
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
				cfg.Logger.Info("the first node of --redis-url does not answer; checking the cluster through another", "first", cfg.RedisCluster.Addrs[0], "node", addr)
			}
			return &redisconn.Target{Options: &o}
		}
	}
	return cfg.Redis
}

// isRedisReply reports whether err is an error reply of a Redis server.
func isRedisReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
