package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

func deadLettersCommand() *cli.Command {
	jsonFlag := func() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print the result as JSON"} }
	return &cli.Command{
		Name:  "dead-letters",
		Usage: "list, replay or purge the rows in the dead-letter stream",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the dead letters: reason, outbox id, message_id, the stream each was meant for, age",
				Description: "Reads the --dead-letter-stream (XRANGE). An entry written before dead letters carried target_stream\n" +
					"shows the stream the current --stream template names for it. See docs/dead-letters.md.",
				Flags:  append(streamFlags(), jsonFlag()),
				Action: runDeadLettersList,
			},
			{
				Name:  "replay",
				Usage: "after fixing the cause, relay dead-lettered rows again from the outbox table under the current mapping and format",
				Description: "Reads each chosen row again from the outbox table by its outbox id, builds its entry as run does (same\n" +
					"--stream and --format flags), and appends it to its stream while deleting its dead letter, in one Redis\n" +
					"script: exactly once, run twice or interrupted. A row still undeliverable stays, with its new reason.\n" +
					"A replayed event lands after the events appended meanwhile, later ones of its aggregate too: consumers\n" +
					"deduplicate by message_id and can order by outbox_id. On Redis Cluster it refuses a row whose stream is\n" +
					"in another hash slot than the dead-letter stream. Exits 0 when every row it took was delivered, 1 while\n" +
					"some stay, 2 for a usage or configuration error. See docs/dead-letters.md.",
				Flags: append(append(append(streamFlags(), formatFlags()...), ensureGroupFlag(),
					&cli.StringSliceFlag{Name: "id", Usage: "replay the dead letters of this outbox id, message_id or entry ID; repeatable"},
					&cli.BoolFlag{Name: "all", Usage: "replay every dead letter"}),
					jsonFlag()),
				Action: runDeadLettersReplay,
			},
			{
				Name:  "purge",
				Usage: "delete the dead letters older than a duration",
				Description: "Deletes the entries of the --dead-letter-stream appended before --older-than ago (XTRIM MINID);\n" +
					"the rows stay in the outbox table. See docs/dead-letters.md.",
				Flags: append(streamFlags(),
					&cli.StringFlag{Name: "older-than", Usage: "delete dead letters older than this, e.g. 7d, 36h or 1d12h (required)"},
					jsonFlag()),
				Action: runDeadLettersPurge,
			},
		},
	}
}

// deadLettersOptions resolves the configuration and builds the sink of
// run's stream and format flags, without a position key.
func deadLettersOptions(c *cli.Context, cfg config) (admin.DeadLettersOptions, func(), error) {
	client := cfg.RedisClient()
	f, err := recordedEntries(c, cfg, client, c.Command.FullName())
	if err != nil {
		client.Close()
		return admin.DeadLettersOptions{}, nil, err
	}
	format := entry.Format{}
	if c.Command.Name == "replay" {
		format = *f.Format
	}
	sink, err := relay.EntrySink(client, relay.Options{
		Config: cfg, Stream: f.Stream, Partitions: f.Partitions, DeadLetterStream: f.DeadLetterStream,
		EnsureGroups: f.Groups, Format: format,
	})
	if err != nil {
		client.Close()
		return admin.DeadLettersOptions{}, nil, err
	}
	return admin.DeadLettersOptions{Redis: client, Sink: sink, Database: cfg.Database, Table: cfg.Table}, func() { client.Close() }, nil
}

// openDeadLetters is the prologue of list and purge, which read the
// dead-letter stream only.
func openDeadLetters(c *cli.Context) (admin.DeadLettersOptions, func(), error) {
	cfg, err := loadTableConfig(c)
	if err != nil {
		return admin.DeadLettersOptions{}, nil, err
	}
	return deadLettersOptions(c, cfg)
}

func runDeadLettersList(c *cli.Context) error {
	o, done, err := openDeadLetters(c)
	if err != nil {
		return err
	}
	defer done()
	r, err := admin.ListDeadLetters(c.Context, o)
	if err != nil {
		return err
	}
	return printResult(c.App.Writer, &r, c.Bool("json"))
}

func runDeadLettersReplay(c *cli.Context) error {
	ids, all := c.StringSlice("id"), c.Bool("all")
	if (len(ids) == 0) == !all {
		return usageError{errors.New("give --id (repeatable) or --all: which dead letters to replay")}
	}
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	db, res, err := openUsableTable(c.Context, &cfg, "dead-letters replay")
	if err != nil {
		return err
	}
	defer db.Close()
	o, done, err := deadLettersOptions(c, cfg)
	if err != nil {
		return err
	}
	defer done()
	r, err := admin.ReplayDeadLetters(c.Context, admin.ReplayOptions{
		DeadLettersOptions: o, DB: db, Table: outboxTable(cfg, res), Extra: cfg.Extra, IDs: ids, All: all,
	})
	if err != nil {
		return err
	}
	if err := printResult(c.App.Writer, &r, c.Bool("json")); err != nil {
		return err
	}
	return r.Err()
}

func runDeadLettersPurge(c *cli.Context) error {
	age, err := admin.ParseAge(c.String("older-than"))
	if err != nil {
		return usageError{err}
	}
	o, done, err := openDeadLetters(c)
	if err != nil {
		return err
	}
	defer done()
	n, err := admin.PurgeDeadLetters(c.Context, o, age)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"stream": o.Sink.DeadLetterStream(), "purged": n})
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s: deleted %d dead letters older than %s\n", o.Sink.DeadLetterStream(), n, age)
	return err
}
