package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// Keys names every Redis key the relay writes for one outbox table, besides
// the streams. Everything that builds one of these names asks Keys, so a
// position written by one command is found by the next.
type Keys struct {
	// Position holds the binlog mode's position (binlog-outbox position).
	Position string
	// Mode records the mode the table is relayed in, so that auto mode
	// never switches by itself.
	Mode string
	// Lease holds the lease of the position: the one relay of the position
	// that reads holds it, the others wait (binlog mode, --lease). It is
	// named after the position key, so that relays sharing a position share
	// the lease, and a hash tag in the position key holds for it too.
	Lease string
	// DedupePrefix prefixes the message ids the dedupe window remembers;
	// both modes use it, so a switch skips what the other mode appended.
	DedupePrefix string
}

// KeyPrefix starts every key the relay writes other than the streams.
const KeyPrefix = "binlog-outbox:"

// DefaultDedupeKeyPrefix is the prefix of the keys that remember published
// message ids, before the source ("<database>.<table>:"): message ids
// derived from outbox ids repeat across tables.
const DefaultDedupeKeyPrefix = KeyPrefix + "dedupe:"

// KeysFor returns the keys of the outbox table database.table. A non-empty
// positionKey (--position-key) replaces the default position key.
func KeysFor(database, table, positionKey string) Keys {
	source := database + "." + table
	k := Keys{
		Position:     KeyPrefix + "position:" + source,
		Mode:         KeyPrefix + "mode:" + source,
		DedupePrefix: DefaultDedupeKeyPrefix + source + ":",
	}
	if positionKey != "" {
		k.Position = positionKey
	}
	k.Lease = k.Position + ":lease"
	return k
}

// SlotPositionKey returns the key of a relay's position in one hash slot of a
// Redis Cluster (--redis-cluster): the position key, a colon and the slot's
// hash tag (SlotTag), e.g. binlog-outbox:position:app.outbox:{a3}. The
// append script of the slot's streams checks and writes it with them.
func SlotPositionKey(positionKey string, slot int) string {
	return positionKey + ":{" + SlotTag(slot) + "}"
}

// ModeStore keeps the mode a table is relayed in (binlog or poll) under
// Keys.Mode, so that auto mode never switches by itself.
type ModeStore struct {
	client redis.UniversalClient
	key    string
}

// NewModeStore returns the store of the mode kept under key.
func NewModeStore(client redis.UniversalClient, key string) *ModeStore {
	return &ModeStore{client: client, key: key}
}

// Load returns the stored mode, or "" when none is stored.
func (s *ModeStore) Load(ctx context.Context) (string, error) {
	v, err := s.client.Get(ctx, s.key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", s.key, redisconn.Classify(err))
	}
	return v, nil
}

// Save stores mode, and forgets the prepared switch (Prepare).
func (s *ModeStore) Save(ctx context.Context, mode string) error {
	if err := s.client.Set(ctx, s.key, mode, 0).Err(); err != nil {
		return fmt.Errorf("SET %s: %w", s.key, redisconn.Classify(err))
	}
	// Another command than the SET: the two keys may lie in different
	// slots of a Redis Cluster.
	if err := s.client.Del(ctx, s.preparedKey()).Err(); err != nil {
		return fmt.Errorf("DEL %s: %w", s.preparedKey(), redisconn.Classify(err))
	}
	return nil
}

// preparedKey holds the mode the documented switch prepared the table for.
func (s *ModeStore) preparedKey() string { return s.key + ":prepared" }

// Prepared returns the mode the documented switch prepared, "" when none.
func (s *ModeStore) Prepared(ctx context.Context) (string, error) {
	v, err := s.client.Get(ctx, s.preparedKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", s.preparedKey(), redisconn.Classify(err))
	}
	return v, nil
}

// Prepare records that the documented switch to mode was prepared; the
// next Save of that mode forgets it.
func (s *ModeStore) Prepare(ctx context.Context, mode string) error {
	if err := s.client.Set(ctx, s.preparedKey(), mode, 0).Err(); err != nil {
		return fmt.Errorf("SET %s: %w", s.preparedKey(), redisconn.Classify(err))
	}
	return nil
}

// Key returns the key the mode is kept under.
func (s *ModeStore) Key() string { return s.key }

// SlotRecordKey is the hash, in the position key's own slot, that records
// what the relay last wrote to each slot, written with the position key in
// one script (casScript): a slot whose position is older than its record,
// or missing while the record says it held none before, lost those writes
// (a failover with asynchronous replication), and a relay started after it
// reads again from there even when the master of the position key kept
// everything. binlog-outbox position set and reset delete it first.
func SlotRecordKey(positionKey string) string {
	return positionKey + ":slots:{" + SlotTag(Slot(positionKey)) + "}"
}

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key, or of its hash tag (what stands between the first
// "{" and the next "}", when that is not empty), modulo 16384.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) % ClusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), Redis
// Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     [ClusterSlots]string
)

// SlotTag returns the hash tag the relay's keys of slot carry: the first of
// the numbers 0, 1, 2, ... written in base 36 (0-9, a-z) whose CRC16 falls in
// the slot. Keys named with it are found again by every later version, so
// the rule must never change.
func SlotTag(slot int) string {
	slotTagsOnce.Do(func() {
		left := ClusterSlots
		for n := uint64(0); left > 0; n++ {
			tag := strconv.FormatUint(n, 36)
			if s := crc16(tag) % ClusterSlots; slotTags[s] == "" {
				slotTags[s] = tag
				left--
			}
		}
	})
	return slotTags[slot]
}
