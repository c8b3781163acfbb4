// Package redisstream appends outbox events to Redis Streams. In binlog mode
// the appends of a batch and the relay's position are written by one Lua
// script or one MULTI/EXEC transaction (multi.go), so Redis applies both or
// neither: a crash at any moment can neither lose an event nor append one
// twice.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Entry field names. Consumers depend on them: keep them.
const (
	FieldMessageID     = "message_id"
	FieldAggregateType = "aggregate_type"
	FieldAggregateID   = "aggregate_id"
	FieldEventType     = "event_type"
	FieldPayload       = "payload"
	FieldOccurredAt    = "occurred_at"
	FieldOutboxID      = "outbox_id"
	FieldHeaders       = "headers"
	// FieldReason is set on dead-letter entries only.
	FieldReason = "reason"
)

// BuiltinFields returns the names of the fields every entry may have besides
// those of the columns it carries as fields of their own (schema_version,
// --extra-column), which must not take them.
func BuiltinFields() []string {
	return []string{FieldMessageID, FieldAggregateType, FieldAggregateID, FieldEventType, FieldPayload,
		FieldOccurredAt, FieldOutboxID, FieldHeaders, FieldReason, FieldTargetStream}
}

// OccurredAtLayout formats occurred_at: RFC 3339 in UTC with microseconds,
// which PHP's DateTimeImmutable and Go's time.Parse(time.RFC3339Nano) read.
const OccurredAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// Defaults of Config.
const (
	DefaultDeadLetterStream = "outbox:dead-letter"
)

// Config configures a Sink.
type Config struct {
	// Stream is the stream key template (default DefaultStream).
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
	// Format is the entry format (default FormatFlat; format.go).
	Format Format
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
	// through MULTI/EXEC too. Both keep the same guarantees (multi.go); MULTI/EXEC lets
	// Redis run plain XADDs, which cost it less CPU per entry than the
	// script's calls (BenchmarkAppend_RedisCPU), for a second round trip per
	// batch.
	MultiMin int
}

func (c *Config) setDefaults() {
	if c.Stream == "" {
		c.Stream = DefaultStream
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

// Sink appends events to Redis Streams. It is safe for use by one goroutine
// at a time.
type Sink struct {
	client   redis.UniversalClient
	cfg      Config
	template *Template

	// args is reused between batches: a catch-up appends millions of entries
	// and the argument slices would otherwise be most of the garbage.
	args    []any
	keys    []string
	keyIdx  map[string]int
	scratch [20]byte
	// ensured holds the streams the script made sure have every group, so
	// that later batches skip the check (XINFO GROUPS) for them. Streams
	// enter it only after a script that ran for certain.
	ensured map[string]bool
	// batchNew lists the streams the script of the batch in flight
	// checks the groups of.
	batchNew []string
	// named is how many of keys are the position and the streams; the
	// dedupe keys follow.
	named int
	// slots are the per-slot positions (Config.Cluster only).
	slots slotState
	// streamOf is each event's stream index, pairs one event's fields and
	// runNames the field names of the run being built (see build).
	streamOf []int
	pairs    []any
	runNames []string
	keyBuf   []byte
	// margs holds the arguments of the XADDs of the MULTI path, xadds
	// where each one's are, boxed the keys as margs holds them.
	margs []any
	xadds []span
	boxed []any
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink. The client must not retry commands on its own (go-redis
// MaxRetries -1, as NewClient sets): a retried script whose first reply was
// lost would append the batch twice; Append resolves that uncertainty itself.
func New(client redis.UniversalClient, cfg Config) (*Sink, error) {
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
	t, err := ParseTemplate(cfg.Stream, cfg.Partitions, !cfg.NoAggregateType)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg, template: t, keyIdx: map[string]int{}, ensured: map[string]bool{}}, nil
}

// appendScript appends every entry and, in binlog mode, checks and replaces
// the stored position in the same step. Every check that can fail runs before
// the first write: Redis does not roll a script back, so a failure half-way
// would leave some entries appended without the position that covers them.
// (Redis checks maxmemory before a script's first write only, so OOM cannot
// strike half-way either.) Poll mode runs it without the position: the
// database transaction that marks the rows is its position.
//
// On Redis 7.0 and later it first makes sure the user's ACL allows every
// command it is going to run on each key (see aclCheckLua).
//
// Consumer groups (Config.Groups) are created before the first XADD, on the
// streams flagged for it: a new stream is created with them (MKSTREAM), an
// existing one gets those it lacks, from id 0.
//
// ARGV[1] the number of KEYS before the streams: "0" without the position,
// "1" with it, "2" with it and the lease; ARGV[2] expected position (""
// = none), ARGV[3] new position, ARGV[4] dedupe window in milliseconds,
// ARGV[5] number of streams S, ARGV[6] number of groups G, ARGV[7] the lease
// as this relay holds it (with the lease only), then the G group names,
// then S flags ("1": make sure the stream has every group), then the
// entries in runs: consecutive entries of one stream with the same field
// names share a header (stream index into KEYS, the first entry's dedupe key
// index into KEYS (0: none; the run's others follow it), number of fields F,
// number of entries M), the F field names, then each entry's F values. Each
// entry's own header and names were most of what Redis converted per entry
// besides the XADD. KEYS: the position key (with the position only), the
// lease key (with the lease only), the streams, then the dedupe keys, one
// per entry in order. It returns {1, "", appended}; without writing
// anything, {2, lease} when the lease is not the relay's, or {0, stored}
// when the stored position is not the expected one. Every command it will
// run is checked against the user's ACL before the first write.
var appendScript = redis.NewScript(aclCheckLua + `
local base = tonumber(ARGV[1])
local ns = tonumber(ARGV[5])
local ng = tonumber(ARGV[6])
local flags = 7 + ng
local denied
if base >= 1 then
  denied = deny('GET', '', KEYS[1]) or deny('SET', '', KEYS[1], ARGV[3])
  if denied then return denied end
end
if base == 2 then
  denied = deny('GET', '', KEYS[2])
  if denied then return denied end
end
for s = 1, ns do
  local key = KEYS[base + s]
  denied = deny('TYPE', '', key) or deny('XADD', '', key, '*', 'f', 'v')
  if not denied and ARGV[flags + s] == '1' then
    denied = deny('XINFO', 'GROUPS', key) or deny('XGROUP', 'CREATE', key, 'g', '0', 'MKSTREAM')
  end
  if denied then return denied end
end
for d = base + ns + 1, #KEYS do
  denied = deny('SET', '', KEYS[d], '1', 'NX', 'PX', '1')
  if denied then return denied end
end
if base == 2 then
  local lease = redis.call('GET', KEYS[2])
  if lease ~= ARGV[7] then
    if lease == false then lease = '' end
    return {2, lease}
  end
end
if base >= 1 then
  local cur = redis.call('GET', KEYS[1])
  if cur == false then cur = '' end
  if cur ~= ARGV[2] then
    return {0, cur}
  end
end
local types = {}
for s = 1, ns do
  local t = redis.call('TYPE', KEYS[base + s])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[base + s] .. ' holds a ' .. t .. ', not a stream')
  end
  types[s] = t
end
for s = 1, ns do
  if ARGV[flags + s] == '1' then
    local key = KEYS[base + s]
    local have = {}
    if types[s] == 'stream' then
      for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
        for j = 1, #g, 2 do
          if g[j] == 'name' then have[g[j + 1]] = true end
        end
      end
    end
    for j = 8, 7 + ng do
      if not have[ARGV[j]] then
        redis.call('XGROUP', 'CREATE', key, ARGV[j], '0', 'MKSTREAM')
        have[ARGV[j]] = true
      end
    end
  end
end
local added = 0
local i = flags + ns + 1
local n = #ARGV
local fv = {}
while i <= n do
  local key = KEYS[tonumber(ARGV[i])]
  local d = tonumber(ARGV[i + 1])
  local f = tonumber(ARGV[i + 2])
  local m = tonumber(ARGV[i + 3])
  i = i + 4
  for j = 1, f do
    fv[2 * j - 1] = ARGV[i + j - 1]
  end
  i = i + f
  for e = 0, m - 1 do
    if d == 0 or redis.call('SET', KEYS[d + e], '1', 'NX', 'PX', ARGV[4]) then
      for j = 1, f do
        fv[2 * j] = ARGV[i + j - 1]
      end
      redis.call('XADD', key, '*', unpack(fv, 1, 2 * f))
      added = added + 1
    end
    i = i + f
  end
end
if base >= 1 then
  redis.call('SET', KEYS[1], ARGV[3])
end
return {1, '', added}
`)

// Append implements outbox.Sink.
func (s *Sink) Append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	if s.cfg.PositionKey == "" {
		return fmt.Errorf("%w: redisstream: no position key configured", outbox.ErrConfig)
	}
	if s.cfg.Cluster {
		return s.appendSlots(ctx, events, prev, next)
	}
	lease := ""
	if s.cfg.Lease != nil {
		if lease = s.cfg.Lease.Value(); lease == "" {
			return fmt.Errorf("append %d events: %w", len(events), outbox.ErrLeaseLost)
		}
	}
	if s.useMulti(events) {
		return s.appendMulti(ctx, events, prev, next, lease)
	}
	s.build(events, s.cfg.PositionKey, prev, next, lease)
	res, err := appendScript.Run(ctx, s.client, s.keys, s.args...).Slice()
	if err != nil {
		if !uncertain(err) {
			return fmt.Errorf("append %d events: %w", len(events), s.scriptError(err))
		}
		return s.resolve(ctx, len(events), err, prev, next, lease)
	}
	if len(res) >= 2 {
		code, _ := res[0].(int64)
		cur, _ := res[1].(string)
		switch code {
		case 1:
			s.ran()
			return nil
		case 2:
			s.cfg.Lease.lost(lease)
			return fmt.Errorf("append %d events: %w: it is held by %s", len(events), outbox.ErrLeaseLost, holderOrNobody(cur))
		}
		var stored []byte
		if cur != "" {
			stored = []byte(cur)
		}
		return &outbox.PositionMismatchError{Stored: stored}
	}
	return fmt.Errorf("append: unexpected script reply %v", res)
}

// resolve settles an append of n events whose reply err was lost: the
// script or transaction may or may not have run. The stored position tells,
// because both write it last and atomically with the entries.
func (s *Sink) resolve(ctx context.Context, n int, err error, prev, next []byte, lease string) error {
	stored, perr := s.Position(ctx)
	if perr != nil {
		return fmt.Errorf("append %d events: %w (and reading the position back failed: %v)", n, classify(err), perr)
	}
	if string(stored) == string(next) {
		s.ran()
		return nil
	}
	if string(stored) == string(prev) {
		return fmt.Errorf("append %d events: %w", n, classify(err))
	}
	if lerr := s.leaseLost(ctx, lease); lerr != nil {
		// Another relay moved the position while holding the lease: the
		// append was refused, not fenced.
		return lerr
	}
	return &outbox.PositionMismatchError{Stored: stored}
}

// build fills s.keys and s.args for appendScript; a position key adds the
// position check and write of binlog mode, a lease (as this relay holds it)
// the lease check.
func (s *Sink) build(events []outbox.Event, positionKey string, prev, next []byte, lease string) {
	clear(s.keyIdx)
	s.keys = s.keys[:0]
	s.batchNew = s.batchNew[:0]
	check := "0"
	if positionKey != "" {
		s.keys = append(s.keys, positionKey)
		check = "1"
		if lease != "" {
			s.keys = append(s.keys, s.cfg.Lease.Key())
			check = "2"
		}
	}
	window := s.cfg.Dedupe.Window.Milliseconds()
	// Streams first in KEYS: the script checks their types before writing,
	// and each event's stream index is known before the dedupe keys come.
	// An event the reader did not prepare is prepared here, before its
	// stream is chosen: one the format cannot carry is a dead letter.
	first := len(s.keys)
	s.streamOf = s.streamOf[:0]
	for i := range events {
		s.Prepare(&events[i])
		s.streamOf = append(s.streamOf, s.streamIndex(&events[i]))
	}
	s.named = len(s.keys)
	s.args = append(s.args[:0], check, string(prev), string(next), window, len(s.keys)-first, len(s.cfg.Groups), lease)
	for _, g := range s.cfg.Groups {
		s.args = append(s.args, g)
	}
	for _, key := range s.keys[first:] {
		flag := "0"
		if len(s.cfg.Groups) > 0 && key != s.cfg.DeadLetterStream && !s.ensured[key] {
			flag = "1"
			s.batchNew = append(s.batchNew, key)
		}
		s.args = append(s.args, flag)
	}
	run, runLen := -1, 0 // where the open run's header is in args, its entries
	for i := range events {
		e := &events[i]
		dedupe := 0
		stream := s.streamOf[i]
		if window > 0 {
			key := s.cfg.Dedupe.key(e)
			if s.cfg.Cluster {
				key = s.cfg.Dedupe.slottedKey(e, SlotTag(Slot(s.keys[stream-1])))
			}
			s.keys = append(s.keys, key)
			dedupe = len(s.keys)
		}
		s.pairs = s.appendFields(s.pairs[:0], e)
		if run < 0 || s.streamOf[i] != s.streamOf[i-1] || !sameNames(s.pairs, s.runNames) {
			if run >= 0 {
				s.args[run+3] = runLen
			}
			run, runLen = len(s.args), 0
			s.args = append(s.args, s.streamOf[i], dedupe, len(s.pairs)/2, 0)
			s.runNames = s.runNames[:0]
			for j := 0; j < len(s.pairs); j += 2 {
				s.args = append(s.args, s.pairs[j])
				s.runNames = append(s.runNames, s.pairs[j].(string))
			}
		}
		for j := 1; j < len(s.pairs); j += 2 {
			s.args = append(s.args, s.pairs[j])
		}
		runLen++
	}
	if run >= 0 {
		s.args[run+3] = runLen
	}
	clear(s.pairs) // the events' values, held until the next batch otherwise
}

// sameNames reports whether the field names of pairs (name, value, ...) are
// names.
func sameNames(pairs []any, names []string) bool {
	if len(pairs) != 2*len(names) {
		return false
	}
	for j, n := range names {
		if pairs[2*j] != n {
			return false
		}
	}
	return true
}

// scriptError classifies an error reply to the append script. Redis checks
// the script's keys against the user's ACL before it runs it and names none
// when it refuses one, so a refusal lists the keys of the batch.
func (s *Sink) scriptError(err error) error {
	err = classify(err)
	if !errors.Is(err, ErrPermission) {
		return err
	}
	keys := strings.Join(s.keys[:s.named], ", ")
	if n := len(s.keys) - s.named; n > 0 {
		prefix := s.cfg.Dedupe.KeyPrefix
		if s.cfg.Dedupe.BySource {
			prefix = DefaultDedupeKeyPrefix
		}
		keys += fmt.Sprintf(" and %d dedupe keys %s*", n, prefix)
	}
	return fmt.Errorf("%w (the script's keys: %s)", err, keys)
}

// maxEnsured bounds Sink.ensured: a template naming a stream per aggregate
// makes millions of streams, and forgetting one only costs a check.
const maxEnsured = 100_000

// ran records that the script of the last build ran: its streams have every
// group now.
func (s *Sink) ran() {
	if len(s.batchNew) == 0 {
		return
	}
	if len(s.ensured)+len(s.batchNew) > maxEnsured {
		clear(s.ensured)
	}
	for _, key := range s.batchNew {
		s.ensured[key] = true
	}
}

// streamKey returns the stream e goes to: its template's, or the
// dead-letter stream.
func (s *Sink) streamKey(e *outbox.Event) string {
	if e.Invalid != "" {
		return s.cfg.DeadLetterStream
	}
	return s.template.Render(e)
}

// streamIndex returns the 1-based KEYS index of e's stream, adding it.
func (s *Sink) streamIndex(e *outbox.Event) int {
	s.keyBuf = s.keyBuf[:0]
	if e.Invalid == "" {
		s.keyBuf = s.template.AppendTo(s.keyBuf, e)
	} else {
		s.keyBuf = append(s.keyBuf, s.cfg.DeadLetterStream...)
	}
	if idx, ok := s.keyIdx[string(s.keyBuf)]; ok {
		return idx
	}
	key := string(s.keyBuf)
	s.keys = append(s.keys, key)
	s.keyIdx[key] = len(s.keys)
	return len(s.keys)
}

// Prepare implements outbox.Sink: it applies Config.Format.
func (s *Sink) Prepare(e *outbox.Event) { s.cfg.Format.prepare(e, !s.cfg.NoAggregateType) }

// appendFields appends an entry's field/value pairs in a fixed order. In
// FormatMessenger the payload travels in the message field only; dead
// letters are flat in every format. The strings and the id are passed by
// pointer into e, which outlives the append: boxed by value, each would be
// an allocation per entry.
func (s *Sink) appendFields(args []any, e *outbox.Event) []any {
	messenger := e.Envelope != nil && e.Invalid == ""
	args = append(args, FieldMessageID, &e.MessageID)
	if !s.cfg.NoAggregateType {
		args = append(args, FieldAggregateType, &e.AggregateType)
	}
	args = append(args, FieldAggregateID, &e.AggregateID, FieldEventType, &e.EventType)
	if messenger {
		args = append(args, FieldMessage, e.Envelope)
	} else {
		args = append(args, FieldPayload, e.Payload)
	}
	args = append(args,
		FieldOccurredAt, e.OccurredAt.UTC().Format(OccurredAtLayout),
		FieldOutboxID, &e.OutboxID,
	)
	if !s.cfg.NoHeaders {
		args = append(args, FieldHeaders, e.Headers)
	}
	for i := range e.Fields {
		f := &e.Fields[i]
		args = append(args, f.Name, &f.Value)
	}
	if e.Invalid != "" {
		// The stream it was meant for, which dead-letters replay appends to.
		args = append(args, FieldTargetStream, s.template.Render(e), FieldReason, &e.Invalid)
	}
	return args
}

// Position implements outbox.Sink. On Redis Cluster it is the position
// to read again from, which some slots may be past (Ahead).
func (s *Sink) Position(ctx context.Context) ([]byte, error) {
	if s.cfg.Cluster {
		return s.clusterPosition(ctx)
	}
	return s.storedPosition(ctx)
}

// storedPosition reads the position key.
func (s *Sink) storedPosition(ctx context.Context) ([]byte, error) {
	v, err := s.client.Get(ctx, s.cfg.PositionKey).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read position %s: %w", s.cfg.PositionKey, classify(err))
	}
	return v, nil
}

// SetPosition stores a position unconditionally (binlog-outbox position set).
// A relay running at the same time is fenced: its next append fails.
func (s *Sink) SetPosition(ctx context.Context, pos []byte) error {
	if err := s.client.Set(ctx, s.cfg.PositionKey, pos, 0).Err(); err != nil {
		return fmt.Errorf("write position %s: %w", s.cfg.PositionKey, classify(err))
	}
	return nil
}

// DeletePosition removes the stored position (binlog-outbox position reset).
func (s *Sink) DeletePosition(ctx context.Context) error {
	if err := s.client.Del(ctx, s.cfg.PositionKey).Err(); err != nil {
		return fmt.Errorf("delete position %s: %w", s.cfg.PositionKey, classify(err))
	}
	return nil
}

// PositionKey returns the key the position is stored under.
func (s *Sink) PositionKey() string { return s.cfg.PositionKey }

// uncertain reports whether err leaves open whether Redis ran the command: the
// request may have been written before the connection broke.
func uncertain(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false // Redis answered with an error: it did not run the script
	}
	return !errors.Is(err, redis.ErrClosed)
}

// Classify adds an operator hint to the Redis errors an operator must act
// on (a full Redis, a replica, refused credentials or permissions, ...), for
// the commands that send their own Redis commands besides the sink's.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	return classify(err)
}

// classify adds an operator hint to the Redis errors an operator must act on.
// Redis error replies start with an upper-case code (OOM, READONLY, NOAUTH,
// WRONGPASS, ...); that code is part of the protocol.
func classify(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return outbox.WithHint(err, "Redis is unreachable; the relay retries and appends nothing until it is back")
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	switch code {
	case "OOM":
		return outbox.WithHint(err, "Redis reached maxmemory; raise maxmemory or trim the streams consumers are done with (XTRIM); the relay retries and loses nothing")
	case "READONLY":
		return outbox.WithHint(err, "Redis answered as a read-only replica: --redis-url points at one (point it at the primary), or a Sentinel failover demoted the master (the relay reconnects to the new one)")
	case "NOAUTH", "WRONGPASS":
		return outbox.WithHint(err, "Redis refused the credentials; check the user in --redis-url and the password (in the URL or --redis-password-file)")
	case "NOPERM":
		return denied(err, aclHint)
	case "WRONGTYPE":
		return outbox.WithHint(err, "a key the relay appends to is not a stream; rename or delete it, or change --stream")
	case "MISCONF":
		return outbox.WithHint(err, "Redis cannot persist (MISCONF); fix its disk or persistence settings")
	}
	return err
}

// DefaultTimeout is the read and write timeout of the relay's Redis client.
// A batch script on a slow disk with appendfsync always can take a while; a
// short read timeout would turn a slow success into an uncertain error.
const DefaultTimeout = 30 * time.Second

// defaultDialTimeout applies when the URL sets no dial_timeout.
const defaultDialTimeout = 5 * time.Second

// NewClient opens a client for a --redis-url (ParseTarget: one server or a
// master found through Sentinel) with the settings the relay needs
// (ClientOptions with DefaultTimeout): no automatic retries (see New) and
// bounded timeouts, 5s to connect and 30s per command unless the URL says
// otherwise (?dial_timeout=1s&read_timeout=2s&write_timeout=2s).
func NewClient(url string) (*redis.Client, error) {
	t, err := ParseTarget(url, "")
	if errors.Is(err, outbox.ErrConfig) {
		return nil, err
	}
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("%w: parse --redis-url: %v", outbox.ErrConfig, redactErr(err, url)),
			"use redis://[user:password@]host:port/db, or rediss:// for TLS")
	}
	return t.NewClient(DefaultTimeout), nil
}

// DefaultClusterReload is how often a cluster client reads the slot map
// again while it is used. go-redis reloads it on MOVED replies only (and
// every minute by default): after a master died, the client would dial the
// dead address for up to a minute, as no reply redirects it. Reading it
// each second costs one CLUSTER SLOTS and lets the relay follow a failover
// within a second of the cluster's.
const DefaultClusterReload = time.Second

// NewClusterClientFromOptions opens a Redis Cluster client (--redis-cluster)
// with the settings of ClientOptions. It follows MOVED and ASK redirects,
// as a failover needs, and retries a command whose reply it lost: the
// append scripts compare-and-set a position, so a second run of one that
// ran is refused and recognised (Sink.Append).
func NewClusterClientFromOptions(o *redis.ClusterOptions) *redis.ClusterClient {
	c := *o
	c.MaxRetries = -1
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultTimeout
	}
	c.ContextTimeoutEnabled = true
	if c.ClusterStateReloadInterval == 0 {
		c.ClusterStateReloadInterval = DefaultClusterReload
	}
	return redis.NewClusterClient(&c)
}

// ClientOptions sets on o (parsed from a URL or built by hand) what every
// Redis client of binlog-outbox uses, and returns it: no automatic retries
// (see New: a retried script whose reply was lost appends twice, and a
// check should report the one failure it saw), a dial timeout of 5s unless o
// has one, read and write timeouts of timeout, and context deadlines honoured
// on the socket as well. A caller that must answer fast (a preflight check)
// passes a shorter timeout than DefaultTimeout.
func ClientOptions(o *redis.Options, timeout time.Duration) *redis.Options {
	o.MaxRetries = -1
	if o.DialTimeout == 0 {
		o.DialTimeout = defaultDialTimeout
	}
	// A batch script on a slow disk with appendfsync always can take a while;
	// a short read timeout would turn a slow success into an uncertain error.
	// An operator who wants a silently dead Redis noticed sooner (or the
	// fault suite, which stalls the link) sets it in the URL.
	if o.ReadTimeout == 0 {
		o.ReadTimeout = timeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = timeout
	}
	o.ContextTimeoutEnabled = true
	return o
}

// redactErr keeps a URL's password out of an error message.
func redactErr(err error, url string) string {
	msg := err.Error()
	if at := strings.LastIndexByte(url, '@'); at > 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme+3 < at {
			userinfo := url[scheme+3 : at]
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}
