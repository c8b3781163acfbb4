package redisstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// slotState is what a cluster sink knows of the per-slot positions.
type slotState struct {
	// stored is the value each slot's position key holds as this session
	// read it (Position) or last wrote it: the next script of the slot
	// expects it. A slot missing here holds none.
	stored map[int][]byte
	// known are the slots Position read: the others hold no position, as
	// far as the slot record and the intent tell (fence.go).
	known map[int]bool
	// intent are the slots the intent key (IntentKey) names, as this
	// process last read or wrote it: a batch writes only these, and adds
	// the others to it first.
	intent map[int]bool
	// unrecorded are pairs of a field and a value for the slot record
	// (SlotRecordKey) that the next store of the position adds: slots
	// Position found holding a position the record lacks (a stop between
	// the scripts of a batch), which the intent stops naming then.
	unrecorded []string
	// reread are the slots a script found holding a position the relay
	// knew nothing of (the master of the position key lost writes): the
	// next Position reads them too.
	reread map[int]bool
	// written is what this process last wrote to each slot, across
	// sessions: a slot that holds an older value of its own lost writes
	// (a failover, asynchronous replication) and is read again from there.
	written map[int][]byte
	// emptyBefore holds, for each slot that held no position when this
	// process first wrote there, the position key's value before that
	// batch: a slot that holds none again lost every write of this process
	// (its first script among them), and is read again from there.
	emptyBefore map[int][]byte
	// record is the slot record (SlotRecordKey) of the batch in flight:
	// pairs of a field and a value for casScript.
	record []string
	// ahead are the slots whose position is past the one Position returned
	// (a stop between the scripts of one batch, or a slot's master that
	// lost writes): they skip the batches their position covers.
	ahead map[int]aheadSlot
	// fencedFor is the take of the lease ("<epoch>:<token>") the slots were
	// read for (fence.go), "" before the first; epoch is its epoch.
	fencedFor string
	epoch     int64
}

// clusterAppend is the strategy of Redis Cluster (Config.Cluster): one
// append script per hash slot of a batch, each with the slot's own position
// key, then the position key (append). It owns the slots' state, and
// the script strategy it runs per slot.
type clusterAppend struct {
	*base
	script *scriptAppend
	slots  slotState
}

// aheadSlot is the position of a slot past the one Position returned, raw
// and decoded.
type aheadSlot struct {
	raw []byte
	at  position.Point
}

// validateCluster refuses what cannot be kept exactly-once over slots.
func (c *Config) validateCluster() error {
	if c.Lease != nil && !c.Lease.cfg.Cluster {
		// Without epochs the slots' fences could not tell one take from
		// an earlier one (fence.go).
		return fmt.Errorf("%w: redisstream: a cluster sink needs a lease made with LeaseConfig.Cluster", outbox.ErrConfig)
	}
	if c.Format.Name == entry.FormatLaravelQueue {
		// A queue's list and its notify list lie in different slots
		// unless the prefix holds a hash tag, and one script cannot span
		// slots.
		return outbox.WithHint(fmt.Errorf("%w: --format %s does not run on a Redis Cluster", outbox.ErrConfig, entry.FormatLaravelQueue),
			"relay to a standalone or Sentinel Redis, or use --format %s on the cluster", entry.FormatLaravelStream)
	}
	if strings.ContainsAny(c.PositionKey, "{}") {
		return outbox.WithHint(fmt.Errorf("%w: --position-key %q has a hash tag: with --redis-cluster the relay adds one per slot itself", outbox.ErrConfig, c.PositionKey),
			"give a position key without { and }")
	}
	return nil
}

// slotGroup is the part of a batch that goes to one hash slot.
type slotGroup struct {
	slot   int
	events []outbox.Event
}

// groupBySlot splits events by the hash slot of their streams, keeping the
// order of the events within each group (a stream lies in one slot, so the
// order of each stream is kept) and the groups in the order of their first
// event.
func (s *clusterAppend) groupBySlot(events []outbox.Event) []slotGroup {
	var groups []slotGroup
	index := map[int]int{}
	for i := range events {
		e := &events[i]
		s.prepare(e)
		slot := Slot(s.streamKey(e))
		g, ok := index[slot]
		if !ok {
			g = len(groups)
			index[slot] = g
			groups = append(groups, slotGroup{slot: slot})
		}
		groups[g].events = append(groups[g].events, *e)
	}
	return groups
}

// append implements appender on Redis Cluster: one script per hash slot of the
// batch, each with the slot's own position key (SlotPositionKey), then the
// position key itself. A stop between the scripts leaves some slots past
// the position; Position finds them, and each skips what its position
// covers once the reader re-reads from there. A batch that writes slots the
// intent does not name adds them to it first (fence.go).
func (s *clusterAppend) append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	at, err := decodePoint(next)
	if err != nil {
		return err
	}
	if s.slots.stored == nil {
		// Append before Position: learn the slots' positions first.
		if _, err := s.position(ctx); err != nil {
			return err
		}
	}
	fence := ""
	if s.cfg.Lease != nil {
		// The slots were fenced, and their positions read, for one take
		// of the lease: a batch read under another is not appended.
		if fence, _ = s.cfg.Lease.currentFence(); fence == "" || fence != s.slots.fencedFor {
			return fmt.Errorf("append %d events: %w", len(events), outbox.ErrLeaseLost)
		}
	}
	groups := s.groupBySlot(events)
	todo := groups[:0]
	var fresh []int
	for _, g := range groups {
		if a, ok := s.slots.ahead[g.slot]; ok {
			o, err := position.Order(at, a.at)
			if err != nil {
				return fmt.Errorf("compare the batch's position with the one of slot %d: %w", g.slot, err)
			}
			if o <= 0 {
				continue // appended before the stop: the slot's position covers it
			}
			delete(s.slots.ahead, g.slot)
		}
		todo = append(todo, g)
		if !s.slots.intent[g.slot] {
			fresh = append(fresh, g.slot)
		}
	}
	if len(fresh) > 0 {
		if err := s.addIntent(ctx, fresh, fence, prev); err != nil {
			return fmt.Errorf("append %d events: %w", len(events), err)
		}
		for _, slot := range fresh {
			s.slots.intent[slot] = true
		}
	}
	s.slots.record = append(s.slots.record[:0], s.slots.unrecorded...)
	wrote := make([]int, 0, len(todo))
	for _, g := range todo {
		empty := s.slots.stored[g.slot] == nil
		if err := s.appendSlot(ctx, g, prev, next, fence); err != nil {
			return err
		}
		field := strconv.Itoa(g.slot)
		s.slots.record = append(s.slots.record, field, string(next))
		if empty && prev != nil {
			s.slots.record = append(s.slots.record, "e"+field, string(prev))
		}
		wrote = append(wrote, g.slot)
	}
	// The position key is a lower bound of every slot's: written last, it
	// is where the next start reads again from. The intent becomes the
	// slots of this batch, which the next batch most likely writes again;
	// a batch that wrote none (only the position moves) keeps it, so that
	// the batch after it does not have to add them again.
	intent := keepIntent
	if len(wrote) > 0 {
		slices.Sort(wrote)
		intent = formatIntent(wrote)
	}
	res, err := s.casPosition(ctx, prev, next, fence, intent, s.slots.record)
	if err != nil {
		if !uncertain(err) {
			return fmt.Errorf("store position %s: %w", s.cfg.PositionKey, s.script.scriptError(err))
		}
		stored, perr := s.storedPosition(ctx)
		if perr != nil {
			return fmt.Errorf("store position %s: %w (and reading it back failed: %v)", s.cfg.PositionKey, redisconn.Classify(err), perr)
		}
		if !bytes.Equal(stored, next) {
			return fmt.Errorf("store position %s: %w", s.cfg.PositionKey, redisconn.Classify(err))
		}
	} else if err := casReply(res, Slot(s.cfg.PositionKey), next); err != nil {
		return err
	}
	s.slots.unrecorded = nil
	if len(wrote) > 0 {
		clear(s.slots.intent)
		for _, slot := range wrote {
			s.slots.intent[slot] = true
		}
	}
	return nil
}

// keepIntent is the intent argument of casPosition that leaves the intent
// as it is.
const keepIntent = "-"

// casPosition compare-and-sets the position key, behind the fence of its
// slot when fence is set (a lease), writes record to the slot record and
// sets the intent to intent (formatIntent) unless it is keepIntent.
func (s *clusterAppend) casPosition(ctx context.Context, prev, next []byte, fence, intent string, record []string) ([]any, error) {
	args := make([]any, 0, 4+len(record))
	args = append(args, string(prev), string(next), fence, intent)
	for _, r := range record {
		args = append(args, r)
	}
	pos := s.cfg.PositionKey
	keys := []string{pos, SlotRecordKey(pos), FenceKey(pos, Slot(pos)), IntentKey(pos)}
	if fence == "" {
		return casScript.Run(ctx, s.client, keys, args...).Slice()
	}
	return fencedCasScript.Run(ctx, s.client, keys, args...).Slice()
}

// casReply is the error of a reply of casScript or fencedCasScript on the
// position key (in slot), nil when it wrote next: the cluster client runs a
// script again after a lost reply, and the second run finds the position
// the first one stored.
func casReply(res []any, slot int, next []byte) error {
	if len(res) < 2 {
		return fmt.Errorf("store position: unexpected script reply %v", res)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		return nil
	case 2:
		cur, _ := res[1].(string)
		return fenced(slot, cur)
	}
	if cur, _ := res[1].(string); cur != "" && cur == string(next) {
		return nil
	}
	return mismatch(res[1])
}

// appendSlot runs the append script for one slot's events, checking and
// replacing the slot's position; behind the slot's fence when fence is set
// (a lease).
func (s *clusterAppend) appendSlot(ctx context.Context, g slotGroup, prev, next []byte, fence string) error {
	key := SlotPositionKey(s.cfg.PositionKey, g.slot)
	expect := s.slots.stored[g.slot]
	sc := s.script
	sc.build(g.events, key, expect, next, fence)
	if fence != "" {
		// build checks the lease key with the lease; here the script
		// checks the slot's fence, and raises a lower one (fence.go).
		sc.keys[1] = FenceKey(s.cfg.PositionKey, g.slot)
		sc.args[0] = "3"
	}
	res, err := appendScript.Run(ctx, s.client, sc.keys, sc.args...).Slice()
	if err != nil {
		if !uncertain(err) {
			return fmt.Errorf("append %d events to slot %d: %w", len(g.events), g.slot, sc.scriptError(err))
		}
		// The slot's position tells whether the script ran: it writes it
		// last and atomically.
		stored, gerr := s.client.Get(ctx, key).Bytes()
		if gerr != nil && !errors.Is(gerr, redis.Nil) {
			return fmt.Errorf("append %d events to slot %d: %w (and reading its position back failed: %v)", len(g.events), g.slot, redisconn.Classify(err), gerr)
		}
		switch {
		case bytes.Equal(stored, next):
		case bytes.Equal(stored, expect):
			return fmt.Errorf("append %d events to slot %d: %w", len(g.events), g.slot, redisconn.Classify(err))
		default:
			if fence != "" {
				// Another holder moved the position behind a fence of
				// its own: this script was refused, not fenced.
				if ferr := s.fenceOf(ctx, g.slot, fence); ferr != nil {
					return ferr
				}
			}
			return s.slotMismatch(g.slot, stored)
		}
	} else if len(res) < 2 {
		return fmt.Errorf("append: unexpected script reply %v", res)
	} else if code, _ := res[0].(int64); code == 2 {
		cur, _ := res[1].(string)
		return fmt.Errorf("append %d events to slot %d: %w", len(g.events), g.slot, s.refusedBy(ctx, g.slot, cur, s.slots.epoch))
	} else if code == 3 {
		return sc.wrongTypeReply(len(g.events), res)
	} else if code != 1 {
		// The cluster client retries a script whose reply it lost; the
		// position then shows the first run.
		if cur, _ := res[1].(string); cur != string(next) {
			return s.slotMismatch(g.slot, []byte(cur))
		}
	}
	sc.ran()
	if expect == nil {
		if _, ok := s.slots.emptyBefore[g.slot]; !ok && prev != nil {
			s.slots.emptyBefore[g.slot] = prev
		}
	}
	s.slots.stored[g.slot] = next
	s.slots.written[g.slot] = next
	s.slots.known[g.slot] = true
	return nil
}

// slotMismatch is the error of a slot script that found stored (nil or
// empty: none) instead of the position it expected. A slot that holds none
// although this process wrote there, and held none before its first write,
// lost those writes (a master failover, asynchronous replication): like a
// slot that went back to an older position of its own, it is read again,
// from before that first write (position), instead of stopping the
// relay as if someone had deleted the position. A slot that holds a
// position where neither the slot record nor the intent told of one (the
// master of the position key lost their last writes) is read at the next
// start of a session, which the error asks for.
func (s *clusterAppend) slotMismatch(slot int, stored []byte) error {
	if len(stored) == 0 {
		if _, ok := s.slots.emptyBefore[slot]; ok {
			return fmt.Errorf("%w: hash slot %d holds no position any more, though this relay wrote there: Redis lost its writes", outbox.ErrPositionRolledBack, slot)
		}
		stored = nil
	} else if !s.slots.known[slot] {
		s.slots.reread[slot] = true
		return fmt.Errorf("hash slot %d holds a position (%s) that neither %s nor %s names (the master of the position key lost writes): reading the slot and starting the session again", slot, logging.Truncate(string(stored), 60), SlotRecordKey(s.cfg.PositionKey), IntentKey(s.cfg.PositionKey))
	}
	return &outbox.PositionMismatchError{Stored: stored}
}

// mismatch is the error of a refused compare-and-set whose script replied
// the stored position cur ("" for none).
func mismatch(cur any) error {
	var stored []byte
	if v, _ := cur.(string); v != "" {
		stored = []byte(v)
	}
	return &outbox.PositionMismatchError{Stored: stored}
}

// casScript replaces the position KEYS[1] holding ARGV[1] ("": none) with
// ARGV[2], records, in the hash KEYS[2] (SlotRecordKey), what the batch
// wrote to each slot, and sets the intent KEYS[4] (IntentKey) to ARGV[4]
// ("": none) unless that is "-" (keepIntent). The record's pairs of a field
// and a value come from ARGV[5] on, the field a slot number (its new
// position, HSET) or "e" and a slot number (the position before the first
// script of a slot that held none, HSETNX). KEYS[3] is the fence of the
// slot, which fencedCasScript checks (ARGV[3]). It returns {1, ""}, or
// {0, stored} without writing.
var casScript = redis.NewScript(casLua)

// casLua is casScript's code, which fencedCasScript runs behind a fence.
const casLua = `
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = '' end
if cur ~= ARGV[1] then return {0, cur} end
` + recordLua + `
if ARGV[4] == '' then
  redis.call('DEL', KEYS[4])
elseif ARGV[4] ~= '-' then
  redis.call('SET', KEYS[4], ARGV[4])
end
redis.call('SET', KEYS[1], ARGV[2])
return {1, ''}
`

// recordLua writes casScript's slot record (see there) before the position:
// a refusal of the record's commands then writes nothing.
const recordLua = `
for i = 5, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 1) == 'e' then
    redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
  else
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  end
end`

// position is Position on Redis Cluster: the position key, after reading
// the position of every slot the slot record or the intent names (and every
// slot this process wrote or was told to read again); when a slot lost
// writes, the position key is lowered to that slot's position first. The
// slots past the result skip what they hold (cutPoints).
func (s *clusterAppend) position(ctx context.Context) ([]byte, error) {
	st, err := s.readState(ctx)
	if err != nil {
		return nil, err
	}
	if b, err := position.Decode(st.base); err == nil && b.Repairing() {
		// Before any slot is judged against it: repair marked the slots
		// it fenced too (HoldClusterPosition), which are no loss.
		return nil, b.RepairError(s.cfg.PositionKey)
	}
	resume := st.base
	s.slots.ahead = nil
	if st.base != nil {
		at, err := decodePoint(st.base)
		if err != nil {
			return nil, err
		}
		if resume, at, err = s.resumeOwnLoss(st.stored, resume, at); err != nil {
			return nil, err
		}
		if resume, at, err = s.resumeRecordedLoss(st.record, st.stored, resume, at); err != nil {
			return nil, err
		}
		if s.slots.ahead, err = s.aheadOf(st.stored, at); err != nil {
			return nil, err
		}
	}
	if !bytes.Equal(resume, st.base) {
		// Lower the position key to the slot that lost writes, so that a
		// restart before they are appended again reads from there too.
		res, err := s.casPosition(ctx, st.base, resume, st.fence, keepIntent, nil)
		if err != nil {
			return nil, fmt.Errorf("lower position %s to a slot that lost writes: %w", s.cfg.PositionKey, redisconn.Classify(err))
		}
		if err := casReply(res, Slot(s.cfg.PositionKey), resume); err != nil {
			return nil, err
		}
	}
	s.slots.stored, s.slots.known = st.stored, st.known
	s.slots.intent = map[int]bool{}
	for _, slot := range st.intent {
		s.slots.intent[slot] = true
	}
	s.slots.fencedFor, s.slots.epoch = st.fence, st.epoch
	if s.slots.written == nil {
		s.slots.written = map[int][]byte{}
		s.slots.emptyBefore = map[int][]byte{}
	}
	// Slots holding a position the record lacks go to the record with the
	// next store of the position, which stops the intent naming them.
	s.slots.unrecorded = nil
	for slot, v := range st.stored {
		field := strconv.Itoa(slot)
		if _, ok := st.record[field]; ok {
			continue
		}
		s.slots.unrecorded = append(s.slots.unrecorded, field, string(v))
		before, ok := s.slots.emptyBefore[slot]
		if !ok && slices.Contains(st.intent, slot) && !s.slots.reread[slot] {
			// Added to the intent since the position was last stored: the
			// batch that wrote it started from the stored position.
			before, ok = st.base, st.base != nil
		}
		if ok {
			s.slots.unrecorded = append(s.slots.unrecorded, "e"+field, string(before))
		}
	}
	s.slots.reread = map[int]bool{}
	return resume, nil
}

// clusterState is what position reads: the position key (base), the slot
// record, the intent, the position of each slot read (stored; known: every
// slot read), and the take of the lease the intent's slots are fenced for
// ("" without a lease) with its epoch.
type clusterState struct {
	base   []byte
	record map[string]string
	intent []int
	stored map[int][]byte
	known  map[int]bool
	fence  string
	epoch  int64
}

// readState reads the position key, the slot record and the intent in one
// step, with a lease after raising the fence of the position key's slot;
// then the positions of the slots the intent names, with a lease after
// raising their fences in the same step, and those of the slots the record
// names (fence.go says why no other slot needs a look).
func (s *clusterAppend) readState(ctx context.Context) (clusterState, error) {
	var st clusterState
	if s.cfg.Lease != nil {
		if st.fence, st.epoch = s.cfg.Lease.currentFence(); st.fence == "" {
			return st, fmt.Errorf("read the slot positions: %w", outbox.ErrLeaseLost)
		}
	}
	h, err := s.readHead(ctx, st.fence, st.epoch)
	if err != nil {
		return st, err
	}
	st.base, st.record, st.intent = h.base, h.record, h.intent
	st.known = map[int]bool{}
	for _, slot := range st.intent {
		st.known[slot] = true
	}
	var plain []int
	add := func(slot int) {
		if !st.known[slot] {
			st.known[slot] = true
			plain = append(plain, slot)
		}
	}
	for field := range st.record {
		if slot, err := strconv.Atoi(field); err == nil && slot >= 0 && slot < ClusterSlots {
			add(slot)
		}
	}
	for slot := range s.slots.written {
		add(slot)
	}
	for slot := range s.slots.reread {
		add(slot)
	}
	if st.fence != "" {
		if st.stored, err = s.fenceSlots(ctx, st.intent, plain, st.fence, st.epoch); err != nil {
			return st, err
		}
	} else {
		st.stored = map[int][]byte{}
		if err := s.readSlots(ctx, append(plain, st.intent...), st.stored); err != nil {
			return st, err
		}
	}
	if st.base == nil && len(st.stored) > 0 {
		return st, outbox.WithHint(fmt.Errorf("%w: %d hash slots hold positions under %s:{...}, but %s holds none", outbox.ErrConfig, len(st.stored), s.cfg.PositionKey, s.cfg.PositionKey),
			"the position was deleted, or a relay stopped during its very first batch; to start over, delete the slot positions too (redis-cli --cluster call <node> EVAL \"for _,k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end\" 0 '%s:{*}'), knowing that events appended since the old start may be appended again", s.cfg.PositionKey)
	}
	return st, nil
}

// resumeOwnLoss lowers resume (at, decoded) to the position of each slot
// that lost writes this process made there (stored holds the slots'
// positions now), and returns it.
func (s *clusterAppend) resumeOwnLoss(stored map[int][]byte, resume []byte, at position.Point) ([]byte, position.Point, error) {
	for slot, mine := range s.slots.written {
		cur, ok := stored[slot]
		if !ok {
			before, lost := s.slots.emptyBefore[slot]
			if !lost {
				return nil, at, outbox.WithHint(fmt.Errorf("%w: the position of hash slot %d (%s) was deleted while the relay ran", outbox.ErrFenced, slot, SlotPositionKey(s.cfg.PositionKey, slot)),
					"a master that lost its data (restarted empty, or a replica that never synced took over), or someone deleted the key: the slot's streams may lack events; check them (binlog-outbox verify against that master), then restart the relay, which starts the slot afresh")
			}
			// Every write of this process to the slot was lost, and it
			// held nothing before them: read again from before the first.
			delete(s.slots.written, slot)
			delete(s.slots.emptyBefore, slot)
			beforeAt, err := decodePoint(before)
			if err != nil {
				return nil, at, err
			}
			o, err := position.Order(beforeAt, at)
			if err != nil {
				return nil, at, fmt.Errorf("compare the position before hash slot %d lost its writes with %s: %w", slot, s.cfg.PositionKey, err)
			}
			if o < 0 {
				resume, at = before, beforeAt
			}
			continue
		}
		if bytes.Equal(cur, mine) {
			continue
		}
		curAt, err1 := decodePoint(cur)
		mineAt, err2 := decodePoint(mine)
		if err1 != nil || err2 != nil {
			continue // not ours: the append refuses it as fenced
		}
		if older, err := position.Order(curAt, mineAt); err == nil && older < 0 {
			if o, err := position.Order(curAt, at); err == nil && o < 0 {
				resume, at = cur, curAt
			}
		}
	}
	return resume, at, nil
}

// resumeRecordedLoss lowers resume (at, decoded) to where each slot that
// lost writes recorded in the slot record must be read again from
// (recordedLoss), and returns it.
func (s *clusterAppend) resumeRecordedLoss(record map[string]string, stored map[int][]byte, resume []byte, at position.Point) ([]byte, position.Point, error) {
	lost, err := s.recordedLoss(record, stored)
	if err != nil {
		return nil, at, err
	}
	for _, raw := range lost {
		p, err := decodePoint(raw)
		if err != nil {
			return nil, at, err
		}
		o, err := position.Order(p, at)
		if err != nil {
			return nil, at, fmt.Errorf("compare a slot that lost writes with %s: %w", s.cfg.PositionKey, err)
		}
		if o < 0 {
			resume, at = raw, p
		}
	}
	return resume, at, nil
}

// aheadOf returns the slots whose stored position is past at.
func (s *clusterAppend) aheadOf(stored map[int][]byte, at position.Point) (map[int]aheadSlot, error) {
	ahead := map[int]aheadSlot{}
	for slot, raw := range stored {
		p, err := decodePoint(raw)
		if err != nil {
			return nil, fmt.Errorf("slot position %s: %w", SlotPositionKey(s.cfg.PositionKey, slot), err)
		}
		o, err := position.Order(p, at)
		if err != nil {
			return nil, fmt.Errorf("slot position %s: %w", SlotPositionKey(s.cfg.PositionKey, slot), err)
		}
		if o > 0 {
			ahead[slot] = aheadSlot{raw: raw, at: p}
		}
	}
	return ahead, nil
}

// cutPoints is Sink.CutPoints: the positions of the slots ahead, each once.
func (s *clusterAppend) cutPoints() []position.Point {
	var out []position.Point
	seen := map[string]bool{}
	for _, a := range s.slots.ahead {
		if k := a.at.String(); !seen[k] {
			seen[k] = true
			out = append(out, a.at)
		}
	}
	return out
}

// readSlotPositions reads the position key of every slot in one pipeline
// (the cluster client sends each node its share).
func (s *base) readSlotPositions(ctx context.Context) (map[int][]byte, error) {
	all := make([]int, ClusterSlots)
	for slot := range all {
		all[slot] = slot
	}
	out := map[int][]byte{}
	return out, s.readSlots(ctx, all, out)
}

// readSlots reads the position key of each of slots in one pipeline into
// out, leaving out the slots that hold none.
func (s *base) readSlots(ctx context.Context, slots []int, out map[int][]byte) error {
	if len(slots) == 0 {
		return nil
	}
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range slots {
			p.Get(ctx, SlotPositionKey(s.cfg.PositionKey, slot))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the slot positions %s:{...}: %w", s.cfg.PositionKey, redisconn.Classify(err))
	}
	for i, c := range cmds {
		v, err := c.(*redis.StringCmd).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the slot position %s: %w", SlotPositionKey(s.cfg.PositionKey, slots[i]), redisconn.Classify(err))
		}
		out[slots[i]] = v
	}
	return nil
}

func decodePoint(raw []byte) (position.Point, error) {
	b, err := position.Decode(raw)
	if err != nil {
		return position.Point{}, err
	}
	return b.Point()
}

// publish is Publish on Redis Cluster: one script per hash slot.
func (s *clusterAppend) publish(ctx context.Context, events []outbox.Event) (int, error) {
	total := 0
	for _, g := range s.groupBySlot(events) {
		n, err := s.script.publish(ctx, g.events)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// recordedLoss returns, from the slot record (SlotRecordKey) and the slots'
// positions as stored, where to read again from for each slot that lost
// writes recorded there: its position when that is older than the record's,
// or the position before its first script when it holds none and held none
// then. A slot that holds none although it held a position before the
// record began lost more than can be appended again: that is ErrFenced, as
// for this process's own writes. Positions that are not this relay's are
// left to the scripts, which refuse them.
func (s *clusterAppend) recordedLoss(record map[string]string, stored map[int][]byte) ([][]byte, error) {
	var out [][]byte
	for field, rec := range record {
		if strings.HasPrefix(field, "e") {
			continue // read with the slot's own field
		}
		slot, err := strconv.Atoi(field)
		if err != nil || slot < 0 || slot >= ClusterSlots {
			return nil, fmt.Errorf("%w: the slot record %s has a field %q that names no hash slot", outbox.ErrConfig, SlotRecordKey(s.cfg.PositionKey), field)
		}
		cur, ok := stored[slot]
		if !ok {
			before, held := record["e"+field]
			if !held {
				return nil, outbox.WithHint(fmt.Errorf("%w: the position of hash slot %d (%s) is gone, though the relay recorded writing there", outbox.ErrFenced, slot, SlotPositionKey(s.cfg.PositionKey, slot)),
					"a master that lost its data (restarted empty, or a replica that never synced took over), or someone deleted the key: the slot's streams may lack events; check them (binlog-outbox verify), then set the position deliberately (binlog-outbox position set, which clears the slot record)")
			}
			out = append(out, []byte(before))
			continue
		}
		if cur == nil || string(cur) == rec {
			continue
		}
		curAt, err1 := decodePoint(cur)
		recAt, err2 := decodePoint([]byte(rec))
		if err1 != nil || err2 != nil {
			continue // not ours: the slot's next script refuses it as fenced
		}
		if o, err := position.Order(curAt, recAt); err == nil && o < 0 {
			out = append(out, cur)
		}
	}
	return out, nil
}
