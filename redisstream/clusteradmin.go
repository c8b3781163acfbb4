package redisstream

import (
	"context"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// ClusterPositions is what a Redis Cluster holds of one relay's position,
// as the commands beside the relay (status, position, verify) read it: the
// position key and the per-slot positions (SlotPositionKey).
type ClusterPositions struct {
	// Key is the position key.
	Key string
	// Base is the position key's value; nil when it holds none.
	Base []byte
	// Slots is the value of each slot's position, for the slots that hold
	// one.
	Slots map[int][]byte
}

// ReadClusterPositions reads the position key and the position of every
// hash slot (16384 GETs in one pipeline: the cluster client sends each
// master its share, so every master is read). Unlike Sink.Position it
// judges nothing and writes nothing: a command that shows or repairs the
// position must see it also when the relay would refuse it. The slots are
// read first: a running relay writes them before the key, so a slot found
// ahead of the key was ahead of it when the key was read, not merely written
// in between.
func ReadClusterPositions(ctx context.Context, client redis.UniversalClient, positionKey string) (ClusterPositions, error) {
	s := &base{client: client, cfg: Config{PositionKey: positionKey}}
	slots, err := s.readSlotPositions(ctx)
	if err != nil {
		return ClusterPositions{}, err
	}
	base, err := s.storedPosition(ctx)
	if err != nil {
		return ClusterPositions{}, err
	}
	return ClusterPositions{Key: positionKey, Base: base, Slots: slots}, nil
}

// holdScript compare-and-sets the position key KEYS[1] from ARGV[1] ("":
// none) to ARGV[2] and returns {1, intent} (the value of the intent
// KEYS[2], "" for none) read in the same step; {0, ""} without writing
// when the position is not ARGV[1].
var holdScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then return {0, ''} end
redis.call('SET', KEYS[1], ARGV[2])
return {1, redis.call('GET', KEYS[2]) or ''}
`)

// HoldClusterPosition marks the position of a Redis Cluster as repair's:
// it compare-and-sets the position key from prev to mark (a position
// marked by repair, position.Binlog.HeldBy) and then sets the position of
// every slot the intent names to mark. A relay without a lease writes
// only the slots of the intent (fence.go, rule 1), which it can no longer
// extend once the key is marked (intentScript): from then on each of its
// slot scripts finds the mark and stops it, so that nothing it appends
// comes after repair read the streams. held is false, and nothing is
// written, when the position key is not prev.
func HoldClusterPosition(ctx context.Context, client redis.UniversalClient, positionKey string, prev, mark []byte) (held bool, err error) {
	res, err := holdScript.Run(ctx, client, []string{positionKey, IntentKey(positionKey)}, string(prev), string(mark)).Slice()
	if err != nil {
		return false, fmt.Errorf("mark the position %s: %w", positionKey, redisconn.Classify(err))
	}
	if len(res) < 2 {
		return false, fmt.Errorf("mark the position %s: unexpected script reply %v", positionKey, res)
	}
	if code, _ := res[0].(int64); code != 1 {
		return false, nil
	}
	raw, _ := res[1].(string)
	slots, err := parseIntent(raw)
	if err != nil {
		return true, fmt.Errorf("mark the slots of the intent %s (%q): %w", IntentKey(positionKey), raw, err)
	}
	if len(slots) == 0 {
		return true, nil
	}
	if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range slots {
			p.Set(ctx, SlotPositionKey(positionKey, slot), mark, 0)
		}
		return nil
	}); err != nil {
		return true, fmt.Errorf("mark the %d slot positions of the intent %s: %w", len(slots), IntentKey(positionKey), redisconn.Classify(err))
	}
	return true, nil
}

// SlotPosition is one slot's position in a SlotSummary.
type SlotPosition struct {
	Slot int
	// Key is the slot's position key.
	Key string
	// Position is the stored position.
	Position position.Binlog
}

// SlotSummary sums up the per-slot positions against the position key.
type SlotSummary struct {
	// Count is how many slots hold a position.
	Count int
	// Lowest and Highest are the lowest and highest of the slots'
	// positions that are positions of this relay; nil when none is.
	Lowest, Highest *SlotPosition
	// Ahead are the slots (in order) past the position key: a relay stopped
	// between the scripts of one batch; at its next start they skip what
	// they hold. Without a position key, every slot position is counted
	// here.
	Ahead []int
	// Foreign are the slots (in order) whose value is no position of this
	// relay: it does not decode as one, or it cannot be compared with the
	// position key (another server's, or another kind of position). A
	// relay started on them is fenced there.
	Foreign []int
}

// Summary compares every slot's position with the position key.
func (p ClusterPositions) Summary() SlotSummary {
	sum := SlotSummary{Count: len(p.Slots)}
	var base *position.Point
	if p.Base != nil {
		if at, err := decodePoint(p.Base); err == nil {
			base = &at
		}
	}
	slots := make([]int, 0, len(p.Slots))
	for slot := range p.Slots {
		slots = append(slots, slot)
	}
	sort.Ints(slots)
	var lowAt, highAt position.Point
	for _, slot := range slots {
		raw := p.Slots[slot]
		b, err := position.Decode(raw)
		if err != nil {
			sum.Foreign = append(sum.Foreign, slot)
			continue
		}
		at, err := b.Point()
		if err != nil {
			sum.Foreign = append(sum.Foreign, slot)
			continue
		}
		if base != nil {
			o, err := position.Order(at, *base)
			if err != nil {
				sum.Foreign = append(sum.Foreign, slot)
				continue
			}
			if o > 0 {
				sum.Ahead = append(sum.Ahead, slot)
			}
		} else if p.Base == nil {
			sum.Ahead = append(sum.Ahead, slot)
		}
		sp := &SlotPosition{Slot: slot, Key: SlotPositionKey(p.Key, slot), Position: b}
		if sum.Lowest == nil {
			sum.Lowest, sum.Highest, lowAt, highAt = sp, sp, at, at
			continue
		}
		if o, err := position.Order(at, lowAt); err == nil && o < 0 {
			sum.Lowest, lowAt = sp, at
		}
		if o, err := position.Order(at, highAt); err == nil && o > 0 {
			sum.Highest, highAt = sp, at
		}
	}
	return sum
}

// DeleteSlotPositions deletes the slot record (SlotRecordKey) and the
// intent (IntentKey), then the
// position of every hash slot (16384 DELs in one pipeline, each sent to the
// slot's master), and returns how many slot positions existed.
// binlog-outbox position set and reset run it, so that a restarted relay
// finds no slot ahead of the new position nor a slot position without a
// position key; a running relay that expects one of the deleted positions
// is fenced at its next script there.
func DeleteSlotPositions(ctx context.Context, client redis.UniversalClient, positionKey string) (int, error) {
	// The record first: left behind the slot positions it describes, it
	// would make the next start read again from where they were.
	if err := client.Del(ctx, SlotRecordKey(positionKey)).Err(); err != nil {
		return 0, fmt.Errorf("delete the slot record %s: %w", SlotRecordKey(positionKey), redisconn.Classify(err))
	}
	if err := client.Del(ctx, IntentKey(positionKey)).Err(); err != nil {
		return 0, fmt.Errorf("delete the intent %s: %w", IntentKey(positionKey), redisconn.Classify(err))
	}
	cmds, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for slot := range ClusterSlots {
			p.Del(ctx, SlotPositionKey(positionKey, slot))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete the slot positions %s:{...}: %w", positionKey, redisconn.Classify(err))
	}
	n := 0
	for _, c := range cmds {
		n += int(c.(*redis.IntCmd).Val())
	}
	return n, nil
}
