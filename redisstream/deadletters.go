package redisstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// checkDeadLetterStream refuses a template that renders the dead-letter
// stream's name whatever the events hold: one without placeholders, or with
// {partition} only, whose every value is known at start. Events there would
// mix with the dead letters. Placeholders filled from the rows cannot be
// decided at start; Sink.Prepare dead-letters such an event instead.
func checkDeadLetterStream(t *entry.Template, deadLetter string) error {
	if !t.AlwaysNames(deadLetter) {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: --stream %q names the dead-letter stream %s (--dead-letter-stream), and events would mix with the dead letters", outbox.ErrConfig, t, deadLetter),
		"give the events and the dead letters different streams: change --stream, or set --dead-letter-stream to a stream no event goes to, e.g. --dead-letter-stream %s:dead-letter", t)
}

// deadLetterCollision is the reason of a dead letter whose event's stream
// is the dead-letter stream.
func deadLetterCollision(t *entry.Template, deadLetter string) string {
	return fmt.Sprintf("its stream under --stream %s is the dead-letter stream %s; set --dead-letter-stream to a stream no event goes to, then republish it", t, deadLetter)
}

// StreamOf returns the stream the template names for e, whether or not e
// is a dead letter: where a replayed row goes, and what an old dead letter
// without entry.FieldTargetStream was meant for under the current template.
func (s *Sink) StreamOf(e *outbox.Event) string { return s.template.Render(e) }

// DeadLetterStream returns the configured dead-letter stream.
func (s *Sink) DeadLetterStream() string { return s.cfg.DeadLetterStream }

// ErrReplayCrossSlot means a replay would have to write two hash slots of
// a Redis Cluster in one step, which no script or transaction can.
var ErrReplayCrossSlot = outbox.NewConfigError("the dead-letter stream and the target stream are in different hash slots")

// ReplayOutcome is what Replay did with one row.
type ReplayOutcome int

// Outcomes of Replay.
const (
	// ReplayGone: none of the dead-letter entries was there any more (a
	// replay or purge before this one removed them); nothing was written.
	ReplayGone ReplayOutcome = iota
	// ReplayDelivered: the event was appended to its stream and the
	// dead-letter entries removed, in one step.
	ReplayDelivered
	// ReplayRequeued: the row is still undeliverable with a new reason: a
	// dead letter with it replaced the old entries, in one step.
	ReplayRequeued
)

// Replay appends e, prepared for the sink's format, to its stream (the
// dead-letter stream when e is still invalid, with its new reason) and
// deletes the dead-letter entries ids of the row, in one script.
//
// Exactly once: the script appends only when at least one of ids is still
// in the dead-letter stream, and deletes those in the same step; Redis runs
// a script atomically and every check that can fail runs before its first
// write, so the append and the deletion happen together or not at all. An
// entry can be deleted once only, hence each dead letter gives at most one
// append, however often Replay runs, concurrently too, or after an error
// whose outcome is unknown (the run that follows finds the entries gone:
// ReplayGone). Until the step happens the dead letter stays, so nothing is
// lost. A Redis Cluster runs a script in one hash slot: when the two
// streams are in different slots Replay refuses with ErrReplayCrossSlot
// before writing anything.
func (s *Sink) Replay(ctx context.Context, e *outbox.Event, ids []string) (ReplayOutcome, string, error) {
	if len(ids) == 0 {
		return ReplayGone, "", errors.New("replay: no dead-letter entry given")
	}
	s.Prepare(e)
	target := s.streamKey(e)
	dead := s.cfg.DeadLetterStream
	if s.cfg.Cluster && Slot(target) != Slot(dead) {
		return ReplayGone, "", outbox.WithHint(fmt.Errorf("replay of row %d to %s: %w (%s is in slot %d, %s in slot %d)", e.OutboxID, target, ErrReplayCrossSlot, target, Slot(target), dead, Slot(dead)),
			"on Redis Cluster, replay needs --dead-letter-stream in the slot of the stream it replays to (a dead-letter stream whose hash tag is that stream's name, e.g. '{%s}:dead-letter', when the rows go to one stream); otherwise insert the row again as a new one, which the relay relays", target)
	}
	groups := s.cfg.Groups
	if target == dead {
		groups = nil // the dead-letter stream gets none, as in the append script
	}
	args := []any{len(ids), len(groups)}
	due, delayed := s.cfg.Format.Delayed(e)
	if delayed {
		args[1], groups = "z", nil
	}
	for _, id := range ids {
		args = append(args, id)
	}
	for _, g := range groups {
		args = append(args, g)
	}
	if delayed {
		args = append(args, due, e.Envelope)
	} else {
		args = s.appendFields(args, e)
	}
	res, err := replayScript.Run(ctx, s.client, []string{dead, target}, args...).Slice()
	if err != nil {
		return ReplayGone, "", fmt.Errorf("replay of row %d to %s: %w", e.OutboxID, target, redisconn.Classify(err))
	}
	if len(res) != 2 {
		return ReplayGone, "", fmt.Errorf("replay of row %d: unexpected reply %v", e.OutboxID, res)
	}
	if n, _ := res[0].(int64); n == 0 {
		return ReplayGone, "", nil
	}
	id, _ := res[1].(string)
	if e.Invalid != "" {
		return ReplayRequeued, id, nil
	}
	return ReplayDelivered, id, nil
}

// replayScript appends one entry to KEYS[2] and deletes the dead-letter
// entries of its row from KEYS[1] when at least one of them is still there
// (Sink.Replay). Every check that can fail runs before the first write.
// ARGV[1] the number N of dead-letter entry IDs, ARGV[2] the number G of
// consumer groups the target stream must have, then the N IDs, the G
// group names, and the entry's field/value pairs. ARGV[2] "z" makes KEYS[2]
// a delayed set (entry.DelayedSetSuffix) instead: the IDs are followed by the
// member's score and the member, which it adds (ZADD NX). It returns {0, ""}
// when none of the entries is there (nothing written), else {1, new entry
// ID} ({1, ""} for a delayed set).
var replayScript = redis.NewScript(aclCheckLua + `
local n = tonumber(ARGV[1])
local z = ARGV[2] == 'z'
local ng = 0
if not z then ng = tonumber(ARGV[2]) end
local denied = deny('XRANGE', '', KEYS[1], '-', '+') or deny('XDEL', '', KEYS[1], '0-1') or deny('TYPE', '', KEYS[2])
if not denied then
  if z then
    denied = deny('ZADD', '', KEYS[2], 'NX', '0', 'm')
  else
    denied = deny('XADD', '', KEYS[2], '*', 'f', 'v')
  end
end
if not denied and ng > 0 then
  denied = deny('XINFO', 'GROUPS', KEYS[2]) or deny('XGROUP', 'CREATE', KEYS[2], 'g', '0', 'MKSTREAM')
end
if denied then return denied end
local t = redis.call('TYPE', KEYS[2])['ok']
if z then
  if t ~= 'zset' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a ' .. t .. ', not the sorted set of delayed messages')
  end
elseif t ~= 'stream' and t ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a ' .. t .. ', not a stream')
end
local present = {}
for i = 3, 2 + n do
  if #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) > 0 then
    present[#present + 1] = ARGV[i]
  end
end
if #present == 0 then return {0, ''} end
if ng > 0 then
  local have = {}
  if t == 'stream' then
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
      for j = 1, #g, 2 do
        if g[j] == 'name' then have[g[j + 1]] = true end
      end
    end
  end
  for j = 3 + n, 2 + n + ng do
    if not have[ARGV[j]] then
      redis.call('XGROUP', 'CREATE', KEYS[2], ARGV[j], '0', 'MKSTREAM')
      have[ARGV[j]] = true
    end
  end
end
local id = ''
if z then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[3 + n], ARGV[4 + n])
else
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3 + n + ng))
end
redis.call('XDEL', KEYS[1], unpack(present))
return {1, id}
`)
