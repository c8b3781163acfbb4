package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

func statusCommand() *cli.Command {
	flags := append(streamFlags(), positionKeyFlag(), groupIdleThresholdFlag(),
		&cli.BoolFlag{Name: "json", Usage: "print the status as JSON"})
	return &cli.Command{
		Name:  "status",
		Usage: "show the mode, the stored position, how far behind the server it is, binlog retention, and the streams with their consumer groups",
		Description: "Reads only: the mode and position keys, the server's binlog (SHOW BINARY LOGS, the binlog status)\n" +
			"and expiry settings, and of every stream the --stream template names and of the dead-letter stream its length\n" +
			"and consumer groups (XINFO STREAM, GROUPS and CONSUMERS, XPENDING, and a count of the undelivered entries).\n" +
			"For the formats of Laravel's jobs table (laravel-queue, laravel-stream), each queue's waiting, delayed and reserved jobs.\n" +
			"With --redis-cluster, also the position of every hash slot, and the streams of every master.",
		Flags:  flags,
		Action: runStatus,
	}
}

func runStatus(c *cli.Context) error {
	ctx := c.Context
	t, err := openTableCommand(ctx, c, "status", false, true)
	if err != nil {
		return err
	}
	defer t.close()
	cfg := t.cfg
	r, err := admin.Status(ctx, admin.StatusOptions{
		DB: t.db, Database: cfg.Database, Table: cfg.Table, Redis: t.redis, Cluster: cfg.RedisCluster != nil,
		Keys: redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key")), Streams: t.streams,
		Dumper: relay.DumperFor(cfg, ""), GroupIdleThreshold: c.Duration("group-idle-threshold"),
	})
	if err != nil {
		return err
	}
	return printResult(c.App.Writer, &r, c.Bool("json"))
}
