package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

func backfillCommand() *cli.Command {
	var shared []cli.Flag
	for _, f := range streamFlags() {
		// --stream is the backfill's own; the relay's is --live-stream.
		if n := f.Names()[0]; n == "partitions" || n == "dead-letter-stream" {
			shared = append(shared, f)
		}
	}
	return &cli.Command{
		Name:  "backfill",
		Usage: "append the rows the outbox table holds to a separate set of streams, for a new consumer",
		Description: "Appends the rows of the table whose occurred_at is at or after --since and before --until, in id order\n" +
			"up to the highest id at start, to the streams of --stream, encoded as run encodes them (same --format\n" +
			"flags), at most --rate entries a second. Each step appends its entries and stores the last id under its\n" +
			"own progress key (binlog-outbox:backfill:<database>.<table>:<hash of --stream, --since, --until>) in one\n" +
			"Redis script: run the same command again after an interruption and it resumes, each row once; after it\n" +
			"finished it appends nothing. It never writes the live streams, the dead-letter stream or the position,\n" +
			"and refuses a --stream that can name a stream of --live-stream or the dead-letter stream. Rows run would\n" +
			"dead-letter are left out and listed. Not on Redis Cluster. See docs/backfill.md.",
		Flags: append(append(append([]cli.Flag{
			&cli.StringFlag{Name: "stream", Usage: "stream key template of the backfill, e.g. 'rebuild:{aggregate_type}' (required; placeholders as run's --stream)"},
			&cli.StringFlag{Name: "live-stream", Usage: "the relay's --stream, whose streams the backfill must not write", EnvVars: []string{"BINLOG_OUTBOX_STREAM"}, Value: entry.DefaultStream},
			&cli.StringFlag{Name: "since", Usage: "backfill the rows whose occurred_at is at or after this RFC 3339 time, e.g. 2026-11-01T00:00:00Z"},
			&cli.StringFlag{Name: "until", Usage: "backfill the rows whose occurred_at is before this RFC 3339 time"},
			&cli.IntFlag{Name: "rate", Usage: "most entries appended per second; 0 for no bound", Value: admin.DefaultBackfillRate},
		}, shared...), formatFlags()...), &cli.BoolFlag{Name: "json", Usage: "print the result as JSON"}),
		Action: runBackfill,
	}
}

// backfillWindow parses --since and --until.
func backfillWindow(c *cli.Context) (since, until time.Time, err error) {
	for _, w := range []struct {
		name string
		to   *time.Time
	}{{"since", &since}, {"until", &until}} {
		if !c.IsSet(w.name) {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, c.String(w.name))
		if err != nil {
			return since, until, usageError{outbox.WithHint(fmt.Errorf("--%s %q is not an RFC 3339 time", w.name, c.String(w.name)),
				"give a time with its zone, e.g. --%s 2026-11-01T00:00:00Z", w.name)}
		}
		*w.to = t
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, usageError{outbox.WithHint(fmt.Errorf("--since %s is not before --until %s", c.String("since"), c.String("until")),
			"the window holds the rows at or after --since and before --until")}
	}
	return since, until, nil
}

func runBackfill(c *cli.Context) error {
	if c.String("stream") == "" {
		return usageError{outbox.WithHint(errors.New("give --stream: the template of the backfill's own streams"),
			"e.g. --stream 'rebuild:{aggregate_type}', which must not name a stream of the relay's --stream (--live-stream here)")}
	}
	since, until, err := backfillWindow(c)
	if err != nil {
		return err
	}
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	live := ""
	if c.IsSet("live-stream") {
		live = c.String("live-stream")
	}
	client := cfg.RedisClient()
	defer client.Close()
	// The relay's streams, which the backfill must not write: its record
	// says them, and refuses a --live-stream that says otherwise.
	recorded, _, err := relay.RecordedEntries(c.Context, client, cfg, "", relay.EntryFlags{Stream: live}, "backfill --live-stream")
	if err != nil {
		return err
	}
	partitions := c.Int("partitions")
	if recorded.Partitions != 0 {
		partitions = recorded.Partitions
	}
	liveT, err := admin.BackfillLive(cfg.RedisCluster != nil, relay.StreamTemplate(cfg, recorded.Stream), partitions, cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return err
	}
	format, err := entryFormat(c, cfg)
	if err != nil {
		return err
	}
	sink, err := relay.EntrySink(client, relay.Options{
		Config: cfg, Stream: c.String("stream"), Partitions: c.Int("partitions"), DeadLetterStream: c.String("dead-letter-stream"), Format: format,
	})
	if err != nil {
		return err
	}
	if err := admin.CheckBackfillTarget(sink.Template(), liveT, sink.DeadLetterStream()); err != nil {
		return err
	}
	db, res, err := openUsableTable(c.Context, &cfg, "backfill")
	if err != nil {
		return err
	}
	defer db.Close()
	asJSON := c.Bool("json")
	r, err := admin.Backfill(c.Context, admin.BackfillOptions{
		Redis: client, DB: db, Sink: sink, Live: liveT, Table: outboxTable(cfg, res), Database: cfg.Database, Extra: cfg.Extra,
		Since: since, Until: until, Rate: c.Int("rate"),
		Progress: func(r admin.BackfillReport) {
			if !asJSON && r.Appended > 0 {
				fmt.Fprintf(c.App.Writer, "appended %d, last id %d of %d\n", r.Appended, r.LastID, r.UpTo)
			}
		},
	})
	if err != nil {
		return err
	}
	return printResult(c.App.Writer, &r, asJSON)
}
