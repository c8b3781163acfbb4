package main

import (
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// formatFlags are the flags of the entry format, shared by run and check.
func formatFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "format", Usage: "entry format: flat or symfony-messenger (docs/symfony.md); for laravel-jobs, laravel-queue or laravel-stream (docs/laravel.md)", EnvVars: []string{"BINLOG_OUTBOX_FORMAT"}, Value: entry.FormatFlat},
		&cli.StringSliceFlag{Name: "messenger-class", Usage: "symfony-messenger: message class of an event type, `event_type=Class`; repeatable", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS"}},
		&cli.StringFlag{Name: "messenger-class-file", Usage: "symfony-messenger: read event_type=Class lines (# comments) from this file, besides --messenger-class", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS_FILE"}},
		&cli.StringFlag{Name: "messenger-unmapped", Usage: "symfony-messenger: where unmapped event types go: dead-letter or class:<Class>", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_UNMAPPED"}, Value: entry.UnmappedDeadLetter},
		&cli.StringFlag{Name: "messenger-stamp", Usage: "symfony-messenger: a stamp class built from the outbox fields, seen by middleware and handlers", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_STAMP"}},
	}
}

// entryFormat reads the format flags (settings.Config.EntryFormat);
// commands without them get the flat format.
func entryFormat(c *cli.Context, cfg config) (entry.Format, error) {
	return cfg.EntryFormat(settings.FormatFlags{
		Name: c.String("format"), NameGiven: c.IsSet("format"),
		Classes: c.StringSlice("messenger-class"), ClassFile: c.String("messenger-class-file"),
		Unmapped: c.String("messenger-unmapped"), Stamp: c.String("messenger-stamp"),
	})
}

// recordedEntries is the entry flags c was given, completed from the
// record of the relay of cfg's table (relay.CommandEntries), which refuses
// a flag that contradicts it; what neither says has the flags' defaults.
func recordedEntries(c *cli.Context, cfg config, client redis.UniversalClient, command string) (relay.EntryFlags, error) {
	f := relay.EntryFlags{}
	if c.IsSet("stream") {
		f.Stream = c.String("stream")
	}
	if c.IsSet("partitions") {
		f.Partitions = c.Int("partitions")
	}
	if c.IsSet("dead-letter-stream") {
		f.DeadLetterStream = c.String("dead-letter-stream")
	}
	if c.IsSet("ensure-group") {
		f.Groups = ensureGroups(c)
	}
	given := false
	for _, name := range []string{"format", "messenger-class", "messenger-class-file", "messenger-unmapped", "messenger-stamp"} {
		given = given || c.IsSet(name)
	}
	source := cfg.SourceFormat() != ""
	format, err := entryFormat(c, cfg)
	if err != nil && (given || source) {
		return f, err
	}
	def := relay.EntryFlags{Partitions: c.Int("partitions"), DeadLetterStream: c.String("dead-letter-stream"), Format: &format}
	switch {
	case given:
		f.Format = &format
		if f.Stream, err = givenStream(c, cfg, format.Name); err != nil {
			return f, err
		}
	case source && !c.IsSet("stream"):
		// The source's format and its stream are defaults, as --format's
		// are: a relay of the source may record another (laravel-stream
		// where laravel-queue is the source's), and its record wins.
		if def.Stream, err = cfg.SourceStream(format.Name); err != nil {
			return f, err
		}
	}
	return relay.CommandEntries(c.Context, client, cfg, c.String("position-key"), f, def, command)
}
