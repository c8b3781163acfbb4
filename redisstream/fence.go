package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// Standby relays on Redis Cluster (--lease with --redis-cluster).
//
// On a standalone Redis every append script reads the lease itself. On a
// cluster the lease lies in one hash slot and a script may touch one slot
// only, so each slot has a fence instead: FenceKey, holding the epoch and
// token of the lease's take it lets append ("<epoch>:<token>"). Each take
// has a higher epoch than every take before it (acquireScript takes the
// lease and increments the counter EpochKey in one step). Fences are
// raise-only: a script never lowers one, and refuses to run under a fence
// of a higher epoch (or of the same epoch and another token).
//
// Beside the position key P, in its slot: its fence F, the slot record R
// (SlotRecordKey: the slots the relay wrote, with their positions) and the
// intent I (IntentKey: the slots the holder may write before it next
// stores P). The rules:
//
//  1. A holder writes a slot only when it knows the slot is in I. The
//     store of P sets I to the slots of the batch it stores (or keeps it,
//     for a batch that wrote none), and a batch that writes a slot beyond
//     I first adds it (intentScript); both run only when F is exactly the
//     holder's fence. A holder knows I from these scripts and from what
//     its takeScript read (rule 2, also at each later session), nothing
//     else.
//  2. A take, before anything else, raises F to the new epoch and reads P,
//     R and I in the same step (takeScript), then raises the fence of every
//     slot in I and reads its position in the same step (fenceScript), and
//     reads the positions of the other slots of R.
//  3. A slot's append script runs when the slot's fence is the appender's;
//     a lower one, or none, it raises to the appender's in the same step;
//     a higher one (or the same epoch with another token) refuses it.
//
// Let H take with epoch E, and O be any holder of a lower epoch, whose
// last view of I (rule 1) is V. Once H raised F, no script of O changes P,
// R or I any more, so O writes only slots of V from then on. Claim: every
// slot of V is in I as H read it (I_H), or was fenced by a holder H' that
// took after O and before H. Between O's last script on F and H's take, I
// changed only by scripts of later holders: one that only added slots kept
// V inside I; one that stored P had taken after O and so, by rule 2,
// fenced every slot of I as it read it, which held V (by this same
// argument, applied to that holder's take). So O's writes after
// H's take land only in slots of I_H or in slots fenced above O's epoch,
// where rule 3 refuses them. H fences every slot of I_H before it reads
// its position, so O's writes there are in what H reads, or refused. The
// slots of R outside I_H, O cannot write; H reads them after raising F.
// Writes of O before H raised F are in what H reads: P, R and I in the take
// step, the slots after it. H then resumes from what it read, like a
// restarted relay: each slot's compare-and-set chains H's appends to what
// the slot holds, and a slot found past P skips what it holds
// (canal.Cuts), so no event is appended twice or lost.
//
// Costs: a take is one script in P's slot plus one per slot in I (the
// slots of the last batch) and a read per other slot of R; a start without
// a lease the same reads; a batch one script more only when it writes a
// slot beyond the previous batch's. Never one per hash slot.
//
// O may append between its lease's expiry and H's take (it refuses to by
// its own clock once its lease may have expired, currentFence): H reads
// whatever it wrote.
//
// What Redis can lose: replication is asynchronous, so a master that dies
// may take writes with it, the latest first.
//   - F, with P's later writes (the master of P's slot): H's next script on
//     F is refused; H gives the lease up and whoever takes it next fences
//     again. I may then lack slots H wrote: a slot script that finds a
//     position where the relay knew of none makes the relay read that slot
//     too and start the session again (reread), so the slot skips what it
//     holds.
//   - A slot's fence, with the slot's later writes: its position is older
//     than what the holder wrote, which the holder notices at its next
//     script there (a loss, read again from the slot's position, as
//     without a lease: docs/redis-cluster.md). Should O write there again
//     first, its compare-and-set chains onto what the slot holds and the
//     holder's next script there finds that.
//   - The epoch counter (the lease's master): a take then has an epoch a
//     fence already holds; that fence refuses it, the relay raises the
//     counter above the fence's epoch (raiseEpoch), gives the lease up and
//     takes it again, higher.

// FenceKey returns the key of the fence of one hash slot: the position key,
// ":fence:" and the slot's hash tag (SlotTag), e.g.
// binlog-outbox:position:app.outbox:fence:{a3}.
func FenceKey(positionKey string, slot int) string {
	return positionKey + ":fence:{" + SlotTag(slot) + "}"
}

// IntentKey returns the key, in the position key's own slot, that names the
// hash slots the relay may write before it next stores the position (comma
// separated): a start reads those slots besides the ones of the slot record,
// since a stop may have left them past the position, and a take fences
// them. binlog-outbox position set and reset delete it.
func IntentKey(positionKey string) string {
	return positionKey + ":intent:{" + SlotTag(Slot(positionKey)) + "}"
}

// raiseLua raises the fence KEYS[1] to ARGV[1] ("<epoch>:<token>", epoch
// ARGV[2]) unless it holds that already, or returns {0, stored} without
// writing when it holds a fence of an equal or higher epoch, or a value
// that is no fence.
const raiseLua = `
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur then
    local e = tonumber(string.match(cur, '^(%d+):'))
    if e == nil or e >= tonumber(ARGV[2]) then return {0, cur} end
  end
  redis.call('SET', KEYS[1], ARGV[1])
end
`

// fenceScript raises the fence KEYS[1] of a slot (raiseLua) and reads the
// slot's position KEYS[2] in the same step, so that no earlier holder's
// write to the slot can come after the read. It returns {1, "", position
// ("": none)}, or {0, stored} without writing or reading.
var fenceScript = redis.NewScript(raiseLua + `
local pos = redis.call('GET', KEYS[2])
if pos == false then pos = '' end
return {1, '', pos}
`)

// takeScript reads what a session starts from, all in the position key's
// slot: the position KEYS[2], the slot record KEYS[3] and the intent KEYS[4];
// with a lease (ARGV[1] not "") it first raises the fence KEYS[1] of the
// slot (raiseLua), so that no earlier holder changes them after the read.
// It returns {1, position, record (HGETALL), intent}, or {0, stored} without
// writing or reading.
var takeScript = redis.NewScript(`
if ARGV[1] ~= '' then` + raiseLua + `end
return {1, redis.call('GET', KEYS[2]) or '', redis.call('HGETALL', KEYS[3]), redis.call('GET', KEYS[4]) or ''}
`)

// intentScript adds the slots ARGV[2] (comma separated) to the intent
// KEYS[2], behind the fence KEYS[1] of the position key's slot when ARGV[1]
// is not "", and only while the position key KEYS[3] holds ARGV[3] ("":
// none), the position the batch started from: it returns {2, fence}
// without writing when the fence is not ARGV[1], {0, position} when the
// position is not ARGV[3], else {1, ""}. The position check keeps a relay
// without a lease from writing a slot beyond the intent once repair
// marked the position (HoldClusterPosition), with or without a lease.
var intentScript = redis.NewScript(`
if ARGV[1] ~= '' then
  local fence = redis.call('GET', KEYS[1])
  if fence ~= ARGV[1] then return {2, fence or ''} end
end
local pos = redis.call('GET', KEYS[3]) or ''
if pos ~= ARGV[3] then return {0, pos} end
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= '' then
  redis.call('SET', KEYS[2], cur .. ',' .. ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return {1, ''}
`)

// fencedCasScript is casScript behind the fence KEYS[3] of the position
// key's slot: it returns {2, fence} without writing when the fence is not
// ARGV[3].
var fencedCasScript = redis.NewScript(`
local fence = redis.call('GET', KEYS[3])
if fence ~= ARGV[3] then
  if fence == false then fence = '' end
  return {2, fence}
end` + casLua)

// epochOf returns the epoch of a fence value, -1 when it is none.
func epochOf(fence string) int64 {
	head, _, ok := strings.Cut(fence, ":")
	if !ok {
		return -1
	}
	e, err := strconv.ParseInt(head, 10, 64)
	if err != nil {
		return -1
	}
	return e
}

// fenced returns the error of a script refused by a slot's fence cur.
func fenced(slot int, cur string) error {
	if cur == "" {
		return fmt.Errorf("%w: the fence of hash slot %d is missing (its master lost it); taking the lease again fences it", outbox.ErrLeaseLost, slot)
	}
	return fmt.Errorf("%w: hash slot %d is fenced by the lease's take %s", outbox.ErrLeaseLost, slot, logging.Truncate(cur, 20))
}

// refusedBy is the error of a take or a script refused in slot by the fence
// cur, for a take of epoch. A fence of an equal or higher epoch is a later
// take's, or the epoch counter went back (its master lost the INCRs): the
// counter is raised past it either way (a no-op after a later take), so
// that the next take is higher.
func (s *clusterAppend) refusedBy(ctx context.Context, slot int, cur string, epoch int64) error {
	top := epochOf(cur)
	if cur != "" && top < 0 {
		return outbox.WithHint(fmt.Errorf("%w: %s holds %q, not a fence of binlog-outbox", outbox.ErrConfig, FenceKey(s.cfg.PositionKey, slot), logging.Truncate(cur, 60)),
			"the relay writes these keys itself; delete it (redis-cli -c DEL %s) and start the relay again", FenceKey(s.cfg.PositionKey, slot))
	}
	if top < epoch {
		return fenced(slot, cur)
	}
	if err := s.cfg.Lease.raiseEpoch(ctx, top); err != nil {
		return err
	}
	return fmt.Errorf("%w: hash slot %d is fenced by a take of epoch %d, at least this one's (%d): a later take holds the lease, or the epoch counter went back (it is raised past %d)", outbox.ErrLeaseLost, slot, top, epoch, top)
}

// head is what takeScript reads in the position key's slot.
type head struct {
	base   []byte
	record map[string]string
	intent []int
}

// readHead reads the position, the slot record and the intent in one step,
// after raising the fence of the position key's slot to fence (epoch) when
// fence is set.
func (s *clusterAppend) readHead(ctx context.Context, fence string, epoch int64) (head, error) {
	var h head
	pos := s.cfg.PositionKey
	keys := []string{FenceKey(pos, Slot(pos)), pos, SlotRecordKey(pos), IntentKey(pos)}
	res, err := takeScript.Run(ctx, s.client, keys, fence, epoch).Slice()
	if err != nil {
		return h, fmt.Errorf("read position %s: %w", pos, redisconn.Classify(err))
	}
	if len(res) < 2 {
		return h, fmt.Errorf("read position %s: unexpected script reply %v", pos, res)
	}
	if code, _ := res[0].(int64); code != 1 {
		cur, _ := res[1].(string)
		return h, s.refusedBy(ctx, Slot(pos), cur, epoch)
	}
	if len(res) < 4 {
		return h, fmt.Errorf("read position %s: unexpected script reply %v", pos, res)
	}
	if v, _ := res[1].(string); v != "" {
		h.base = []byte(v)
	}
	flat, _ := res[2].([]any)
	h.record = make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		h.record[f] = v
	}
	raw, _ := res[3].(string)
	if h.intent, err = parseIntent(raw); err != nil {
		return h, outbox.WithHint(fmt.Errorf("%w: the intent %s holds %q: %v", outbox.ErrConfig, IntentKey(pos), logging.Truncate(raw, 60), err),
			"the relay writes this key itself; set the position deliberately (binlog-outbox position set), which deletes it")
	}
	return h, nil
}

// parseIntent reads an intent's slots ("" none), each once, in order.
func parseIntent(raw string) ([]int, error) {
	if raw == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(raw, ",") {
		slot, err := strconv.Atoi(f)
		if err != nil || slot < 0 || slot >= ClusterSlots {
			return nil, fmt.Errorf("%q names no hash slot", f)
		}
		out = append(out, slot)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatIntent is an intent's value: the slots, comma separated.
func formatIntent(slots []int) string {
	var b strings.Builder
	for i, slot := range slots {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(slot))
	}
	return b.String()
}

// addIntent adds slots to the intent, behind the fence of the position
// key's slot when fence is set, before a batch from prev writes them (rule
// 1 above), while the position key still holds prev.
func (s *clusterAppend) addIntent(ctx context.Context, slots []int, fence string, prev []byte) error {
	pos := s.cfg.PositionKey
	keys := []string{FenceKey(pos, Slot(pos)), IntentKey(pos), pos}
	res, err := intentScript.Run(ctx, s.client, keys, fence, formatIntent(slots), string(prev)).Slice()
	if err != nil {
		return fmt.Errorf("record the %d hash slots the batch writes in %s: %w", len(slots), IntentKey(pos), redisconn.Classify(err))
	}
	if len(res) < 2 {
		return fmt.Errorf("record the hash slots the batch writes: unexpected script reply %v", res)
	}
	switch code, _ := res[0].(int64); code {
	case 2:
		cur, _ := res[1].(string)
		return fenced(Slot(pos), cur)
	case 0:
		return mismatch(res[1])
	}
	return nil
}

// fenceSlots raises the fence of each slot of fenced to fence and reads
// its position in the same step, and reads the positions of the slots of
// plain, all in one pipeline (the cluster client sends each node its
// share), after the fence of the position key's slot was raised.
func (s *clusterAppend) fenceSlots(ctx context.Context, fenced, plain []int, fence string, epoch int64) (map[int][]byte, error) {
	stored := map[int][]byte{}
	// By EVAL, not EVALSHA: a master that has not run the script since it
	// started (no take fenced a slot of it yet; the relay's ACL has no
	// SCRIPT LOAD) answers EVALSHA with NOSCRIPT, and a second round to send
	// it the script would lengthen a standby's takeover by a round trip,
	// which under load costs far more than the short script's bytes
	// (TestRun_RedisClusterStandbyTakesOverExactlyOnce). The plain reads
	// ride in the same pipeline for the same reason.
	// The pipeline's own error is its first command's failure: each
	// command's is looked at below.
	cmds, _ := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range fenced {
			fenceScript.Eval(ctx, p, s.fenceKeys(slot), fence, epoch)
		}
		for _, slot := range plain {
			p.Get(ctx, SlotPositionKey(s.cfg.PositionKey, slot))
		}
		return nil
	})
	for i, c := range cmds[:len(fenced)] {
		slot := fenced[i]
		res, err := c.(*redis.Cmd).Slice()
		if err != nil {
			return nil, fmt.Errorf("fence hash slot %d (%s): %w", slot, FenceKey(s.cfg.PositionKey, slot), redisconn.Classify(err))
		}
		if len(res) >= 3 {
			if code, _ := res[0].(int64); code == 1 {
				if pos, _ := res[2].(string); pos != "" {
					stored[slot] = []byte(pos)
				}
				continue
			}
		}
		cur := ""
		if len(res) >= 2 {
			cur, _ = res[1].(string)
		}
		return nil, s.refusedBy(ctx, slot, cur, epoch)
	}
	for i, c := range cmds[len(fenced):] {
		v, err := c.(*redis.StringCmd).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the slot position %s: %w", SlotPositionKey(s.cfg.PositionKey, plain[i]), redisconn.Classify(err))
		}
		stored[plain[i]] = v
	}
	return stored, nil
}

// fenceKeys are the keys of fenceScript for slot: its fence and position.
func (s *clusterAppend) fenceKeys(slot int) []string {
	return []string{FenceKey(s.cfg.PositionKey, slot), SlotPositionKey(s.cfg.PositionKey, slot)}
}

// fenceOf reads a slot's fence, for a script whose reply was lost; nil when
// it is fence, ErrLeaseLost when it is another.
func (s *clusterAppend) fenceOf(ctx context.Context, slot int, fence string) error {
	cur, err := s.client.Get(ctx, FenceKey(s.cfg.PositionKey, slot)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the fence of hash slot %d: %w", slot, redisconn.Classify(err))
	}
	if cur != fence {
		return fenced(slot, cur)
	}
	return nil
}
