package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// scriptAppend is the strategy that appends a batch with appendScript: one
// round trip, every check and write in one script. It also serves Publish
// (poll mode), and the cluster strategy runs one per hash slot.
type scriptAppend struct {
	*base
	batchKeys
	// args is reused between batches: a catch-up appends millions of entries
	// and the argument slices would otherwise be most of the garbage.
	args []any
	// pairs holds one event's fields and runNames the field names of the
	// run being built (see build).
	pairs    []any
	runNames []string
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
// ARGV[1] what comes before the streams in KEYS: "0" nothing, "1" the
// position, "2" the position and the lease, "3" the position and a hash
// slot's fence (fence.go: ARGV[7] is then the fence this relay holds, and a
// fence of a lower epoch, or none, is raised to it); ARGV[2] expected position (""
// = none), ARGV[3] new position, ARGV[4] dedupe window in milliseconds,
// ARGV[5] number of streams S, ARGV[6] number of groups G, ARGV[7] the lease
// as this relay holds it (with the lease only), then the G group names,
// then S flags ("1": make sure the stream has every group; "z": the key
// is a delayed set, whose runs hold a score and a member per entry, added
// with ZADD NX, see entry.Format.Delayed; "l": the key is a Laravel queue's
// list, whose runs hold a member per entry, RPUSHed with a 1 on
// <key>:notify as Laravel's push script does, see entry.Format.ToList), then the
// entries in runs: consecutive entries of one stream with the same field
// names share a header (stream index into KEYS, the first entry's dedupe key
// index into KEYS (0: none; the run's others follow it), number of fields F,
// number of entries M), the F field names, then each entry's F values. Each
// entry's own header and names were most of what Redis converted per entry
// besides the XADD. KEYS: the position key (with the position only), the
// lease key (with the lease only), the streams, then the dedupe keys, one
// per entry in order. It returns {1, "", appended}; without writing
// anything, {2, lease} when the lease (or fence) is not the relay's, or {0, stored}
// when the stored position is not the expected one. Every command it will
// run is checked against the user's ACL before the first write.
var appendScript = redis.NewScript(aclCheckLua + `
local mode = tonumber(ARGV[1])
local base = mode
if mode == 3 then base = 2 end
local ns = tonumber(ARGV[5])
local ng = tonumber(ARGV[6])
local flags = 7 + ng
local denied
if base >= 1 then
  denied = deny('GET', '', KEYS[1]) or deny('SET', '', KEYS[1], ARGV[3])
  if denied then return denied end
end
if base >= 2 then
  denied = deny('GET', '', KEYS[2]) or (mode == 3 and deny('SET', '', KEYS[2], ARGV[7]))
  if denied then return denied end
end
for s = 1, ns do
  local key = KEYS[base + s]
  if ARGV[flags + s] == 'z' then
    denied = deny('TYPE', '', key) or deny('ZADD', '', key, 'NX', '0', 'm')
  elseif ARGV[flags + s] == 'l' then
    denied = deny('TYPE', '', key) or deny('RPUSH', '', key, 'm') or
      deny('TYPE', '', key .. ':notify') or deny('RPUSH', '', key .. ':notify', '1')
  else
    denied = deny('TYPE', '', key) or deny('XADD', '', key, '*', 'f', 'v')
  end
  if not denied and ARGV[flags + s] == '1' then
    denied = deny('XINFO', 'GROUPS', key) or deny('XGROUP', 'CREATE', key, 'g', '0', 'MKSTREAM')
  end
  if denied then return denied end
end
for d = base + ns + 1, #KEYS do
  denied = deny('SET', '', KEYS[d], '1', 'NX', 'PX', '1')
  if denied then return denied end
end
local raise = false
if mode == 2 then
  local lease = redis.call('GET', KEYS[2])
  if lease ~= ARGV[7] then
    if lease == false then lease = '' end
    return {2, lease}
  end
elseif mode == 3 then
  local fence = redis.call('GET', KEYS[2])
  if fence ~= ARGV[7] then
    if fence then
      local e = tonumber(string.match(fence, '^(%d+):'))
      if e == nil or e >= tonumber(string.match(ARGV[7], '^(%d+):')) then return {2, fence} end
    end
    raise = true
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
  if ARGV[flags + s] == 'z' then
    if t ~= 'zset' and t ~= 'none' then
      return {3, KEYS[base + s], t, 'zset'}
    end
  elseif ARGV[flags + s] == 'l' then
    if t ~= 'list' and t ~= 'none' then
      return {3, KEYS[base + s], t, 'list'}
    end
    local n = redis.call('TYPE', KEYS[base + s] .. ':notify')['ok']
    if n ~= 'list' and n ~= 'none' then
      return {3, KEYS[base + s] .. ':notify', n, 'list'}
    end
  elseif t ~= 'stream' and t ~= 'none' then
    return {3, KEYS[base + s], t, 'stream'}
  end
  types[s] = t
end
if raise then
  redis.call('SET', KEYS[2], ARGV[7])
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
  local z = ARGV[flags + tonumber(ARGV[i]) - base] == 'z'
  local l = ARGV[flags + tonumber(ARGV[i]) - base] == 'l'
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
      if z then
        redis.call('ZADD', key, 'NX', fv[2], fv[4])
      elseif l then
        redis.call('RPUSH', key, fv[2])
        redis.call('RPUSH', key .. ':notify', 1)
      else
        redis.call('XADD', key, '*', unpack(fv, 1, 2 * f))
      end
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

// append implements appender.
func (s *scriptAppend) append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	lease, err := s.heldLease(len(events))
	if err != nil {
		return err
	}
	s.build(events, s.cfg.PositionKey, prev, next, lease)
	res, err := appendScript.Run(ctx, s.client, s.keys, s.args...).Slice()
	if err != nil {
		if !uncertain(err) {
			return fmt.Errorf("append %d events: %w", len(events), s.scriptError(err))
		}
		if err := s.resolve(ctx, len(events), err, prev, next, lease); err != nil {
			return err
		}
		s.ran()
		return nil
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
		case 3:
			return s.wrongTypeReply(len(events), res)
		}
		return mismatch(res[1])
	}
	return fmt.Errorf("append: unexpected script reply %v", res)
}

// publish runs the script of Publish for events whose keys share a slot
// (all of them on a standalone Redis).
func (s *scriptAppend) publish(ctx context.Context, events []outbox.Event) (int, error) {
	s.build(events, "", nil, nil, "")
	res, err := appendScript.Run(ctx, s.client, s.keys, s.args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("publish %d events: %w", len(events), s.scriptError(err))
	}
	if code, _ := res[0].(int64); code == 3 {
		return 0, s.wrongTypeReply(len(events), res)
	}
	if len(res) != 3 {
		return 0, fmt.Errorf("publish: unexpected script reply %v", res)
	}
	s.ran()
	n, _ := res[2].(int64)
	return int(n), nil
}

// build fills s.keys and s.args for appendScript; a position key adds the
// position check and write of binlog mode, a lease (as this relay holds it)
// the lease check.
func (s *scriptAppend) build(events []outbox.Event, positionKey string, prev, next []byte, lease string) {
	s.keys = s.keys[:0]
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
	first := s.streams(s.base, events)
	s.args = append(s.args[:0], check, string(prev), string(next), window, len(s.keys)-first, len(s.cfg.Groups), lease)
	for _, g := range s.cfg.Groups {
		s.args = append(s.args, g)
	}
	for j, key := range s.keys[first:] {
		flag := "0"
		if s.sets[first+j+1] {
			flag = "z"
		} else if s.lists[first+j+1] {
			flag = "l"
		} else if s.checkGroups(s.base, key) {
			flag = "1"
		}
		s.args = append(s.args, flag)
	}
	s.addRuns(events, window)
	clear(s.pairs) // the events' values, held until the next batch otherwise
}

// addRuns adds the entries to s.args in runs (see appendScript), and their
// dedupe keys (window > 0) to s.keys.
func (s *scriptAppend) addRuns(events []outbox.Event, window int64) {
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
		if due, ok := s.cfg.Format.Delayed(e); ok {
			s.pairs = append(s.pairs[:0], fieldScore, strconv.FormatInt(due, 10), fieldMember, s.cfg.Format.Member(e))
		} else if s.cfg.Format.ToList(e) {
			s.pairs = append(s.pairs[:0], fieldMember, entry.JobBody(e))
		} else {
			s.pairs = s.appendFields(s.pairs[:0], e)
		}
		if run < 0 || stream != s.streamOf[i-1] || !sameNames(s.pairs, s.runNames) {
			if run >= 0 {
				s.args[run+3] = runLen
			}
			run, runLen = len(s.args), 0
			s.args = append(s.args, stream, dedupe, len(s.pairs)/2, 0)
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
}

// The names of a delayed set's run in appendScript's arguments: a delayed
// message's score and member take the place of an entry's fields.
const (
	fieldScore  = "score"
	fieldMember = "member"
)

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
func (s *scriptAppend) scriptError(err error) error {
	err = redisconn.Classify(err)
	if !errors.Is(err, redisconn.ErrPermission) {
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

// wrongTypeReply is the error of the script's {3, key, type, want}.
func (s *scriptAppend) wrongTypeReply(n int, res []any) error {
	if len(res) < 4 {
		return fmt.Errorf("append: unexpected script reply %v", res)
	}
	key, _ := res[1].(string)
	typ, _ := res[2].(string)
	want, _ := res[3].(string)
	return s.wrongType(n, key, typ, want)
}

// ran records that the script of the last build ran: its streams have every
// group now.
func (s *scriptAppend) ran() { s.groups.add(s.batchNew) }
