package main

import (
	"context"
	"database/sql"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// openTable is relay.OpenTable for the commands that read the table beside
// the relay (status): they read the rows and the streams `run` writes. The
// caller closes the pool.
func openTable(ctx context.Context, cfg *config, command string) (*sql.DB, schema.Resolution, error) {
	return relay.OpenTable(ctx, cfg, command, false)
}

// openUsableTable is relay.OpenTable for the commands that read the rows as
// the relay does (mark-appended, verify, cleanup, replay, backfill): it
// refuses a table the mapping cannot read.
func openUsableTable(ctx context.Context, cfg *config, command string) (*sql.DB, schema.Resolution, error) {
	return relay.OpenTable(ctx, cfg, command, true)
}

// openStreams parses the stream template `run` would use for the resolved
// table and opens the Redis client (a cluster client with --redis-cluster);
// the caller closes the client.
func openStreams(c *cli.Context, cfg config) (admin.Streams, redis.UniversalClient, error) {
	client := cfg.RedisClient()
	f, err := recordedEntries(c, cfg, client, c.Command.FullName())
	if err != nil {
		client.Close()
		return admin.Streams{}, nil, err
	}
	tmpl, err := entry.ParseTemplate(relay.StreamTemplate(cfg, f.Stream), f.Partitions, cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		client.Close()
		return admin.Streams{}, nil, err
	}
	delayed := f.Format.Name == entry.FormatDoctrine
	queues := f.Format.Name == entry.FormatLaravelQueue || f.Format.Name == entry.FormatLaravelStream
	return admin.Streams{Glob: tmpl.Glob(), DeadLetter: f.DeadLetterStream, DelayedSets: delayed, Queues: queues}, client, nil
}

// outboxTable is the resolved table as package outboxsql names it.
func outboxTable(cfg config, res schema.Resolution) outboxsql.Table {
	return outboxsql.Table{Database: cfg.Database, Name: cfg.Table, Mapping: cfg.Mapping, Info: res.Table}
}

// tableCommand is what an admin command opens before its work: the
// configuration of its one table, a pool to MySQL that sees the table as
// run does (openTable), and the Redis client, with the streams of run's
// stream template when the command reads them.
type tableCommand struct {
	cfg     config
	db      *sql.DB
	table   outboxsql.Table
	streams admin.Streams
	redis   redis.UniversalClient
}

// openTableCommand is the prologue of status, verify, mark-appended and
// cleanup: usable refuses a table the mapping cannot read
// (openUsableTable), streams parses run's stream template (openStreams).
// The caller calls close.
func openTableCommand(ctx context.Context, c *cli.Context, command string, usable, streams bool) (*tableCommand, error) {
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return nil, err
	}
	open := openTable
	if usable {
		open = openUsableTable
	}
	db, res, err := open(ctx, &cfg, command)
	if err != nil {
		return nil, err
	}
	t := &tableCommand{cfg: cfg, db: db, table: outboxTable(cfg, res)}
	if !streams {
		t.redis = cfg.RedisClient()
		return t, nil
	}
	if t.streams, t.redis, err = openStreams(c, cfg); err != nil {
		db.Close()
		return nil, err
	}
	return t, nil
}

// close closes the Redis client and the pool.
func (t *tableCommand) close() {
	t.redis.Close()
	t.db.Close()
}
