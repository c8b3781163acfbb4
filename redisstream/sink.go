// Package redisstream appends outbox events to Redis Streams: the write
// side of the relay. In binlog mode the appends of a batch and the relay's
// position are written in one step that Redis applies whole or not at all,
// so a crash at any moment can neither lose an event nor append one twice.
//
// Its concepts, each in a file or a few:
//   - the append protocol: Sink (sink.go) hands each batch to one strategy
//     (appender): the append script (append_script.go), MULTI/EXEC
//     (append_multi.go), or one script per hash slot on Redis Cluster
//     (append_cluster.go); the consumer groups they create (groups.go);
//     the fields of each entry as it writes them (fields.go; what an event
//     becomes, format and stream, is package entry's);
//   - the relay's keys and hash slots (keys.go), dedupe keys (dedupe.go);
//   - standby coordination: the lease (lease.go, leaseproof.go), the
//     server-id claim (serverid.go) and, on Redis Cluster, the slots'
//     fences (fence.go) and what the position commands do to them
//     (clusterposition.go);
//   - the dead-letter stream (deadletters.go: its check and replay) and
//     keys of another type (wrongtype.go); a backfill's appends
//     (backfill.go);
//   - the scripts' permission checks and uncertain replies (scripterr.go);
//   - trimming the streams (trim.go).
//
// Reading what it wrote, for the operator's commands and metrics, is
// redisadmin's job; connecting to Redis is internal/redisconn's.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// Defaults of Config.
const (
	DefaultDeadLetterStream = "outbox:dead-letter"
)

// Config configures a Sink.
type Config struct {
	// Stream is the stream key template (default entry.DefaultStream).
	Stream string
	// Partitions is the number of partitions {partition} ranges over (default 1).
	Partitions int
	// DeadLetterStream receives rows that cannot be delivered as events, with
	// the reason (default DefaultDeadLetterStream).
	DeadLetterStream string
	// PositionKey is the key holding the relay's position. Required for
	// Append; it names the source (database and table) so that relays of
	// different outbox tables can share a Redis.
	PositionKey string
	// Lease, when set, is checked by Append in the same script as the
	// position: unless this process holds it, nothing is written and Append
	// returns outbox.ErrLeaseLost. A relay that lost its lease while paused
	// can then never append, whatever it had in flight.
	Lease *Lease
	// NoAggregateType and NoHeaders say the table lacks these optional
	// columns: their fields are then left out of every entry.
	NoAggregateType bool
	NoHeaders       bool
	// Dedupe, when its Window is positive, makes Append skip events whose
	// message id was appended (by either mode) within the window, and
	// remember the others. Binlog mode needs it only while it takes over
	// from poll mode or hands over to it: the keys are what the two modes
	// share. It costs one key per event for the window.
	Dedupe Dedupe
	// Groups are consumer groups every stream the template names has from
	// its first entry (--ensure-group; none by default). The append script
	// creates them, at id 0, on a stream it is about to create or that
	// lacks one, before its first XADD there: no entry can exist in such a
	// stream before the group does, whichever mode appends. The
	// dead-letter stream gets none: its readers are operators.
	Groups []string
	// Format is the entry format (default entry.FormatFlat).
	Format entry.Format
	// Cluster says the client is a Redis Cluster client (--redis-cluster).
	// One script cannot span hash slots, so Append groups a batch by the
	// slot of each event's stream and appends each group with a position
	// key of its own in that slot (SlotPositionKey), then stores the
	// position under PositionKey; dedupe keys carry their stream's slot
	// tag. A Lease must be made with LeaseConfig.Cluster: its key lies in
	// one slot, so the scripts check per-slot fences of its take instead
	// (fence.go).
	Cluster bool
	// MultiMin is the smallest batch, in entries, that Append writes with
	// MULTI/EXEC instead of the append script, in binlog mode on a
	// standalone Redis without Dedupe (default DefaultMultiMin; negative:
	// never); a smaller batch whose payloads add up to 64 KiB or more goes
	// through MULTI/EXEC too. Both keep the same guarantees (append_multi.go); MULTI/EXEC lets
	// Redis run plain XADDs, which cost it less CPU per entry than the
	// script's calls (BenchmarkAppend_RedisCPU), for a second round trip per
	// batch.
	MultiMin int
}

func (c *Config) setDefaults() {
	if c.Stream == "" {
		c.Stream = entry.DefaultStream
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.DeadLetterStream == "" {
		c.DeadLetterStream = DefaultDeadLetterStream
	}
	if c.Dedupe.KeyPrefix == "" {
		c.Dedupe.KeyPrefix = DefaultDedupeKeyPrefix
	}
	if c.MultiMin == 0 {
		c.MultiMin = DefaultMultiMin
	}
	if c.Dedupe.Window > 0 && c.Dedupe.Window < time.Millisecond {
		c.Dedupe.Window = time.Millisecond
	}
}

// base is what every append strategy of a Sink reads: the client, the
// configuration and the stream template, set by New and never changed
// after, and the cache of streams known to have their groups. It holds no
// state of a batch: each strategy keeps its own.
type base struct {
	client   redis.UniversalClient
	cfg      Config
	template *entry.Template
	groups   *groupCache
	// deadLetterReachable says some event could render the dead-letter
	// stream's name, so prepare compares each event's stream with it.
	deadLetterReachable bool
	// wrong remembers the keys of another type than their events need
	// (wrongtype.go).
	wrong *wrongTypes
}

// appender is one strategy of the append protocol: the append script
// (append_script.go), MULTI/EXEC (append_multi.go) or one script per hash
// slot on Redis Cluster (append_cluster.go). Each owns the scratch state of
// the batch it builds.
type appender interface {
	// append writes events to their streams and replaces the stored
	// position prev with next, so that Redis keeps both or neither: it
	// returns nil once both are written, *outbox.PositionMismatchError
	// (nothing written) when the stored position is not prev, and an error
	// wrapping outbox.ErrLeaseLost when the sink's lease is not this
	// relay's. Whether a batch whose reply was lost ran, it settles
	// itself from what Redis stores. After any error the caller reads
	// Position again before it appends more, and resumes from there.
	append(ctx context.Context, events []outbox.Event, prev, next []byte) error
}

// Sink appends events to Redis Streams. It is safe for use by one goroutine
// at a time.
type Sink struct {
	*base
	// script appends on a standalone Redis; multi, when not nil, takes the
	// batches Config.MultiMin sends to MULTI/EXEC; cluster, when not nil
	// (Config.Cluster), takes every batch.
	script  *scriptAppend
	multi   *multiAppend
	cluster *clusterAppend
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink. The client must not retry commands on its own (go-redis
// MaxRetries -1, as NewClient sets): a retried script whose first reply was
// lost would append the batch twice; Append resolves that uncertainty itself.
func New(client redis.UniversalClient, cfg Config) (*Sink, error) {
	t, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	b := &base{client: client, cfg: cfg, template: t, groups: newGroupCache(), deadLetterReachable: t.MayRender(cfg.DeadLetterStream), wrong: newWrongTypes()}
	s := &Sink{base: b, script: &scriptAppend{base: b}}
	switch {
	case cfg.Cluster:
		s.cluster = &clusterAppend{base: b, script: &scriptAppend{base: b}}
	case cfg.Dedupe.Window <= 0 && cfg.MultiMin > 0:
		// MULTI/EXEC has no dedupe check; one script cannot span slots,
		// nor can one transaction.
		s.multi = &multiAppend{base: b}
	}
	return s, nil
}

// Validate returns the error New would refuse cfg with: `check` reports it
// before `run` gets there.
func (cfg Config) Validate() error {
	_, err := cfg.validate()
	return err
}

// validate sets cfg's defaults, checks it and parses its stream template.
func (cfg *Config) validate() (*entry.Template, error) {
	cfg.setDefaults()
	if cfg.Dedupe.Window < 0 {
		return nil, fmt.Errorf("%w: redisstream: negative dedupe window %s", outbox.ErrConfig, cfg.Dedupe.Window)
	}
	// A name given twice would make the script create it twice, and fail
	// half-way with BUSYGROUP.
	groups := make([]string, 0, len(cfg.Groups))
	seen := map[string]bool{}
	for _, g := range cfg.Groups {
		if g == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: --ensure-group is empty", outbox.ErrConfig), "give the consumer group's name, e.g. --ensure-group billing")
		}
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	cfg.Groups = groups
	if err := cfg.Format.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cluster {
		if err := cfg.validateCluster(); err != nil {
			return nil, err
		}
	}
	t, err := entry.ParseTemplate(cfg.Stream, cfg.Partitions, !cfg.NoAggregateType)
	if err != nil {
		return nil, err
	}
	if err := checkDeadLetterStream(t, cfg.DeadLetterStream); err != nil {
		return nil, err
	}
	if err := checkOwnKeys(t, cfg.PositionKey); err != nil {
		return nil, err
	}
	return t, nil
}

// checkOwnKeys refuses a template that can name one of the relay's own
// keys: anything under KeyPrefix, the position key (--position-key may lie
// elsewhere) and the keys named after it (lease, record, slot positions).
// An event with such a stream would stall the relay for good, or, were
// its type a string, overwrite its position; every command that builds a
// sink refuses it alike.
func checkOwnKeys(t *entry.Template, positionKey string) error {
	own := ""
	switch {
	case t.MayRenderPrefix(KeyPrefix):
		own = "a key under " + KeyPrefix
	case positionKey != "" && (t.MayRender(positionKey) || t.MayRenderPrefix(positionKey+":")):
		own = "the position key " + positionKey + " or a key named after it"
	default:
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: --stream %q can name %s, which the relay keeps for itself", outbox.ErrConfig, t, own),
		"start the template with a literal prefix of its own, e.g. --stream 'events:{aggregate_type}': a placeholder stands for any text a row holds")
}

// Append implements outbox.Sink: the batch goes to the strategy that takes
// it, which appends it with the position in one step.
func (s *Sink) Append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	if s.cfg.PositionKey == "" {
		return fmt.Errorf("%w: redisstream: no position key configured", outbox.ErrConfig)
	}
	return s.strategy(events).append(ctx, events, prev, next)
}

// strategy returns the strategy that appends events.
func (s *Sink) strategy(events []outbox.Event) appender {
	switch {
	case s.cluster != nil:
		return s.cluster
	case s.multi != nil && s.multi.takes(events):
		return s.multi
	}
	return s.script
}

// Publish appends events to their streams (dead letters to the dead-letter
// stream) in one script, without touching the stored position: poll mode
// keeps its progress in the database. With a dedupe window (Config.Dedupe)
// it skips the events whose message id was appended within the window. It
// returns how many events it appended. After an error the events may or may not have been appended
// (the reply can be lost); the caller publishes them again, and only the
// deduplication keeps that from appending them twice.
//
// Entries have exactly the fields Append writes, so a consumer cannot tell
// which mode produced them.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if s.cluster != nil {
		return s.cluster.publish(ctx, events)
	}
	return s.script.publish(ctx, events)
}

// Prepare implements outbox.Sink: it applies Config.Format.
func (s *Sink) Prepare(e *outbox.Event) { s.prepare(e) }

// heldLease returns the lease as this relay holds it, "" without one, for an
// append of n events: a relay that may have lost it appends nothing.
func (s *base) heldLease(n int) (string, error) {
	if s.cfg.Lease == nil {
		return "", nil
	}
	lease := s.cfg.Lease.Value()
	if lease == "" {
		return "", fmt.Errorf("append %d events: %w", n, outbox.ErrLeaseLost)
	}
	return lease, nil
}

// resolve settles an append of n events to a standalone Redis whose reply
// err was lost: the script or transaction may or may not have run. The
// stored position tells, because both write it last and atomically with the
// entries. It returns nil when the append ran.
func (s *base) resolve(ctx context.Context, n int, err error, prev, next []byte, lease string) error {
	stored, perr := s.storedPosition(ctx)
	if perr != nil {
		return fmt.Errorf("append %d events: %w (and reading the position back failed: %v)", n, redisconn.Classify(err), perr)
	}
	if string(stored) == string(next) {
		return nil
	}
	if string(stored) == string(prev) {
		return fmt.Errorf("append %d events: %w", n, redisconn.Classify(err))
	}
	if lerr := s.leaseLost(ctx, lease); lerr != nil {
		// Another relay moved the position while holding the lease: the
		// append was refused, not fenced.
		return lerr
	}
	return &outbox.PositionMismatchError{Stored: stored}
}

// batchKeys are the keys of the batch a standalone strategy builds: the
// position key (and the lease's) first, then each stream once; the script
// adds the dedupe keys after them.
type batchKeys struct {
	keys   []string
	keyIdx map[string]int
	keyBuf []byte
	// streamOf is each event's stream as a 1-based index into keys.
	streamOf []int
	// named is how many of keys are the position, the lease and the
	// streams.
	named int
	// batchNew lists the streams whose groups the batch in flight checks.
	batchNew []string
	// sets holds the indexes into keys of the delayed sets
	// (entry.DelayedSetSuffix) among the streams: they get a ZADD, not an XADD.
	sets map[int]bool
	// lists holds the indexes of Laravel queues' lists (entry.FormatLaravelQueue):
	// they get an RPUSH and a notification.
	lists map[int]bool
}

// streams prepares each event (one the format cannot carry becomes a dead
// letter, before its stream is chosen) and adds its stream to keys, after
// those keys holds already. It returns the index of the first stream.
func (k *batchKeys) streams(s *base, events []outbox.Event) int {
	if k.keyIdx == nil {
		k.keyIdx = map[string]int{}
		k.sets = map[int]bool{}
		k.lists = map[int]bool{}
	}
	clear(k.keyIdx)
	clear(k.sets)
	clear(k.lists)
	first := len(k.keys)
	k.streamOf = k.streamOf[:0]
	for i := range events {
		s.prepare(&events[i])
		k.keyBuf = s.appendStreamKey(k.keyBuf[:0], &events[i])
		idx, ok := k.keyIdx[string(k.keyBuf)]
		if !ok {
			key := string(k.keyBuf)
			k.keys = append(k.keys, key)
			idx = len(k.keys)
			k.keyIdx[key] = idx
		}
		k.streamOf = append(k.streamOf, idx)
		if _, ok := s.cfg.Format.Delayed(&events[i]); ok {
			k.sets[idx] = true
		} else if s.cfg.Format.ToList(&events[i]) {
			k.lists[idx] = true
		}
	}
	k.named = len(k.keys)
	k.batchNew = k.batchNew[:0]
	return first
}

// checkGroups reports whether the batch must make sure key has every group,
// and lists it in batchNew if so.
func (k *batchKeys) checkGroups(s *base, key string) bool {
	if len(s.cfg.Groups) == 0 || key == s.cfg.DeadLetterStream || s.groups.has(key) {
		return false
	}
	k.batchNew = append(k.batchNew, key)
	return true
}

// Position implements outbox.Sink. On Redis Cluster it is the position
// to read again from, which some slots may be past (CutPoints).
func (s *Sink) Position(ctx context.Context) ([]byte, error) {
	if s.cluster != nil {
		return s.cluster.position(ctx)
	}
	return s.storedPosition(ctx)
}

// CutPoints returns the points past the one Position returned last up to
// which hash slots hold the appends already (Redis Cluster; none
// otherwise), in no order. The reader must end a batch exactly at each of
// them: a slot can only skip whole batches.
func (s *Sink) CutPoints() []position.Point {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.cutPoints()
}

// storedPosition reads the position key.
func (s *base) storedPosition(ctx context.Context) ([]byte, error) {
	v, err := s.client.Get(ctx, s.cfg.PositionKey).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read position %s: %w", s.cfg.PositionKey, redisconn.Classify(err))
	}
	return v, nil
}

// SetPosition stores a position unconditionally (binlog-outbox position set).
// A relay running at the same time is fenced: its next append fails.
func (s *Sink) SetPosition(ctx context.Context, pos []byte) error {
	if err := s.client.Set(ctx, s.cfg.PositionKey, pos, 0).Err(); err != nil {
		return fmt.Errorf("write position %s: %w", s.cfg.PositionKey, redisconn.Classify(err))
	}
	return nil
}

// DeletePosition removes the stored position (binlog-outbox position reset).
func (s *Sink) DeletePosition(ctx context.Context) error {
	if err := s.client.Del(ctx, s.cfg.PositionKey).Err(); err != nil {
		return fmt.Errorf("delete position %s: %w", s.cfg.PositionKey, redisconn.Classify(err))
	}
	return nil
}

// PositionKey returns the key the position is stored under.
func (s *Sink) PositionKey() string { return s.cfg.PositionKey }
