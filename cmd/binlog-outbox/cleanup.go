package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func cleanupCommand() *cli.Command {
	return &cli.Command{
		Name:  "cleanup",
		Usage: "delete relayed outbox rows older than a duration, in small batches, while producers and the relay run",
		Description: "Deletes the rows whose occurred_at is older than --older-than that the relay has relayed, by primary key,\n" +
			"--batch rows per DELETE, each its own short transaction. Binlog mode: only rows the relay's stored\n" +
			"position has passed; the rows are chosen in a consistent snapshot, and deleted once the position reached\n" +
			"the binlog end as of that snapshot; if it does not within --wait (the relay is behind or stopped),\n" +
			"cleanup deletes nothing more and exits 1. Poll mode: only rows marked sent (sent_at set); unsent rows\n" +
			"stay. A table without sent_at has nothing to clean in poll mode: the poller deletes the rows it sends.\n" +
			"With --redis-cluster, rows also wait until every master's replicas hold what it does, and stay when a\n" +
			"failover happens meanwhile (it may have lost appends).\n" +
			"Exits 0 when done, 1 on failure, 2 for a usage or configuration error. See docs/cleanup.md.",
		Flags: []cli.Flag{
			positionKeyFlag(),
			&cli.StringFlag{Name: "older-than", EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_OLDER_THAN"}, Usage: "delete rows whose occurred_at is older than this, e.g. 7d, 36h or 1d12h (required)"},
			&cli.IntFlag{Name: "batch", EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_BATCH"}, Usage: "rows per DELETE; each DELETE is its own transaction, so this bounds how long row locks are held", Value: admin.DefaultCleanupBatch},
			&cli.DurationFlag{Name: "pause", EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_PAUSE"}, Usage: "pause between two DELETEs, to leave the server and replicas room"},
			&cli.DurationFlag{Name: "wait", EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_WAIT"}, Usage: "binlog mode: how long to wait for the relay's position to pass the chosen rows (docs/cleanup.md)", Value: admin.DefaultCleanupWait},
			&cli.BoolFlag{Name: "dry-run", EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_DRY_RUN"}, Usage: "count the rows that would be deleted, deleting none"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: runCleanup,
	}
}

func runCleanup(c *cli.Context) error {
	ctx := c.Context
	age, err := admin.ParseAge(c.String("older-than"))
	if err != nil {
		return usageError{err}
	}
	o := admin.CleanupOptions{OlderThan: age, Batch: c.Int("batch"), Pause: c.Duration("pause"), Wait: c.Duration("wait"), DryRun: c.Bool("dry-run")}
	t, err := openTableCommand(ctx, c, "cleanup", true, false)
	if err != nil {
		return err
	}
	defer t.close()
	o.DB, o.Table, o.Redis, o.Logger = t.db, t.table, t.redis, t.cfg.Logger
	o.Keys = redisstream.KeysFor(t.cfg.Database, t.cfg.Table, c.String("position-key"))
	r, err := admin.Cleanup(ctx, o)
	if err != nil {
		return err
	}
	return printResult(c.App.Writer, &r, c.Bool("json"))
}
