package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// formatFlags are the flags of the entry format, shared by run and check.
func formatFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "format",
			Usage:   "entry format: flat (one field per column) or symfony-messenger (a message field Symfony Messenger's Redis transport reads; docs/symfony.md)",
			EnvVars: []string{"BINLOG_OUTBOX_FORMAT"},
			Value:   redisstream.FormatFlat,
		},
		&cli.StringSliceFlag{
			Name:    "messenger-class",
			Usage:   "symfony-messenger: the message class of an event type, `event_type=Class` (e.g. order.placed=App\\Message\\OrderPlaced); repeatable, comma-separated in the environment variable",
			EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS"},
		},
		&cli.StringFlag{
			Name:    "messenger-class-file",
			Usage:   "symfony-messenger: read event_type=Class lines (# comments) from this file, besides --messenger-class",
			EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_CLASS_FILE"},
		},
		&cli.StringFlag{
			Name:    "messenger-unmapped",
			Usage:   "symfony-messenger: where an event type without a class goes: dead-letter (the dead-letter stream, with the reason) or class:<Class> (delivered as that class)",
			EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_UNMAPPED"},
			Value:   redisstream.UnmappedDeadLetter,
		},
		&cli.StringFlag{
			Name:    "messenger-stamp",
			Usage:   "symfony-messenger: a stamp class that Messenger builds from the outbox fields (messageId, aggregateId, ...), so that middleware and handlers see them, through retries too",
			EnvVars: []string{"BINLOG_OUTBOX_MESSENGER_STAMP"},
		},
	}
}

// entryFormat reads the format flags; commands without them get the flat
// format. A --source that needs a format of its own (symfony-doctrine) sets
// it, and refuses another --format.
func entryFormat(c *cli.Context, cfg config) (redisstream.Format, error) {
	name := c.String("format")
	if src := cfg.SourceFormat(); src != "" {
		if c.IsSet("format") && name != src {
			return redisstream.Format{}, outbox.WithHint(fmt.Errorf("%w: --format %s does not go with --source %s", outbox.ErrConfig, name, cfg.Values[settings.NameSource].First()),
				"drop --format: the source's rows are relayed in format %s", src)
		}
		name = src
	}
	f := redisstream.Format{
		Name:     name,
		Unmapped: c.String("messenger-unmapped"),
		Stamp:    c.String("messenger-stamp"),
	}
	classes := map[string]string{}
	if err := redisstream.ParseClasses(c.StringSlice("messenger-class"), classes, "--messenger-class"); err != nil {
		return f, err
	}
	if path := c.String("messenger-class-file"); path != "" {
		if err := redisstream.ReadClassesFile(path, classes); err != nil {
			return f, err
		}
	}
	if len(classes) > 0 {
		f.Classes = classes
	}
	return f, f.Validate()
}
