package redisstream

import (
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
