package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Standby relays on Redis Cluster (--lease with --redis-cluster).
//
// On a standalone Redis every append script reads the lease itself. On a
// cluster the lease lies in one hash slot and a script may touch one slot
// only, so each slot has a fence instead: FenceKey, holding the epoch and
// token of the lease's take it lets append ("<epoch>:<token>"). Each take
// has a higher epoch than every take before it (acquireScript takes the
// lease and increments the counter EpochKey in one step).
//
// The argument, for a holder H of epoch E and any earlier holder O (epoch
// below E):
//
//  1. H, once it took the lease and before it reads any position, raises
//     the fence of every one of the 16384 slots to E (fenceScript, which
//     never lowers a fence: a late fence write of O is refused).
//  2. Every append script of a slot, and the compare-and-set of the
//     position key, run only when the slot's fence is exactly the
//     appender's "<epoch>:<token>"; otherwise they write nothing and the
//     relay is told its lease is lost (outbox.ErrLeaseLost).
//  3. So once H fenced a slot, O can never write there again; everything O
//     wrote before is in the slot when H reads its position, which the
//     fence script reads right after raising the fence (and the position
//     key, fenced too, after all of them). H resumes from what is stored,
//     like any restarted relay, and each slot's compare-and-set chains H's
//     appends to O's.
//
// O may still append between its lease's expiry and H's fence of that slot
// (not after: and it refuses to by its own clock once its lease may have
// expired, currentFence); whatever it writes then is read by H in step 3.
//
// What Redis can lose: replication is asynchronous, so a master that dies
// may take the fence H wrote with it. Its replica then holds O's fence (or
// none), and the writes after the fence are lost with it, in order. H's
// next script there is refused (the fence is not H's): H gives the lease
// up and whoever takes it next (a new epoch) fences again and reads the
// slots afresh. If O still runs, it may append to such a slot before
// that: its compare-and-set of the slot's position chains onto what the
// slot holds, and the next holder reads it, so nothing is doubled; what
// the dead master lost stays lost as without a lease (docs/redis-cluster.md). A
// counter that went back (its master lost the INCR) hands out an epoch a
// fence already holds: fenceScript refuses it, the holder raises the counter
// above it (raiseEpoch), gives the lease up and takes it again, higher.
// A fence that is missing refuses every append: only a take fences.

// FenceKey returns the key of the fence of one hash slot: the position key,
// ":fence:" and the slot's hash tag (SlotTag), e.g.
// binlog-outbox:position:app.outbox:fence:{a3}.
func FenceKey(positionKey string, slot int) string {
	return positionKey + ":fence:{" + SlotTag(slot) + "}"
}

// fenceScript raises the fence KEYS[1] to ARGV[1] ("<epoch>:<token>", epoch
// ARGV[2]) unless it holds that already, and reads the slot's position
// KEYS[2]: once fenced, the slot keeps it for this take, so the one step
// both fences and reads it. It never lowers a fence: one of an equal or
// higher epoch (a later take) is left alone, and so is a value that is not
// a fence. It returns {1, "", position ("": none)}, or {0, stored} without
// writing or reading.
var fenceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur then
    local e = tonumber(string.match(cur, '^(%d+):'))
    if e == nil or e >= tonumber(ARGV[2]) then return {0, cur} end
  end
  redis.call('SET', KEYS[1], ARGV[1])
end
local pos = redis.call('GET', KEYS[2])
if pos == false then pos = '' end
return {1, '', pos}
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

// ensureFenced fences every slot for the take of the lease this process
// holds, once per take, before the positions are read (position).
// When it fenced them it returns the slots' positions, read in the same
// step; nil when they were fenced before.
func (s *clusterAppend) ensureFenced(ctx context.Context) (map[int][]byte, error) {
	fence, epoch := s.cfg.Lease.currentFence()
	if fence == "" {
		return nil, fmt.Errorf("read the slot positions: %w", outbox.ErrLeaseLost)
	}
	if s.slots.fencedFor == fence {
		return nil, nil
	}
	stored, err := s.fenceAll(ctx, fence, epoch)
	if err != nil {
		return nil, err
	}
	s.slots.fencedFor = fence
	return stored, nil
}

// fenceAll raises the fence of every slot to fence, in pipelines (the
// cluster client sends each node its share), and returns the positions the
// slots hold, as readSlotPositions does. A slot fenced by an equal or
// higher epoch means the counter went back: it is raised past that epoch,
// and ErrLeaseLost makes the relay give the lease up and take it again.
func (s *clusterAppend) fenceAll(ctx context.Context, fence string, epoch int64) (map[int][]byte, error) {
	stored := map[int][]byte{}
	pending := make([]int, ClusterSlots)
	for slot := range pending {
		pending[slot] = slot
	}
	var refused []int
	var refusedBy []string
	// EVALSHA fails with NOSCRIPT on a node that has not cached the script
	// yet (the relay's ACL has no SCRIPT LOAD): one Run (EVAL) caches it
	// there, and the next pipeline retries the rest. A round per node at
	// most.
	for round := 0; len(pending) > 0; round++ {
		if round > 64 {
			return nil, fmt.Errorf("fence the hash slots %s:fence:{...}: the script is still not cached after %d rounds", s.cfg.PositionKey, round)
		}
		// The pipeline's own error is its first command's failure: each
		// command's is looked at below.
		cmds, _ := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, slot := range pending {
				fenceScript.EvalSha(ctx, p, s.fenceKeys(slot), fence, epoch)
			}
			return nil
		})
		var again []int
		cached := false
		for i, c := range cmds {
			slot := pending[i]
			cerr := c.Err()
			switch {
			case cerr == nil:
				res, _ := c.(*redis.Cmd).Slice()
				noteFence(slot, res, stored, &refused, &refusedBy)
			case !redis.HasErrorPrefix(cerr, "NOSCRIPT"):
				return nil, fmt.Errorf("fence hash slot %d (%s): %w", slot, FenceKey(s.cfg.PositionKey, slot), classify(cerr))
			case !cached:
				// Cache the script on this slot's node (EVAL).
				res, err := fenceScript.Run(ctx, s.client, s.fenceKeys(slot), fence, epoch).Slice()
				if err != nil {
					return nil, fmt.Errorf("fence hash slot %d (%s): %w", slot, FenceKey(s.cfg.PositionKey, slot), classify(err))
				}
				noteFence(slot, res, stored, &refused, &refusedBy)
				cached = true
			default:
				again = append(again, slot)
			}
		}
		pending = again
	}
	if len(refused) == 0 {
		return stored, nil
	}
	top := int64(-1)
	for _, cur := range refusedBy {
		if e := epochOf(cur); e > top {
			top = e
		}
	}
	if top < 0 {
		return nil, outbox.WithHint(fmt.Errorf("%w: %s holds %q, not a fence of binlog-outbox", outbox.ErrConfig, FenceKey(s.cfg.PositionKey, refused[0]), logging.Truncate(refusedBy[0], 60)),
			"the relay writes these keys itself; delete it (redis-cli -c DEL %s) and start the relay again", FenceKey(s.cfg.PositionKey, refused[0]))
	}
	if err := s.cfg.Lease.raiseEpoch(ctx, top); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %d hash slots (slot %d first) are fenced by a take of epoch %d, at least this one's (%d): the epoch counter went back; it is raised, and the next take fences them", outbox.ErrLeaseLost, len(refused), refused[0], top, epoch)
}

// fenceKeys are the keys of fenceScript for slot: its fence and position.
func (s *clusterAppend) fenceKeys(slot int) []string {
	return []string{FenceKey(s.cfg.PositionKey, slot), SlotPositionKey(s.cfg.PositionKey, slot)}
}

// noteFence records a fenceScript reply of slot: its position in stored,
// or the fence that refused the take.
func noteFence(slot int, res []any, stored map[int][]byte, refused *[]int, refusedBy *[]string) {
	if len(res) >= 3 {
		if code, _ := res[0].(int64); code == 1 {
			if pos, _ := res[2].(string); pos != "" {
				stored[slot] = []byte(pos)
			}
			return
		}
	}
	cur := ""
	if len(res) >= 2 {
		cur, _ = res[1].(string)
	}
	*refused = append(*refused, slot)
	*refusedBy = append(*refusedBy, cur)
}

// fenceOf reads a slot's fence, for a script whose reply was lost; nil when
// it is fence, ErrLeaseLost when it is another.
func (s *clusterAppend) fenceOf(ctx context.Context, slot int, fence string) error {
	cur, err := s.client.Get(ctx, FenceKey(s.cfg.PositionKey, slot)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the fence of hash slot %d: %w", slot, classify(err))
	}
	if cur != fence {
		return fenced(slot, cur)
	}
	return nil
}
