package redisadmin

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// ClusterPositions is what a Redis Cluster holds of one relay's position,
// as the commands beside the relay (status, position, verify) read it: the
// position key and the per-slot positions (redisstream.SlotPositionKey).
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
// master its share, so every master is read). Unlike redisstream.Sink.Position it
// judges nothing and writes nothing: a command that shows or repairs the
// position must see it also when the relay would refuse it. The slots are
// read first: a running relay writes them before the key, so a slot found
// ahead of the key was ahead of it when the key was read, not merely written
// in between.
func ReadClusterPositions(ctx context.Context, client redis.UniversalClient, positionKey string) (ClusterPositions, error) {
	slots, err := redisstream.ReadSlotPositions(ctx, client, positionKey)
	if err != nil {
		return ClusterPositions{}, err
	}
	base, err := client.Get(ctx, positionKey).Bytes()
	if errors.Is(err, redis.Nil) {
		base, err = nil, nil
	}
	if err != nil {
		return ClusterPositions{}, fmt.Errorf("read position %s: %w", positionKey, redisconn.Classify(err))
	}
	return ClusterPositions{Key: positionKey, Base: base, Slots: slots}, nil
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
		if b, err := position.Decode(p.Base); err == nil {
			if at, err := b.Point(); err == nil {
				base = &at
			}
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
		sp := &SlotPosition{Slot: slot, Key: redisstream.SlotPositionKey(p.Key, slot), Position: b}
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
