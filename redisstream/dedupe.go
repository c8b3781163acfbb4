package redisstream

import (
	"context"
	"fmt"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Dedupe configures the effectively-once option of Config: before appending
// an entry, the script records its message id under KeyPrefix+message_id with
// SET NX PX Window, and skips the entry when the key already exists. Check,
// record and XADD happen in one script, so Redis applies them together.
type Dedupe struct {
	// Window is how long a message id is remembered; 0 turns deduplication
	// off. It must exceed the longest time a row can stay unmarked after it
	// was published (a crash, then the relay down for a while): a row
	// re-published after the window is appended twice.
	Window time.Duration
	// KeyPrefix is prepended to the message id (default
	// DefaultDedupeKeyPrefix). It must name the source table: KeysFor
	// gives the prefix both modes use.
	KeyPrefix string
	// BySource, for a relay of several tables, replaces KeyPrefix with the
	// prefix of each event's own table (KeysFor(e.Database, e.Table)): the
	// keys a relay of that table alone, in either mode, uses.
	BySource bool
}

// key returns the dedupe key of e.
func (d *Dedupe) key(e *outbox.Event) string {
	return d.prefix(e) + e.MessageID
}

// slottedKey is key in the Redis Cluster slot of tag, the slot of the
// event's stream, so that one script sets both.
func (d *Dedupe) slottedKey(e *outbox.Event, tag string) string {
	return d.prefix(e) + "{" + tag + "}:" + e.MessageID
}

func (d *Dedupe) prefix(e *outbox.Event) string {
	if d.BySource {
		return KeysFor(e.Database, e.Table, "").DedupePrefix
	}
	return d.KeyPrefix
}

// Publish appends events to their streams (dead letters to the dead-letter
// stream) in one script, without touching the stored position: poll mode
// keeps its progress in the database. With a dedupe window (Config.Dedupe)
// it skips the events whose message id was appended within the window. It
// returns how many events it appended. After an error the events may or may not have been appended
// (the reply can be lost); the caller publishes them again, and only the
// deduplication keeps that from appending them twice.
//
// Entries have exactly the fields Append writes, so a consumer cannot tell
// which mode produced them.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if s.cfg.Cluster {
		return s.publishSlots(ctx, events)
	}
	return s.publish(ctx, events)
}

// publish runs the script of Publish for events whose keys share a slot
// (all of them on a standalone Redis).
func (s *Sink) publish(ctx context.Context, events []outbox.Event) (int, error) {
	s.build(events, "", nil, nil, "")
	res, err := appendScript.Run(ctx, s.client, s.keys, s.args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("publish %d events: %w", len(events), s.scriptError(err))
	}
	if len(res) != 3 {
		return 0, fmt.Errorf("publish: unexpected script reply %v", res)
	}
	s.ran()
	n, _ := res[2].(int64)
	return int(n), nil
}
