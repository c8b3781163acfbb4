package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// The relay's state in Redis, as binlog mode finds it at start: the record
// of the relay of each position (redisadmin.Record) and, when no position
// is stored, whether anything shows the tables were relayed before. A
// bare position could not tell a first start from a lost one, nor a second
// relay of a table from a restart; these checks can, and `run` stops on
// what they refuse, as `check` reports it.

// Requirement names of the relay's state.
const (
	// NameRelays is the requirement that no relay of another position
	// appends the tables to the same streams.
	NameRelays = "relays of the tables"
	// NameFirstStart is the requirement that a start without a stored
	// position is a first start that leaves nothing behind: nothing in
	// Redis shows the tables were relayed before, and the tables hold no
	// row the start would skip (or --start-from says where to begin).
	NameFirstStart = "start without a position"
)

// maxCounted bounds the rows a first start counts.
const maxCounted = 100000

// stateTable is a table the relay follows, with its resolved mapping.
type stateTable struct {
	outboxsql.Table
}

// name is database.table.
func (t stateTable) name() string { return t.Database + "." + t.Name }

// stateTables are the tables the relay follows: the one table, or those
// the sources matched.
func stateTables(res *schema.Resolution, tables []TableMatch) []stateTable {
	var out []stateTable
	if res != nil && res.Table != nil {
		out = append(out, stateTable{outboxsql.Table{Database: res.Table.Database, Name: res.Table.Name, Mapping: res.Mapping, Info: res.Table}})
	}
	for _, m := range tables {
		if m.Resolution.Table == nil {
			continue
		}
		out = append(out, stateTable{outboxsql.Table{Database: m.Resolution.Table.Database, Name: m.Resolution.Table.Name, Mapping: m.Resolution.Mapping, Info: m.Resolution.Table}})
	}
	return out
}

// RecordOf is the record a relay of cfg writes at start (the tables as
// resolved, the entries' settings with their defaults), nil when cfg has no
// position key or start; check compares it with what Redis holds, and run
// writes it, so that both see the same.
func RecordOf(cfg Config, m schema.Mapping, tables []TableMatch, res *schema.Resolution) *redisadmin.Record {
	if cfg.Start == nil || cfg.PositionKey == "" {
		return nil
	}
	sc := cfg.Start.SinkConfig(m)
	if err := sc.Validate(); err != nil {
		return nil // a refused setting (checkStart)
	}
	// Validate set the defaults on its own copy.
	_ = (&sc.Format).Validate()
	if sc.Partitions == 0 {
		sc.Partitions = 1
	}
	if sc.DeadLetterStream == "" {
		sc.DeadLetterStream = redisstream.DefaultDeadLetterStream
	}
	r := &redisadmin.Record{
		PositionKey: cfg.PositionKey, Stream: sc.Stream, Partitions: sc.Partitions, DeadLetterStream: sc.DeadLetterStream,
		Format: sc.Format, Groups: sc.Groups, ServerID: cfg.ServerID,
	}
	if len(cfg.Sources) > 0 {
		for _, p := range schema.PatternsOf(cfg.Sources) {
			r.Tables = append(r.Tables, p.String())
		}
	} else {
		for _, t := range stateTables(res, nil) {
			r.Tables = append(r.Tables, t.name())
		}
	}
	return r
}

// checkState checks the relay's state in Redis (binlog mode, with a
// position key and Start): the records of other positions, this one's,
// and, with no position stored, the first start.
func checkState(ctx context.Context, cfg Config, c redis.UniversalClient, rec *redisadmin.Record, tables []stateTable, stored []byte) []Result {
	var out []Result
	records, err := redisadmin.ListRecords(ctx, c)
	if err != nil {
		return []Result{skip(NameRelays, "not checked: cannot read the relays' records: "+err.Error(), binlogOnly)}
	}
	out = append(out, checkRelays(ctx, c, rec, tables, records)...)
	out = append(out, checkStreamKeys(ctx, c, rec))
	if !cfg.Start.Lease {
		out = append(out, checkWithoutLease(ctx, c, rec))
	}
	if stored != nil {
		return out
	}
	return append(out, checkFirstStart(ctx, cfg, c, rec, tables, records))
}

// NameStreamKeys is the requirement that the keys the template names hold
// streams (or nothing yet).
const NameStreamKeys = "stream keys"

// checkStreamKeys reports keys under the template that hold another type
// than a stream: the events bound for one go to the dead-letter stream
// (redisstream.WrongTypeError) rather than stall every aggregate.
func checkStreamKeys(ctx context.Context, c redis.UniversalClient, rec *redisadmin.Record) Result {
	t, err := entry.ParseTemplate(rec.Stream, rec.Partitions, true)
	if err != nil {
		return skip(NameStreamKeys, "not checked: "+err.Error(), binlogOnly)
	}
	// The dead letters have nowhere else to go: one of another type
	// stops the relay at its first dead letter.
	if typ, err := c.Type(ctx, rec.DeadLetterStream).Result(); err == nil && typ != "stream" && typ != "none" {
		err := outbox.WithHint(fmt.Errorf("%w: the dead-letter stream %s holds a %s", outbox.ErrConfig, rec.DeadLetterStream, typ),
			"another application uses the key: rename or delete it, or give --dead-letter-stream a key of its own")
		return refusal(NameStreamKeys, err, both)
	}
	if rec.Format.Name == entry.FormatLaravelQueue {
		return checkLaravelQueueKeys(ctx, c, t.Glob())
	}
	all, err := redisconn.ScanKeys(ctx, c, t.Glob())
	if err == nil {
		var streams []string
		if streams, err = redisconn.ScanStreams(ctx, c, t.Glob()); err == nil {
			others := otherTypes(ctx, c, all, func(k string) bool {
				return slices.Contains(streams, k) || k == rec.DeadLetterStream || strings.HasSuffix(k, entry.DelayedSetSuffix) ||
					(rec.Format.Name == entry.FormatLaravelStream && strings.HasSuffix(k, entry.LaravelDelayedSuffix))
			}, "stream")
			if len(others) > 0 {
				return warn(NameStreamKeys, "keys the --stream template names hold other types: "+strings.Join(others, ", ")+"; the events bound for them go to the dead-letter stream, with the reason",
					"another application uses these keys: rename or delete them, or give --stream a prefix of its own; then replay the dead letters (binlog-outbox dead-letters replay)", both)
			}
			return pass(NameStreamKeys, "the keys under "+t.Glob()+" are streams", both)
		}
	}
	return skip(NameStreamKeys, "not checked: "+err.Error(), both)
}

// checkLaravelQueueKeys is checkStreamKeys for Laravel's Redis queue
// (entry.FormatLaravelQueue), whose keys under glob are lists (the
// queues and their notify lists) and sorted sets (delayed and reserved
// jobs).
func checkLaravelQueueKeys(ctx context.Context, c redis.UniversalClient, glob string) Result {
	all, err := redisconn.ScanKeys(ctx, c, glob)
	if err != nil {
		return skip(NameStreamKeys, "not checked: "+err.Error(), both)
	}
	if others := otherTypes(ctx, c, all, nil, "list", "zset"); len(others) > 0 {
		return warn(NameStreamKeys, "keys where Laravel's queues lie hold other types than lists and sorted sets: "+strings.Join(others, ", ")+"; the jobs bound for them go to the dead-letter stream, with the reason",
			"another application uses these keys: rename or delete them, or check --laravel-redis-prefix; then replay the dead letters (binlog-outbox dead-letters replay)", both)
	}
	return pass(NameStreamKeys, "the keys under "+glob+" are Laravel queues' lists and sorted sets", both)
}

// NameWithoutLease is the requirement that a relay without the lease
// (--lease=false) reads its position alone.
const NameWithoutLease = "reading without the lease"

// checkWithoutLease refuses --lease=false beside a relay that holds the
// lease of the position: the position's compare-and-set would fence the
// holder, which reads rightfully. A relay of the position that claims the
// server id without the lease is a warning: the relay waits for its claim
// to end (it may be this relay's own dead process) and stops if it lasts.
func checkWithoutLease(ctx context.Context, c redis.UniversalClient, rec *redisadmin.Record) Result {
	lease := redisstream.KeysFor("", "", rec.PositionKey).Lease
	info, _, held, err := redisstream.ReadLease(ctx, c, lease)
	if err != nil {
		return skip(NameWithoutLease, "not checked: "+err.Error(), binlogOnly)
	}
	if held {
		err := outbox.WithHint(fmt.Errorf("%w: --lease=false, but the relay %s holds the lease of this position (%s): a relay without the lease would fence it", outbox.ErrConfig, info, lease),
			"run this relay with --lease (the default): it stands by and takes over when that one stops; or stop that relay first")
		return refusal(NameWithoutLease, err, binlogOnly)
	}
	claim, claimed, err := redisstream.ReadServerIDClaim(ctx, c, rec.ServerID)
	if err == nil && claimed && claim.PositionKey == rec.PositionKey {
		return warn(NameWithoutLease, claim.String()+" reads with server id "+strconv.FormatUint(uint64(rec.ServerID), 10)+
			": a relay without the lease reads alone, so this one waits for that claim to end (its own dead process's ends within --lease-ttl), and stops if it does not",
			"stop the other relay of this position, or run both with --lease (the default) to take turns", binlogOnly)
	}
	return pass(NameWithoutLease, "no relay holds the lease of "+rec.PositionKey, binlogOnly)
}

// checkRelays refuses the tables and streams of another position's relay,
// and says what changed since this position's relay recorded itself.
func checkRelays(ctx context.Context, c redis.UniversalClient, rec *redisadmin.Record, tables []stateTable, records []redisadmin.Record) []Result {
	ours, err := entry.ParseTemplate(rec.Stream, rec.Partitions, true)
	if err != nil {
		return nil // a refused setting (checkStart)
	}
	var out []Result
	for _, other := range records {
		if other.PositionKey == rec.PositionKey {
			if d := recordChanges(other, *rec); d != "" {
				out = append(out, warn(NameRelays, "the relay of "+rec.PositionKey+" recorded other settings ("+d+"): run records these, and entries appended before stay where they are",
					"if this is a deliberate change, nothing to do; otherwise start the relay with the settings it ran with (`binlog-outbox status` shows its record)", binlogOnly))
			}
			continue
		}
		theirs, err := entry.ParseTemplate(other.Stream, max(other.Partitions, 1), true)
		if err != nil || !theirs.MayOverlap(ours) {
			continue
		}
		shared := sharedTables(other, tables)
		if len(shared) == 0 {
			continue
		}
		reading, err := other.Reading(ctx, c)
		if err != nil {
			reading = "unknown: " + err.Error()
		}
		if reading == "" {
			reading = "no relay of it runs now"
		}
		err = outbox.WithHint(fmt.Errorf("%w: %s %s appended to --stream %q by the relay of position %s (recorded by %s since %s; %s): a relay of position %s would append every event a second time",
			outbox.ErrConfig, strings.Join(shared, ", "), isAre(len(shared)), other.Stream, other.PositionKey, other.Holder, other.Since.UTC().Format(time.RFC3339), reading, rec.PositionKey),
			"a table and a stream template belong to one position: give --position-key %s to go on from it (a table added to that relay joins its position), or give these streams a --stream of their own; "+
				"if that relay is retired for good, stop it and forget its position with `binlog-outbox position reset --position-key %s` (docs/running.md)", other.PositionKey, other.PositionKey)
		out = append(out, refusal(NameRelays, err, binlogOnly))
	}
	if len(out) == 0 {
		out = append(out, pass(NameRelays, fmt.Sprintf("no relay of another position appends these tables to --stream %q", rec.Stream), binlogOnly))
	}
	return out
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// sharedTables are the tables of tables that a --table value of r matches.
func sharedTables(r redisadmin.Record, tables []stateTable) []string {
	var out []string
	for _, v := range r.Tables {
		p, err := schema.ParsePattern(v)
		if err != nil {
			continue
		}
		for _, t := range tables {
			if p.MatchesFold(t.Database, t.Name) && !slices.Contains(out, t.name()) {
				out = append(out, t.name())
			}
		}
	}
	slices.Sort(out)
	return out
}

// recordChanges names the settings of now that differ from was's, "" when
// none do.
func recordChanges(was, now redisadmin.Record) string {
	var d []string
	if was.Stream != now.Stream {
		d = append(d, fmt.Sprintf("--stream %q, now %q", was.Stream, now.Stream))
	}
	if was.Partitions != now.Partitions {
		d = append(d, fmt.Sprintf("--partitions %d, now %d", was.Partitions, now.Partitions))
	}
	if was.DeadLetterStream != now.DeadLetterStream {
		d = append(d, fmt.Sprintf("--dead-letter-stream %q, now %q", was.DeadLetterStream, now.DeadLetterStream))
	}
	if was.Format.String() != now.Format.String() {
		d = append(d, fmt.Sprintf("format %s, now %s", was.Format.String(), now.Format.String()))
	}
	if !slices.Equal(was.Tables, now.Tables) {
		d = append(d, fmt.Sprintf("--table %s, now %s", strings.Join(was.Tables, ","), strings.Join(now.Tables, ",")))
	}
	return strings.Join(d, "; ")
}

// checkFirstStart decides a start without a stored position. Where Redis
// shows the tables were relayed before (this position's record, which a
// relay writes once it stored a position, entries of their rows in the
// streams or among the dead letters) the position was lost (deleted, evicted, or Redis lost it), and
// starting anywhere would skip or repeat events: refused, with repair.
// Otherwise it is a first start, which skips the rows the tables already
// hold unless --start-from says where to begin: refused while they hold
// rows and --start-from is not given.
func checkFirstStart(ctx context.Context, cfg Config, c redis.UniversalClient, rec *redisadmin.Record, tables []stateTable, records []redisadmin.Record) Result {
	evidence, poll, err := earlierRelay(ctx, cfg, c, rec, tables, records)
	switch {
	case err != nil:
		return skip(NameFirstStart, "not checked: "+err.Error(), binlogOnly)
	case poll != "":
		// Where a switch from poll mode starts is the mode switch's to
		// check (mode switch).
		return skip(NameFirstStart, "not checked: "+poll, binlogOnly)
	}
	if evidence != "" {
		err := outbox.WithHint(fmt.Errorf("%w: no position is stored at %s, but %s: the relay ran before and its position is gone (deleted, evicted, or lost by Redis); starting anywhere would skip or repeat events",
			outbox.ErrPositionGone, rec.PositionKey, evidence),
			"with the relay stopped, `binlog-outbox repair` lists the committed rows no stream holds, and `binlog-outbox repair --apply` appends them once and stores the position the relay goes on from (docs/incidents.md, a lost position); "+
				"or store a position deliberately with `binlog-outbox position set --start-from <point>`")
		return refusal(NameFirstStart, err, binlogOnly)
	}
	var counts []string
	total := 0
	err = withDB(ctx, cfg.MySQLDSN, func(db *sql.DB) error {
		for _, t := range tables {
			var n int
			if err := db.QueryRowContext(ctx, outboxsql.CountRows(t.Table, maxCounted)).Scan(&n); err != nil {
				return fmt.Errorf("count the rows of %s: %w", t.name(), err)
			}
			if n > 0 {
				counts = append(counts, fmt.Sprintf("%s %s", t.name(), countString(n)))
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return skip(NameFirstStart, "not checked: "+err.Error(), binlogOnly)
	}
	from := cfg.Start.StartFrom
	switch {
	case total == 0:
		return pass(NameFirstStart, "first start: nothing in Redis shows an earlier relay, and the tables hold no row yet", binlogOnly)
	case from != "":
		return warn(NameFirstStart, fmt.Sprintf("first start from --start-from %s: rows the tables already hold before that point are not relayed (%s)", from, strings.Join(counts, ", ")),
			"`binlog-outbox repair` lists the rows no stream holds, and `repair --apply` appends them once", binlogOnly)
	}
	err = outbox.WithHint(fmt.Errorf("%w: first start (nothing in Redis shows an earlier relay), and the tables already hold rows it would skip: %s",
		outbox.ErrConfig, strings.Join(counts, ", ")),
		"say where to begin: `binlog-outbox repair --mode binlog --apply` appends the rows no stream holds once and stores the position to go on from; "+
			"`binlog-outbox position set --start-from now` skips them (they were relayed some other way), `--start-from earliest` reads all the binlog the server has; "+
			"if Redis lost its data, repair is the way (docs/incidents.md)")
	return refusal(NameFirstStart, err, binlogOnly)
}

func countString(n int) string {
	if n > maxCounted {
		return "more than " + strconv.Itoa(maxCounted) + " rows"
	}
	if n == 1 {
		return "1 row"
	}
	return strconv.Itoa(n) + " rows"
}

// earlierRelay says what in Redis shows that the tables were relayed
// before in binlog mode, "" when nothing does; poll says a table was
// relayed in poll mode. The mode key saying binlog shows nothing: the
// relay stores it before its first position.
func earlierRelay(ctx context.Context, cfg Config, c redis.UniversalClient, rec *redisadmin.Record, tables []stateTable, records []redisadmin.Record) (evidence, poll string, err error) {
	for _, r := range records {
		if r.PositionKey == rec.PositionKey {
			return fmt.Sprintf("the relay's record %s says a relay started on it (%s, since %s)", redisadmin.RecordKey(r.PositionKey), r.Holder, r.Since.UTC().Format(time.RFC3339)), "", nil
		}
	}
	for _, t := range tables {
		key := redisstream.KeysFor(t.Database, t.Name, "").Mode
		m, err := redisstream.NewModeStore(c, key).Load(ctx)
		switch {
		case err != nil:
			return "", "", err
		case m == "poll":
			return "", fmt.Sprintf("%s says %s is relayed in poll mode", key, t.name()), nil
		}
	}
	evidence, err = entriesOfTables(ctx, cfg, c, rec, tables)
	return evidence, "", err
}

// Bounds of the search for entries of the tables' rows in Redis.
const (
	sampledStreams = 50
	sampledEntries = 5
)

// entriesOfTables looks for entries of the tables' rows under rec's
// template and among the dead letters: the newest few of some streams,
// whose message ids the tables hold. The relay's keys may be gone
// (evicted, deleted by hand) while the streams stay.
func entriesOfTables(ctx context.Context, cfg Config, c redis.UniversalClient, rec *redisadmin.Record, tables []stateTable) (string, error) {
	t, err := entry.ParseTemplate(rec.Stream, rec.Partitions, true)
	if err != nil {
		return "", nil
	}
	streams, err := redisconn.ScanStreams(ctx, c, t.Glob())
	if err != nil {
		return "", err
	}
	if len(streams) > sampledStreams {
		streams = streams[:sampledStreams]
	}
	streams = append(streams, rec.DeadLetterStream)
	ids := map[string]string{} // message id -> stream
	for _, s := range streams {
		msgs, err := c.XRevRangeN(ctx, s, "+", "-", sampledEntries).Result()
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) {
				continue // not a stream (WRONGTYPE): no entries of ours
			}
			return "", fmt.Errorf("XREVRANGE %s: %w", s, redisconn.Classify(err))
		}
		for _, m := range msgs {
			if id, ok := m.Values[entry.FieldMessageID].(string); ok && id != "" {
				ids[id] = s
			}
		}
	}
	if len(ids) == 0 {
		return "", nil
	}
	args := make([]any, 0, len(ids))
	for id := range ids {
		args = append(args, id)
	}
	found, where := "", ""
	err = withDB(ctx, cfg.MySQLDSN, func(db *sql.DB) error {
		for _, tb := range tables {
			var id string
			err := db.QueryRowContext(ctx, outboxsql.HoldsMessageIDs(tb.Table, len(args)), args...).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("look up the message ids of entries in %s: %w", tb.name(), err)
			}
			found, where = tb.name(), ids[id]+" holds the entry of message_id "+id
			return nil
		}
		return nil
	})
	if err != nil || found == "" {
		return "", err
	}
	return where + ", a row of " + found, nil
}

// otherTypes names, with their types, up to five of keys whose type is none
// of want; skip, when set, leaves keys out unasked. A key that is gone, or
// whose TYPE fails, is left out: the check warns of what it saw.
func otherTypes(ctx context.Context, c redis.UniversalClient, keys []string, skip func(string) bool, want ...string) []string {
	var others []string
	for _, k := range keys {
		if skip != nil && skip(k) {
			continue
		}
		typ, err := c.Type(ctx, k).Result()
		if err != nil || typ == "none" || slices.Contains(want, typ) {
			continue
		}
		if others = append(others, k+" ("+typ+")"); len(others) == 5 {
			break
		}
	}
	return others
}
