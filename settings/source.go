package settings

import (
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
)

// Sources the --source preset names.
const (
	// SourceOutbox is the default: a table of the relay's own layout.
	SourceOutbox = "outbox"
	// SourceSymfonyDoctrine is Symfony Messenger's Doctrine transport table,
	// relayed to Messenger's Redis transport (entry.FormatDoctrine).
	SourceSymfonyDoctrine = "symfony-doctrine"
	// SourceLaravelJobs is Laravel's database queue table, relayed to
	// Laravel's Redis queue (entry.FormatLaravelQueue) or to the
	// outbox connector's streams (entry.FormatLaravelStream).
	SourceLaravelJobs = "laravel-jobs"
)

// NameSource is the setting of the preset.
const NameSource = "source"

// SymfonyDoctrineTable is the Doctrine transport's default table_name.
const SymfonyDoctrineTable = "messenger_messages"

// symfonyDoctrineColumns map messenger_messages' columns: queue_name is the
// aggregate (the stream of outbox:{aggregate_type}, the ordering key) and
// stands in for event_type until the headers name the class; occurred_at is
// available_at, the time from which the message may be handled, which
// entry.FormatDoctrine holds delayed messages to; message_id is made
// from the id; created_at is not read. delivered_at is sent_at, which poll
// mode's --on-sent mark sets (the Doctrine transport's own worker, which sets
// it too, must not run on the table).
var symfonyDoctrineColumns = []string{
	"aggregate_type=queue_name", "aggregate_id=queue_name", "event_type=queue_name",
	"payload=body", "occurred_at=available_at", "message_id=-", "schema_version=-", "sent_at=delivered_at",
}

// LaravelJobsTable is the database queue's default table
// (queue.connections.database.table).
const LaravelJobsTable = "jobs"

// laravelJobsColumns map jobs' columns: queue is the aggregate (the list or
// stream of queues:{aggregate_type}, the ordering key) and the event type
// until the payload names the job; available_at, the Unix time from which
// the job may run, is occurred_at, which the Laravel formats hold delayed
// jobs to; message_id is made from the id. attempts, reserved_at and
// created_at are not read: a database worker's reservation shows as an
// UPDATE, which the binlog reader reports (canal.Config.UpdateWarning).
var laravelJobsColumns = []string{
	"aggregate_type=queue", "aggregate_id=queue", "event_type=queue", "payload=payload",
	"occurred_at=available_at", "message_id=-", "schema_version=-", "headers=-", "sent_at=-",
}

// LaravelStreamPrefix starts the default stream of --format laravel-stream:
// one stream per queue, outbox:jobs:<queue>, which the outbox connector's
// stream_prefix names.
const LaravelStreamPrefix = "outbox:jobs:"

func sourceFlag() Flag {
	return Flag{Name: NameSource, Env: "BINLOG_OUTBOX_SOURCE", Default: []string{SourceOutbox},
		Usage: "what the table is: outbox (--column maps it), symfony-doctrine (docs/symfony.md) or laravel-jobs (docs/laravel.md)"}
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
	case SourceLaravelJobs:
		if vs[nameTable].Source == Default {
			vs[nameTable] = Value{Values: []string{LaravelJobsTable}, Source: Default}
		}
		v := vs[nameColumn]
		v.Values = append(slices.Clone(laravelJobsColumns), v.Values...)
		vs[nameColumn] = v
		return nil
	default:
		return outbox.WithHint(fmt.Errorf("%w: --source %q is not a known source", outbox.ErrConfig, src),
			"use --source %s, --source %s or --source %s", SourceOutbox, SourceSymfonyDoctrine, SourceLaravelJobs)
	}
}

// SourceFormat is the entry format the source needs by default: "" for
// the default source (--format decides), entry.FormatDoctrine or
// entry.FormatLaravelQueue.
func (c Config) SourceFormat() string {
	switch c.Values[NameSource].First() {
	case SourceSymfonyDoctrine:
		return entry.FormatDoctrine
	case SourceLaravelJobs:
		return entry.FormatLaravelQueue
	}
	return ""
}

// sourceFormats are the formats a source takes besides SourceFormat.
func (c Config) sourceFormats() []string {
	if c.Values[NameSource].First() == SourceLaravelJobs {
		return []string{entry.FormatLaravelQueue, entry.FormatLaravelStream}
	}
	return []string{c.SourceFormat()}
}

// SourceStream is the stream template of the source in format when --stream
// is not given, "" for the default one: with --source laravel-jobs, Laravel's
// queue key <prefix>queues:{aggregate_type} (the prefix of
// --laravel-redis-prefix or --laravel-env) or LaravelStreamPrefix's stream
// per queue. Laravel's queue key cannot be guessed: jobs pushed under
// another prefix than the application's would wait where no worker looks.
func (c Config) SourceStream(format string) (string, error) {
	switch format {
	case entry.FormatLaravelQueue:
		if !c.LaravelRedisPrefixKnown {
			return "", outbox.WithHint(fmt.Errorf("%w: --format %s needs the Redis key prefix of the Laravel application", outbox.ErrConfig, format),
				"give --laravel-env with the application's .env (REDIS_PREFIX, or APP_NAME as config/database.php derives it), or --laravel-redis-prefix with the prefix config('database.redis.options.prefix') shows (--laravel-redis-prefix '' for none)")
		}
		return c.LaravelRedisPrefix + "queues:{" + "aggregate_type}", nil
	case entry.FormatLaravelStream:
		return LaravelStreamPrefix + "{aggregate_type}", nil
	}
	return "", nil
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
func (c Config) EntryFormat(f FormatFlags) (entry.Format, error) {
	name := f.Name
	if src := c.SourceFormat(); src != "" {
		if f.NameGiven && slices.Contains(c.sourceFormats(), name) {
			src = name
		}
		if f.NameGiven && name != src {
			return entry.Format{}, outbox.WithHint(fmt.Errorf("%w: --format %s does not go with --source %s", outbox.ErrConfig, name, c.Values[NameSource].First()),
				"drop --format: the source's rows are relayed in format %s", strings.Join(c.sourceFormats(), " or "))
		}
		name = src
	}
	format := entry.Format{Name: name, Unmapped: f.Unmapped, Stamp: f.Stamp}
	classes := map[string]string{}
	if err := entry.ParseClasses(f.Classes, classes, "--messenger-class"); err != nil {
		return format, err
	}
	if f.ClassFile != "" {
		if err := entry.ReadClassesFile(f.ClassFile, classes); err != nil {
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
		"create it as the framework does (Messenger: auto_setup, or bin/console messenger:setup-transports; Laravel: php artisan queue:table and migrate), then run binlog-outbox check")
}

// UpdateWarning is what binlog mode logs when the binlog shows an UPDATE of
// the source's table (canal.Config.UpdateWarning), "" for a source whose
// rows may be updated. Nothing but Laravel's database queue worker
// (queue:work database, queue:listen database) updates a jobs row: it
// reserves the row (reserved_at, attempts) before it runs the job, which
// the relay delivers to Redis too.
func (c Config) UpdateWarning() string {
	if c.Values[NameSource].First() != SourceLaravelJobs {
		return ""
	}
	return "jobs run twice: a worker of Laravel's database queue (queue:work database) is reserving rows of the jobs table, whose jobs the relay delivers to Redis as well; " +
		"hint: stop every worker and Horizon supervisor whose connection is the database one (run them on the redis or outbox connection) (docs/laravel.md, \"Your jobs, exactly once\")"
}

// ReservedColumn is the column of the source's table that another worker
// sets on the rows it takes, for check to warn about (preflight), "" for a
// source no other worker reads: Laravel's jobs.reserved_at.
func (c Config) ReservedColumn() string {
	if c.Values[NameSource].First() == SourceLaravelJobs {
		return "reserved_at"
	}
	return ""
}
