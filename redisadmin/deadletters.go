package redisadmin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/redis/go-redis/v9"
)

// DeadLetter is one entry of the dead-letter stream as the dead-letters
// commands read it.
type DeadLetter struct {
	// ID is the entry's ID in the dead-letter stream.
	ID string
	// OutboxID is the row's id; HasOutboxID is false when the entry has no
	// outbox_id field that parses (a row whose id was no unsigned integer).
	OutboxID    uint64
	HasOutboxID bool
	MessageID   string
	Reason      string
	// TargetStream is the stream the row was meant for, "" for an entry
	// written before dead letters carried it.
	TargetStream string
	// Time is when the entry was appended, from its ID.
	Time time.Time
	// Values are all the entry's fields.
	Values map[string]any
}

// ParseDeadLetter reads the fields of a dead-letter entry.
func ParseDeadLetter(m redis.XMessage) DeadLetter {
	str := func(name string) string { s, _ := m.Values[name].(string); return s }
	d := DeadLetter{ID: m.ID, MessageID: str(entry.FieldMessageID), Reason: str(entry.FieldReason), TargetStream: str(entry.FieldTargetStream), Values: m.Values}
	if id, err := strconv.ParseUint(str(entry.FieldOutboxID), 10, 64); err == nil && id > 0 {
		d.OutboxID, d.HasOutboxID = id, true
	}
	ms, _, _ := strings.Cut(m.ID, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		d.Time = time.UnixMilli(n).UTC()
	}
	return d
}

// PurgeDeadLetters deletes the entries of the dead-letter stream key
// appended before before (XTRIM MINID, exact), and returns how many.
func PurgeDeadLetters(ctx context.Context, client redis.UniversalClient, key string, before time.Time) (int64, error) {
	n, err := client.XTrimMinID(ctx, key, strconv.FormatInt(before.UnixMilli(), 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("XTRIM %s MINID: %w", key, redisconn.Classify(err))
	}
	return n, nil
}
