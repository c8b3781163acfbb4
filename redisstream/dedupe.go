package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// DefaultDedupeKeyPrefix is the prefix of the keys that remember published
// message ids. The poller appends the source ("<database>.<table>:"), because
// message ids derived from outbox ids repeat across tables.
const DefaultDedupeKeyPrefix = "binlog-outbox:dedupe:"

// Dedupe configures the effectively-once option of Publish: before appending
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
	// DefaultDedupeKeyPrefix). It must name the source table.
	KeyPrefix string
}

// publishScript appends entries without a position: in poll mode the
// database transaction that marks the rows is the position. Like
// appendScript it runs every check that can fail before the first write.
//
// KEYS are the streams, then (with deduplication) one key per entry.
// ARGV[1] dedupe window in milliseconds, ARGV[2] number of streams, then per
// entry: stream index into KEYS, dedupe key index into KEYS (0: none), number
// of field/value arguments, the arguments. It returns how many entries it
// appended; the others were duplicates.
var publishScript = redis.NewScript(`
local nstreams = tonumber(ARGV[2])
for i = 1, nstreams do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. t .. ', not a stream')
  end
end
local added = 0
local i = 3
local n = #ARGV
while i <= n do
  local k = tonumber(ARGV[i])
  local d = tonumber(ARGV[i + 1])
  local c = tonumber(ARGV[i + 2])
  if d == 0 or redis.call('SET', KEYS[d], '1', 'NX', 'PX', ARGV[1]) then
    redis.call('XADD', KEYS[k], '*', unpack(ARGV, i + 3, i + 2 + c))
    added = added + 1
  end
  i = i + 3 + c
end
return added
`)

// Publish appends events to their streams (dead letters to the dead-letter
// stream) in one script, without touching the stored position: poll mode
// keeps its progress in the database. With d.Window > 0 it skips the events
// whose message id it appended within the window. It returns how many events
// it appended. After an error the events may or may not have been appended
// (the reply can be lost); the caller publishes them again, and only the
// deduplication keeps that from appending them twice.
//
// Entries have exactly the fields Append writes, so a consumer cannot tell
// which mode produced them.
func (s *Sink) Publish(ctx context.Context, events []outbox.Event, d Dedupe) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if d.Window < 0 {
		return 0, fmt.Errorf("%w: redisstream: negative dedupe window %s", outbox.ErrConfig, d.Window)
	}
	if d.Window > 0 && d.Window < time.Millisecond {
		d.Window = time.Millisecond
	}
	if d.KeyPrefix == "" {
		d.KeyPrefix = DefaultDedupeKeyPrefix
	}
	s.buildPublish(events, d)
	n, err := publishScript.Run(ctx, s.client, s.keys, s.args...).Int()
	if err != nil {
		return 0, fmt.Errorf("publish %d events: %w", len(events), classify(err))
	}
	return n, nil
}

// buildPublish fills s.keys and s.args for publishScript.
func (s *Sink) buildPublish(events []outbox.Event, d Dedupe) {
	clear(s.keyIdx)
	s.keys = s.keys[:0]
	s.args = append(s.args[:0], strconv.FormatInt(d.Window.Milliseconds(), 10), 0)
	// The streams come first in KEYS, so each event's stream index is
	// known before the dedupe keys are added.
	streamIdx := make([]int, len(events))
	for i := range events {
		streamIdx[i] = s.streamIndex(&events[i])
	}
	s.args[1] = len(s.keys)
	for i := range events {
		e := &events[i]
		dedupe := 0
		if d.Window > 0 {
			s.keys = append(s.keys, d.KeyPrefix+e.MessageID)
			dedupe = len(s.keys)
		}
		countAt := len(s.args) + 2
		s.args = append(s.args, streamIdx[i], dedupe, 0)
		s.args = s.appendFields(s.args, e)
		s.args[countAt] = len(s.args) - countAt - 1
	}
}
