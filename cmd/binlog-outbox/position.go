package main

import (
	"context"
	"fmt"
	"time"

	"github.com/binlog-outbox/binlog-outbox/relay"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/position"
)

func positionCommand() *cli.Command {
	flags := []cli.Flag{positionKeyFlag()}
	return &cli.Command{
		Name:  "position",
		Usage: "show, set or reset the binlog position stored in Redis",
		Description: "The position is where binlog mode resumes. Set and reset refuse while a relay reads the position\n" +
			"(it holds the lease, or claims its server id for it): stop the relay and its standbys first.\n" +
			"With --redis-cluster, show sums up the position of every hash slot too, and set and reset delete them\n" +
			"(on every master): the position key alone then says where the relay resumes.",
		Subcommands: []*cli.Command{
			{
				Name:   "show",
				Usage:  "print the stored position",
				Flags:  flags,
				Action: positionShow,
			},
			{
				Name:  "set",
				Usage: "store a position: --start-from now, earliest, <file>:<offset> or a GTID set",
				Description: "now skips everything not yet relayed; earliest re-reads all binlog the server has (consumers\n" +
					"deduplicate by message_id); <file>:<offset> must be the start of a transaction.",
				Flags: append(flags, &cli.StringFlag{Name: "start-from", Value: "now",
					Usage: "position to store: now, earliest, <file>:<offset> at a transaction's start, or a GTID set of every domain"}),
				Action: positionSet,
			},
			{
				Name:   "reset",
				Usage:  "delete the stored position and the relay's record (docs/incidents.md)",
				Flags:  flags,
				Action: positionReset,
			},
		},
	}
}

func positionShow(c *cli.Context) error {
	_, opts, err := positionSink(c)
	if err != nil {
		return err
	}
	defer opts.Redis.Close()
	r, err := admin.PositionShow(c.Context, opts)
	if err != nil {
		return err
	}
	return printResult(c.App.Writer, &r, false)
}

func positionSet(c *cli.Context) error {
	start, err := position.ParseStart(c.String("start-from"))
	if err != nil {
		return err
	}
	cfg, opts, err := positionSink(c)
	if err != nil {
		return err
	}
	defer opts.Redis.Close()
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	reader, db, err := relay.PositionReader(ctx, cfg, c.String("position-key"), opts.Sink, start)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := admin.PositionSet(ctx, admin.PositionSetOptions{PositionOptions: opts, Reader: reader, Start: start})
	if r.Raw == nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "stored %s at %s\n", r.Stored, r.Key)
	if err != nil {
		return err
	}
	if r.SlotsDeleted >= 0 {
		fmt.Fprintf(c.App.Writer, "deleted %d hash slot positions (%s:{...}) on every master: every slot resumes from the new position\n", r.SlotsDeleted, r.Key)
	}
	return relay.PrepareSwitch(ctx, c.App.Writer, opts.Redis, db, cfg, mode.Binlog)
}

func positionReset(c *cli.Context) error {
	_, opts, err := positionSink(c)
	if err != nil {
		return err
	}
	defer opts.Redis.Close()
	r, err := admin.PositionReset(c.Context, opts)
	if r.SlotsDeleted >= 0 {
		fmt.Fprintf(c.App.Writer, "deleted %d hash slot positions (%s:{...}) on every master\n", r.SlotsDeleted, r.Key)
	}
	if err != nil {
		return err
	}
	if r.Previous == nil {
		fmt.Fprintf(c.App.Writer, "no position was stored at %s\n", r.Key)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "deleted the position at %s; it was: %s\n", r.Key, r.Previous)
	return nil
}

// positionSink loads the configuration and opens the Redis sink that holds
// the position, for the position commands; the caller closes the client.
func positionSink(c *cli.Context) (config, admin.PositionOptions, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return config{}, admin.PositionOptions{}, err
	}
	sink, client, err := relay.PositionSink(c.Context, &cfg, c.String("position-key"))
	if err != nil {
		return config{}, admin.PositionOptions{}, err
	}
	return cfg, admin.PositionOptions{Redis: client, Sink: sink, Cluster: cfg.RedisCluster != nil}, nil
}
