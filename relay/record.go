package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// startRecord is what binlog mode records of itself once its first session
// knows where it starts (canal.Config.Recorder): the record the checks
// compared with Redis (preflight.Report.Record), with this process as its
// holder and the first relay's start kept.
type startRecord struct {
	client         redis.UniversalClient
	rec            redisadmin.Record
	expectPosition bool
}

// recorder is the record of rep's relay, nil when it has none (no position
// key).
func recorder(client redis.UniversalClient, rep preflight.Report) *startRecord {
	if rep.Record == nil {
		return nil
	}
	return &startRecord{client: client, rec: *rep.Record, expectPosition: rep.PositionStored}
}

// write stores the record, keeping when a relay first recorded itself.
func (s *startRecord) write(ctx context.Context) error {
	r := s.rec
	now := time.Now().UTC()
	r.Since, r.UpdatedAt = now, now
	was, ok, err := redisadmin.ReadRecord(ctx, s.client, r.PositionKey)
	if err != nil {
		return err
	}
	if ok && !was.Since.IsZero() {
		r.Since = was.Since
	}
	host, _ := os.Hostname()
	r.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	return redisadmin.WriteRecord(ctx, s.client, r)
}

// EntryFlags are the flags that shape entries as a command was given them:
// zero where not given. A command that appends or reads the relay's
// entries takes what it was not given from the relay's record, and refuses
// what contradicts it (RecordedEntries).
type EntryFlags struct {
	Stream, DeadLetterStream string
	Partitions               int
	// Format is nil unless a format flag (or --source) was given.
	Format *entry.Format
	// Groups is nil unless --ensure-group was given.
	Groups []string
}

// ErrRecordContradicted means a command was given an entry flag that
// differs from the relay's record: its entries would go elsewhere, or look
// otherwise, than the relay's.
var ErrRecordContradicted = outbox.NewConfigError("a flag contradicts the relay's record")

// RecordedEntries completes f from the record of the binlog relay of cfg's
// table: the one at positionKey (--position-key; "" for the table's
// default), or else the one record whose tables include the table. A flag
// f has that differs from the record is refused, naming both; what f lacks
// comes from the record. Without a record, f's flags stand, with their
// defaults, and rec is nil.
func RecordedEntries(ctx context.Context, client redis.UniversalClient, cfg settings.Config, positionKey string, f EntryFlags, command string) (out EntryFlags, rec *redisadmin.Record, err error) {
	r, err := findRecord(ctx, client, cfg, positionKey)
	if err != nil || r == nil {
		return f, nil, err
	}
	var diff []string
	if f.Stream != "" && f.Stream != r.Stream {
		diff = append(diff, fmt.Sprintf("--stream %q (the relay's: %q)", f.Stream, r.Stream))
	}
	if f.Partitions != 0 && f.Partitions != r.Partitions {
		diff = append(diff, fmt.Sprintf("--partitions %d (the relay's: %d)", f.Partitions, r.Partitions))
	}
	if f.DeadLetterStream != "" && f.DeadLetterStream != r.DeadLetterStream {
		diff = append(diff, fmt.Sprintf("--dead-letter-stream %q (the relay's: %q)", f.DeadLetterStream, r.DeadLetterStream))
	}
	if f.Format != nil {
		given := *f.Format
		if err := given.Validate(); err == nil && given.String() != r.Format.String() {
			diff = append(diff, fmt.Sprintf("format %s (the relay's: %s)", given.String(), r.Format.String()))
		}
	}
	if len(diff) > 0 {
		return f, r, outbox.WithHint(fmt.Errorf("%w: %s: %s; the relay of %s writes otherwise (its record %s)",
			ErrRecordContradicted, command, strings.Join(diff, ", "), r.PositionKey, redisadmin.RecordKey(r.PositionKey)),
			"leave these flags out: %s takes the relay's settings from its record; if the relay's settings are what changed, start the relay with them first (it records them)", command)
	}
	format := r.Format
	out = EntryFlags{Stream: r.Stream, Partitions: r.Partitions, DeadLetterStream: r.DeadLetterStream, Format: &format, Groups: f.Groups}
	if out.Groups == nil {
		out.Groups = r.Groups
	}
	return out, r, nil
}

// CommandEntries is RecordedEntries for an admin command: what neither the
// flags nor the record say takes the flags' defaults (def), and the formats
// of Laravel's jobs table are refused for the commands that find a row by
// its entry.
func CommandEntries(ctx context.Context, client redis.UniversalClient, cfg settings.Config, positionKey string, f, def EntryFlags, command string) (EntryFlags, error) {
	out, _, err := RecordedEntries(ctx, client, cfg, positionKey, f, command)
	if err != nil {
		return out, err
	}
	if out.Stream == "" {
		out.Stream = def.Stream
	}
	if out.Partitions == 0 {
		out.Partitions = def.Partitions
	}
	if out.DeadLetterStream == "" {
		out.DeadLetterStream = def.DeadLetterStream
	}
	if out.Format == nil {
		out.Format = def.Format
	}
	return out, refuseJobsEntries(command, out.Format.Name)
}

// refuseJobsEntries refuses, for the formats of Laravel's jobs table, the
// commands that find a row by its entry: a job leaves Laravel's queue when a
// worker takes it, and the outbox connector's entries are named otherwise,
// so verify would call every job missing and repair would deliver it again,
// to run twice.
func refuseJobsEntries(command, format string) error {
	if format != entry.FormatLaravelQueue && format != entry.FormatLaravelStream {
		return nil
	}
	switch command {
	case "verify", "repair", "mark-appended", "dead-letters replay":
		return outbox.WithHint(fmt.Errorf("%w: %s does not work with --format %s: it finds rows by their entries, and jobs leave Laravel's queues as workers take them", outbox.ErrConfig, command, format),
			"binlog mode delivers each committed job once by itself; `binlog-outbox status` shows how far the relay is, and `php artisan queue:failed` the jobs that failed")
	}
	return nil
}

// findRecord finds the record of the relay of cfg's table: at positionKey
// when given, else at the table's default key, else the one record whose
// tables include it; nil when none does. Several records of the table
// (relays of one table to different streams) need --position-key.
func findRecord(ctx context.Context, client redis.UniversalClient, cfg settings.Config, positionKey string) (*redisadmin.Record, error) {
	records, err := redisadmin.ListRecords(ctx, client)
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return nil, err
		}
		return nil, outbox.WithHint(fmt.Errorf("read the relays' records: %w", err),
			"the command takes the relay's stream and format from its record; Redis (on a cluster, the master of %s) is unreachable: run the command again once it answers (a cluster replaces a master within cluster-node-timeout)", redisadmin.RecordIndexKey)
	}
	if key := cfg.PositionKey(positionKey); key != "" {
		for _, r := range records {
			if r.PositionKey == key {
				return &r, nil
			}
		}
		if positionKey != "" {
			return nil, nil // the one given has none
		}
	}
	var found []redisadmin.Record
	for _, r := range records {
		for _, v := range r.Tables {
			if p, err := schema.ParsePattern(v); err == nil && p.MatchesFold(cfg.Database, cfg.Table) {
				found = append(found, r)
				break
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	}
	keys := make([]string, len(found))
	for i, r := range found {
		keys[i] = r.PositionKey
	}
	return nil, outbox.WithHint(fmt.Errorf("%w: relays of several positions record %s.%s: %s", outbox.ErrConfig, cfg.Database, cfg.Table, strings.Join(keys, ", ")),
		"give --position-key: the relay whose streams the command is for")
}
