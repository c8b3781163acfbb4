package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// ErrBackfillMoved means the progress key of a backfill no longer holds
// the id the batch was read after: another backfill of the same streams
// and window ran meanwhile. Nothing was written.
var ErrBackfillMoved = errors.New("the backfill's progress moved meanwhile")

// Backfill appends events, prepared by Prepare and in id order, to the
// streams the sink's template names for them, and replaces the backfill's
// progress under key, prev (0 for none), with last, in one script: Redis
// keeps the entries and the progress together or neither. The script
// writes only when key still holds prev, else it returns ErrBackfillMoved
// with nothing written; so a batch whose reply was lost, read again after
// the stored progress, is appended once. Events the sink would dead-letter
// (Event.Invalid) are refused before anything is written: a backfill
// never writes the dead-letter stream, which the relay owns.
func (s *Sink) Backfill(ctx context.Context, key string, events []outbox.Event, prev, last uint64) error {
	keys := []string{key}
	args := []any{strconv.FormatUint(prev, 10), strconv.FormatUint(last, 10)}
	for i := range events {
		e := &events[i]
		if e.Invalid != "" {
			return fmt.Errorf("backfill of row %d: it cannot be delivered (%s)", e.OutboxID, e.Invalid)
		}
		keys = append(keys, s.template.Render(e))
		start := len(args)
		args = append(args, 0)
		args = s.appendFields(args, e)
		args[start] = len(args) - start - 1
	}
	res, err := backfillScript.Run(ctx, s.client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("backfill of rows up to %d: %w", last, redisconn.Classify(err))
	}
	if res == 0 {
		return fmt.Errorf("backfill of rows after %d: %w", prev, ErrBackfillMoved)
	}
	return nil
}

// backfillScript appends one entry per KEYS[2..] and sets the progress
// KEYS[1] from ARGV[1] (the id it must hold, "0" for none) to ARGV[2], when
// KEYS[1] holds ARGV[1]; every check that can fail runs before the first
// write. Then for each stream: the number of its field/value arguments,
// and those. It returns 0 when the progress moved (nothing written), 1
// once everything is written.
var backfillScript = redis.NewScript(aclCheckLua + `
local denied = deny('GET', '', KEYS[1]) or deny('SET', '', KEYS[1], ARGV[2])
if denied then return denied end
for k = 2, #KEYS do
  denied = deny('TYPE', '', KEYS[k]) or deny('XADD', '', KEYS[k], '*', 'f', 'v')
  if denied then return denied end
  local t = redis.call('TYPE', KEYS[k])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[k] .. ' holds a ' .. t .. ', not a stream')
  end
end
local cur = redis.call('GET', KEYS[1])
if (cur or '0') ~= ARGV[1] then return 0 end
local i = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[i])
  redis.call('XADD', KEYS[k], '*', unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// Template returns the sink's parsed stream template.
func (s *Sink) Template() *entry.Template { return s.template }
