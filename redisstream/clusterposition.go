package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// ReadSlotPositions reads the position of every hash slot of the position
// at positionKey (SlotPositionKey; 16384 GETs in one pipeline: the cluster
// client sends each master its share), leaving out the slots that hold
// none. It judges nothing: redisadmin.ReadClusterPositions shows them.
func ReadSlotPositions(ctx context.Context, client redis.UniversalClient, positionKey string) (map[int][]byte, error) {
	s := &base{client: client, cfg: Config{PositionKey: positionKey}}
	return s.readSlotPositions(ctx)
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
