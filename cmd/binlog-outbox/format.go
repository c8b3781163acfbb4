package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// formatFlags are the flags of the entry format, shared by run and check.
func formatFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "format", Usage: "entry format: flat (one field per column) or symfony-messenger (a message field Symfony Messenger's Redis transport reads; docs/symfony.md)", EnvVars: []string{"BINLOG_OUTBOX_FORMAT"}, Value: redisstream.FormatFlat},
		&cli.StringSliceFlag{Name: "messenger-class", Usage: "symfony-messenger: the message class of an event type, `event_type=Class` (e.g. order.placed=App\\Message\\OrderPlaced); repeatable, comma-separated in the environment variable", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS"}},
		&cli.StringFlag{Name: "messenger-class-file", Usage: "symfony-messenger: read event_type=Class lines (# comments) from this file, besides --messenger-class", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS_FILE"}},
		&cli.StringFlag{Name: "messenger-unmapped", Usage: "symfony-messenger: where an event type without a class goes: dead-letter (the dead-letter stream, with the reason) or class:<Class> (delivered as that class)", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_UNMAPPED"}, Value: redisstream.UnmappedDeadLetter},
		&cli.StringFlag{Name: "messenger-stamp", Usage: "symfony-messenger: a stamp class that Messenger builds from the outbox fields (messageId, aggregateId, ...), so that middleware and handlers see them, through retries too", EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_STAMP"}},
	}
}

// entryFormat reads the format flags (settings.Config.EntryFormat);
// commands without them get the flat format.
func entryFormat(c *cli.Context, cfg config) (redisstream.Format, error) {
	return cfg.EntryFormat(settings.FormatFlags{
		Name: c.String("format"), NameGiven: c.IsSet("format"),
		Classes: c.StringSlice("messenger-class"), ClassFile: c.String("messenger-class-file"),
		Unmapped: c.String("messenger-unmapped"), Stamp: c.String("messenger-stamp"),
	})
}
