package settings

import (
	"fmt"
	"slices"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// Sources the --source preset names.
const (
	// SourceOutbox is the default: a table of the relay's own layout.
	SourceOutbox = "outbox"
	// SourceSymfonyDoctrine is Symfony Messenger's Doctrine transport table,
	// relayed to Messenger's Redis transport (redisstream.FormatDoctrine).
	SourceSymfonyDoctrine = "symfony-doctrine"
)

// NameSource is the setting of the preset.
const NameSource = "source"

// SymfonyDoctrineTable is the Doctrine transport's default table_name.
const SymfonyDoctrineTable = "messenger_messages"

// symfonyDoctrineColumns map messenger_messages' columns: queue_name is the
// aggregate (the stream of outbox:{aggregate_type}, the ordering key) and
// stands in for event_type until the headers name the class; occurred_at is
// available_at, the time from which the message may be handled, which
// redisstream.FormatDoctrine holds delayed messages to; message_id is made
// from the id; created_at is not read. delivered_at is sent_at, which poll
// mode's --on-sent mark sets (the Doctrine transport's own worker, which sets
// it too, must not run on the table).
var symfonyDoctrineColumns = []string{
	"aggregate_type=queue_name", "aggregate_id=queue_name", "event_type=queue_name",
	"payload=body", "occurred_at=available_at", "message_id=-", "schema_version=-", "sent_at=delivered_at",
}

func sourceFlag() Flag {
	return Flag{Name: NameSource, Env: "BINLOG_OUTBOX_SOURCE", Default: []string{SourceOutbox},
		Usage: "what the table is: outbox (the relay's layout, --column to map it) or symfony-doctrine (Symfony Messenger's Doctrine transport table, messenger_messages by default, relayed to Messenger's Redis transport, one stream per queue_name; docs/symfony.md)"}
}

// applySource puts the preset of --source under the table and column
// settings the user gave, which win: a --table names another table_name, a
// --column maps a column otherwise.
func applySource(vs values) error {
	switch src := vs.str(NameSource); src {
	case SourceOutbox, "":
		return nil
	case SourceSymfonyDoctrine:
		if vs[nameTable].Source == Default {
			vs[nameTable] = Value{Values: []string{SymfonyDoctrineTable}, Source: Default}
		}
		v := vs[nameColumn]
		v.Values = append(slices.Clone(symfonyDoctrineColumns), v.Values...)
		vs[nameColumn] = v
		return nil
	default:
		return outbox.WithHint(fmt.Errorf("%w: --source %q is not a known source", outbox.ErrConfig, src),
			"use --source %s or --source %s", SourceOutbox, SourceSymfonyDoctrine)
	}
}

// SourceFormat is the entry format the source needs: "" for the default
// source (--format decides), or redisstream.FormatDoctrine.
func (c Config) SourceFormat() string {
	if c.Values[NameSource].First() == SourceSymfonyDoctrine {
		return redisstream.FormatDoctrine
	}
	return ""
}

// FormatFlags are the entry format flags as given: --format and the
// symfony-messenger ones.
type FormatFlags struct {
	// Name is --format; NameGiven says it was given, not defaulted.
	Name      string
	NameGiven bool
	// Classes are the --messenger-class values, ClassFile
	// --messenger-class-file ("" for none).
	Classes   []string
	ClassFile string
	// Unmapped and Stamp are --messenger-unmapped and --messenger-stamp.
	Unmapped, Stamp string
}

// EntryFormat is the entry format of f, validated. A source that needs a
// format of its own (SourceFormat) sets it, and refuses another --format.
func (c Config) EntryFormat(f FormatFlags) (redisstream.Format, error) {
	name := f.Name
	if src := c.SourceFormat(); src != "" {
		if f.NameGiven && name != src {
			return redisstream.Format{}, outbox.WithHint(fmt.Errorf("%w: --format %s does not go with --source %s", outbox.ErrConfig, name, c.Values[NameSource].First()),
				"drop --format: the source's rows are relayed in format %s", src)
		}
		name = src
	}
	format := redisstream.Format{Name: name, Unmapped: f.Unmapped, Stamp: f.Stamp}
	classes := map[string]string{}
	if err := redisstream.ParseClasses(f.Classes, classes, "--messenger-class"); err != nil {
		return format, err
	}
	if f.ClassFile != "" {
		if err := redisstream.ReadClassesFile(f.ClassFile, classes); err != nil {
			return format, err
		}
	}
	if len(classes) > 0 {
		format.Classes = classes
	}
	return format, format.Validate()
}

// OwnTable refuses to print or create the table of a source whose table
// another program creates: Messenger's Doctrine transport creates
// messenger_messages itself, in its own layout.
func (c Config) OwnTable() error {
	if c.SourceFormat() == "" {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: --source %s relays a table the framework creates, not one of the relay's layout", outbox.ErrConfig, c.Values[NameSource].First()),
		"create it as the framework does (Messenger: auto_setup, or bin/console messenger:setup-transports), then run binlog-outbox check")
}
