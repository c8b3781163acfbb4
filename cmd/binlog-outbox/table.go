package main

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/binlog-outbox/binlog-outbox/relay"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// openTable connects to MySQL and sees the outbox table as `run` does: by
// the server's name for it (resolveTable) and with the mapping resolved
// against its columns (schema.Resolve), which replaces cfg.Mapping. The
// commands that read the table beside the relay (mark-appended, verify,
// status) use it, so that they read the rows and the streams `run` writes.
// The caller closes the pool.
func openTable(ctx context.Context, cfg *config, command string) (*sql.DB, schema.Resolution, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, schema.Resolution{}, fmt.Errorf("open mysql: %w", err)
	}
	if err := relay.ResolveTable(ctx, cfg, db); err != nil {
		db.Close()
		return nil, schema.Resolution{}, err
	}
	res, err := schema.Resolve(ctx, db, cfg.Database, cfg.Table, cfg.Mapping, cfg.Declared, cfg.Extra)
	if err != nil {
		db.Close()
		return nil, schema.Resolution{}, fmt.Errorf("%s: inspect the outbox table: %w", command, err)
	}
	cfg.Mapping = res.Mapping
	return db, res, nil
}

// openUsableTable is openTable for the commands that read the rows as the
// relay does (mark-appended, verify, cleanup): it refuses a table the
// mapping cannot read, with the problems and their fixes.
func openUsableTable(ctx context.Context, cfg *config, command string) (*sql.DB, schema.Resolution, error) {
	db, res, err := openTable(ctx, cfg, command)
	if err != nil {
		return nil, res, err
	}
	if err := schema.ProblemsError(cfg.Table, res.Problems); err != nil {
		db.Close()
		return nil, res, err
	}
	return db, res, nil
}

// openStreams parses the stream template `run` would use for the resolved
// table and opens the Redis client (a cluster client with --redis-cluster);
// the caller closes the client.
func openStreams(c *cli.Context, cfg config) (admin.Streams, redis.UniversalClient, error) {
	tmpl, err := redisstream.ParseTemplate(relay.StreamTemplate(cfg, givenStream(c)), c.Int("partitions"), cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return admin.Streams{}, nil, err
	}
	return admin.Streams{Glob: tmpl.Glob(), DeadLetter: c.String("dead-letter-stream")}, cfg.RedisClient(), nil
}

// outboxTable is the resolved table as package outboxsql names it.
func outboxTable(cfg config, res schema.Resolution) outboxsql.Table {
	return outboxsql.Table{Database: cfg.Database, Name: cfg.Table, Mapping: cfg.Mapping, Info: res.Table}
}
