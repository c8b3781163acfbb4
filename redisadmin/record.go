package redisadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// Record says what the binlog relay of a position is: the tables it follows,
// how it writes their entries, and which relay last started on it. The
// position alone cannot tell a first start from a lost position, a second
// relay of a table from a restart, or an admin command's wrong --stream
// from the relay's own: the record, kept beside the position, can. A relay
// writes it at every start; the commands that append entries beside the
// relay use it (and refuse flags that contradict it); a relay of another
// position refuses the tables and streams of this one.
type Record struct {
	// PositionKey is the position the record is of.
	PositionKey string `json:"position_key"`
	// Tables are the --table values as the relay resolved them: the
	// server's database.table, or patterns.
	Tables []string `json:"tables"`
	// Stream, Partitions, DeadLetterStream, Format and Groups are the
	// entries' settings in force (defaults applied): --stream,
	// --partitions, --dead-letter-stream, the format flags and
	// --ensure-group.
	Stream           string       `json:"stream"`
	Partitions       int          `json:"partitions"`
	DeadLetterStream string       `json:"dead_letter_stream"`
	Format           entry.Format `json:"format"`
	Groups           []string     `json:"groups,omitempty"`
	// ServerID is the binlog server id the relay reads with, whose claim
	// (redisstream.ServerIDKey) tells whether it is reading now.
	ServerID uint32 `json:"server_id"`
	// Holder names the relay process that wrote the record (host/pid).
	Holder string `json:"holder"`
	// Since is when a relay first recorded itself for the position;
	// UpdatedAt when the record was last written.
	Since     time.Time `json:"since"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RecordIndexKey is the set of the position keys that have a record: how a
// relay of another position, and a command that knows its table only, find
// them. A few members a Redis; read whole.
const RecordIndexKey = redisstream.KeyPrefix + "relays"

// RecordKey is the key of the record of the position at positionKey, beside
// it (in its hash slot when it carries a hash tag).
func RecordKey(positionKey string) string { return positionKey + ":record" }

// ReadRecord returns the record of the position at positionKey; ok false
// when there is none.
func ReadRecord(ctx context.Context, client redis.UniversalClient, positionKey string) (r Record, ok bool, err error) {
	key := RecordKey(positionKey)
	raw, err := client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("GET %s: %w", key, redisconn.Classify(err))
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return Record{}, false, fmt.Errorf("the relay's record at %s %q: %w", key, logging.Truncate(string(raw), 200), err)
	}
	return r, true, nil
}

// ListRecords returns the records of every position RecordIndexKey names,
// sorted by position key; a member whose record is gone is left out.
func ListRecords(ctx context.Context, client redis.UniversalClient) ([]Record, error) {
	keys, err := client.SMembers(ctx, RecordIndexKey).Result()
	if err != nil {
		return nil, fmt.Errorf("SMEMBERS %s: %w", RecordIndexKey, redisconn.Classify(err))
	}
	slices.Sort(keys)
	var out []Record
	for _, k := range keys {
		r, ok, err := ReadRecord(ctx, client, k)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// WriteRecord stores r under RecordKey(r.PositionKey) and names its position
// in RecordIndexKey. Two commands: the keys may lie in different hash slots.
func WriteRecord(ctx context.Context, client redis.UniversalClient, r Record) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the relay's record: %w", err)
	}
	key := RecordKey(r.PositionKey)
	if err := client.Set(ctx, key, raw, 0).Err(); err != nil {
		return fmt.Errorf("SET %s: %w", key, redisconn.Classify(err))
	}
	if err := client.SAdd(ctx, RecordIndexKey, r.PositionKey).Err(); err != nil {
		return fmt.Errorf("SADD %s: %w", RecordIndexKey, redisconn.Classify(err))
	}
	return nil
}

// DeleteRecord deletes the record of the position at positionKey and its
// name in RecordIndexKey.
func DeleteRecord(ctx context.Context, client redis.UniversalClient, positionKey string) error {
	key := RecordKey(positionKey)
	if err := client.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("DEL %s: %w", key, redisconn.Classify(err))
	}
	if err := client.SRem(ctx, RecordIndexKey, positionKey).Err(); err != nil {
		return fmt.Errorf("SREM %s: %w", RecordIndexKey, redisconn.Classify(err))
	}
	return nil
}

// Reading says whether the relay of the record reads now, and who it is:
// the relay holding the position's lease, or (a relay without the lease)
// the one whose claim on the record's server id names this position. ""
// when neither: no relay of the position runs.
func (r Record) Reading(ctx context.Context, client redis.UniversalClient) (holder string, err error) {
	lease := redisstream.KeysFor("", "", r.PositionKey).Lease
	info, _, ok, err := redisstream.ReadLease(ctx, client, lease)
	if err != nil {
		return "", err
	}
	if ok {
		return "the relay " + info.String() + " (holding the lease " + lease + ")", nil
	}
	if r.ServerID == 0 {
		return "", nil
	}
	claim, ok, err := redisstream.ReadServerIDClaim(ctx, client, r.ServerID)
	if err != nil || !ok || claim.PositionKey != r.PositionKey {
		return "", err
	}
	return claim.String() + " (reading with server id " + fmt.Sprint(r.ServerID) + ")", nil
}
