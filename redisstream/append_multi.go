package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// The MULTI append path. The append script makes Redis convert every
// argument and reply of each XADD between Lua and Redis, which costs it
// more CPU per entry than a plain XADD (BenchmarkAppend_RedisCPU measures
// both), so in
// binlog mode on a standalone Redis without dedupe, Append writes a batch as
// an optimistic transaction instead, in two round trips on one connection:
//
//  1. WATCH the position, the lease and the streams; GET the position and
//     the lease; TYPE and (for the groups, Config.Groups) XINFO GROUPS of
//     the streams; MULTI. The checks the script makes run in Go on these
//     replies, and nothing is written when one fails (DISCARD).
//  2. XGROUP CREATE of the missing groups, the XADDs with exactly the
//     script's arguments (the entries are byte-identical), SET of the
//     position, EXEC.
//
// EXEC runs every command or none: Redis aborts the transaction (a nil
// reply) when a watched key changed after WATCH (another relay's append, a
// position set, the lease's expiry or take; not this relay's own renewal,
// which waits for EXEC: Lease.watched), and answers EXECABORT when a
// command was refused while it was queued (src/server.c processCommand:
// ACL, wrong arity, OOM, READONLY on a replica, all checked before
// queueing) or when EXEC itself is refused (Redis 7.0 and later check
// maxmemory for an EXEC that holds a denyoom command such as XADD, and
// READONLY for one that holds a write, before running any of it). Inside
// EXEC, commands run without those checks (src/multi.c execCommand calls
// call() directly), so the only errors left are runtime ones: WRONGTYPE
// (excluded: the TYPE of each stream was checked under WATCH, and any
// change to it aborts EXEC), BUSYGROUP (excluded the same way by XINFO
// GROUPS) and one more that both 7.0 and later versions have: execCommand
// checks the ACL again per command, for rules changed between queueing and
// EXEC. A batch spans several socket reads, so an ACL SETUSER can land in
// between; Append then finds errors in EXEC's reply and stops with
// ErrPartialTransaction, naming what was written and what was not, rather
// than carry on as if the batch were whole.
//
// A MULTI the user may not run is refused in round 1, before any write:
// sent in round 2, a refused MULTI would let the XADDs and the SET that
// follow it run one by one, outside any transaction.

// DefaultMultiMin is the default of Config.MultiMin. MULTI/EXEC costs a
// second round trip per batch, which adds to live latency, where batches
// hold an entry or a few and Redis CPU is not the bound. From a few dozen
// entries on (catch-up, multi-row transactions) Redis's CPU is the bound,
// and the CPU per entry that MULTI saves it outweighs the round trip
// (BenchmarkAppend_RedisCPU, and binlog-outbox-bench's live workloads).
const DefaultMultiMin = 32

// maxExecAborts bounds how often Append redoes a transaction whose EXEC a
// change of a watched key aborted. Another client's write lands between the
// rounds now and then; more aborts in a row mean it writes these keys
// continuously, and the relay says so rather than spin.
const maxExecAborts = 5

// ErrPartialTransaction means EXEC ran part of an append transaction only:
// Redis refused some commands at EXEC (the user's ACL changed after they
// were queued). It is final: the streams and the position no longer match,
// and only an operator can decide which entries to append again.
var ErrPartialTransaction = outbox.NewConfigError("Redis ran only part of an append transaction")

// replyError is an error reply Append makes up in the words Redis (or the
// append script) would use, so that classify treats both alike.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a Redis error reply (redis.Error).
func (replyError) RedisError() {}

// multiAppend is the strategy that appends a batch with MULTI/EXEC (see
// above). It owns the arguments of the batch it builds.
type multiAppend struct {
	*base
	batchKeys
	// margs holds the arguments of the XADDs, xadds where each one's are,
	// boxed the keys as margs holds them.
	margs []any
	xadds []span
	boxed []any
}

// takes reports whether the batch events goes through MULTI/EXEC rather
// than the append script: from Config.MultiMin entries on, or from
// multiMinBytes of payloads, unless it holds a delayed symfony-doctrine
// message or Laravel job, or is Laravel's Redis queue.
func (s *multiAppend) takes(events []outbox.Event) bool {
	if s.cfg.Format.Name == entry.FormatLaravelQueue {
		// The script alone pushes to Laravel's lists.
		return false
	}
	if s.cfg.Format.Name == entry.FormatDoctrine || s.cfg.Format.Name == entry.FormatLaravelStream {
		// The script alone adds delayed messages to their sets.
		for i := range events {
			s.prepare(&events[i])
			if _, ok := s.cfg.Format.Delayed(&events[i]); ok {
				return false
			}
		}
	}
	if len(events) >= s.cfg.MultiMin {
		return true
	}
	// A few large entries: the script would copy each payload into Lua
	// and back, which costs Redis far more than the round trip.
	size := 0
	for i := range events {
		if size += len(events[i].Payload); size >= multiMinBytes {
			return true
		}
	}
	return false
}

// multiMinBytes is the payload size from which a batch smaller than
// Config.MultiMin goes through MULTI/EXEC all the same: the script's cost
// to Redis grows with the bytes it converts, so with large rows a plain
// XADD costs Redis a fraction of the script's per entry (binlog-outbox-bench
// --workloads huge prints Redis's CPU per entry beside bare XADDs).
const multiMinBytes = 64 << 10

// build fills s.keys (position, lease, streams), s.batchNew and the
// arguments of each XADD (s.xadds, slices of s.margs).
func (s *multiAppend) build(events []outbox.Event, lease string) {
	s.keys = append(s.keys[:0], s.cfg.PositionKey)
	if lease != "" {
		s.keys = append(s.keys, s.cfg.Lease.Key())
	}
	first := s.streams(s.base, events)
	for _, key := range s.keys[first:] {
		s.checkGroups(s.base, key)
	}
	// Each stream's name boxed once per batch, not once per entry.
	s.boxed = s.boxed[:0]
	for _, k := range s.keys {
		s.boxed = append(s.boxed, k)
	}
	s.margs = s.margs[:0]
	s.xadds = s.xadds[:0]
	for i := range events {
		start := len(s.margs)
		s.margs = append(s.margs, "XADD", s.boxed[s.streamOf[i]-1], "*")
		s.margs = s.appendFields(s.margs, &events[i])
		s.xadds = append(s.xadds, span{start, len(s.margs)})
	}
}

// span is a command's arguments in multiAppend.margs.
type span struct{ from, to int }

// append implements appender.
func (s *multiAppend) append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	lease, err := s.heldLease(len(events))
	if err != nil {
		return err
	}
	s.build(events, lease)
	defer clear(s.margs) // the events' values, held until the next batch otherwise
	for range maxExecAborts {
		var aborted bool
		var err error
		done := func() {}
		if lease != "" {
			// The renewal waits for EXEC rather than abort it (Lease.watched).
			if done, err = s.cfg.Lease.watch(ctx); err != nil {
				return fmt.Errorf("append %d events: %w", len(events), err)
			}
		}
		// Watch with no keys only pins one connection: WATCH is sent in
		// round 1's pipeline, which saves it a round trip of its own.
		_ = s.client.Watch(ctx, func(tx *redis.Tx) error {
			aborted, err = s.transact(ctx, tx, prev, next, lease)
			return nil
		})
		done()
		if !aborted {
			if err == nil {
				s.groups.add(s.batchNew)
				return nil
			}
			return err
		}
	}
	return outbox.WithHint(fmt.Errorf("append %d events: EXEC was aborted %d times in a row: another client keeps changing %s",
		len(events), maxExecAborts, strings.Join(s.keys[:s.named], ", ")),
		"only the relay should write its position, lease and streams; find the other writer (CLIENT LIST, MONITOR); the relay retries and appends nothing twice")
}

// transact runs the two rounds once on tx's connection. aborted reports
// that EXEC was aborted by a change of a watched key: nothing was written.
func (s *multiAppend) transact(ctx context.Context, tx *redis.Tx, prev, next []byte, lease string) (aborted bool, err error) {
	n := len(s.xadds)
	r, perr := s.round1(ctx, tx, lease)
	if perr != nil && !isReply(perr) {
		// Round 1 writes nothing: whatever broke, the batch is not appended.
		return false, fmt.Errorf("append %d events: %w", n, redisconn.Classify(perr))
	}
	exists, err := s.check(r, n, prev, lease)
	if err != nil {
		discard(ctx, tx, r.multi)
		return false, err
	}
	exec, cmds, perr := s.round2(ctx, tx, r.infos, exists, next)
	if perr != nil && !isReply(perr) {
		return false, s.resolve(ctx, n, perr, prev, next, lease)
	}
	return s.execResult(exec, cmds, n, prev)
}

// watched holds the replies of round 1.
type watched struct {
	cmds          []redis.Cmder
	multi         *redis.Cmd
	pos, leaseCmd *redis.StringCmd
	types         []*redis.StatusCmd
	infos         []*redis.XInfoGroupsCmd
}

// round1 watches the position, the lease and the streams, reads what the
// append script would check, and sends MULTI.
func (s *multiAppend) round1(ctx context.Context, tx *redis.Tx, lease string) (watched, error) {
	base := 1
	if lease != "" {
		base = 2
	}
	streams := s.keys[base:s.named]
	watch := make([]any, 0, 1+s.named)
	watch = append(watch, "WATCH")
	for _, k := range s.keys[:s.named] {
		watch = append(watch, k)
	}
	r := watched{types: make([]*redis.StatusCmd, len(streams)), infos: make([]*redis.XInfoGroupsCmd, len(s.batchNew))}
	var err error
	r.cmds, err = tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, watch...)
		r.pos = p.Get(ctx, s.cfg.PositionKey)
		if lease != "" {
			r.leaseCmd = p.Get(ctx, s.cfg.Lease.Key())
		}
		for i, k := range streams {
			r.types[i] = p.Type(ctx, k)
		}
		for i, k := range s.batchNew {
			r.infos[i] = p.XInfoGroups(ctx, k)
		}
		r.multi = p.Do(ctx, "MULTI")
		return nil
	})
	return r, err
}

// check makes the append script's checks on round 1's replies r: an error
// means the batch must not be written. It returns which streams exist.
func (s *multiAppend) check(r watched, n int, prev []byte, lease string) (exists map[string]bool, err error) {
	// XINFO GROUPS of a stream that does not exist yet fails; TYPE tells
	// those, which get their groups with MKSTREAM.
	isInfo := make(map[redis.Cmder]bool, len(r.infos))
	for _, info := range r.infos {
		isInfo[info] = true
	}
	for _, c := range r.cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) && !isInfo[c] {
			return nil, fmt.Errorf("append %d events: %s: %w", n, cmdName(c), redisconn.Classify(e))
		}
	}
	if lease != "" {
		if cur := r.leaseCmd.Val(); cur != lease {
			s.cfg.Lease.lost(lease)
			return nil, fmt.Errorf("append %d events: %w: it is held by %s", n, outbox.ErrLeaseLost, holderOrNobody(cur))
		}
	}
	if cur := r.pos.Val(); cur != string(prev) {
		return nil, mismatch(cur)
	}
	streams := s.keys[s.named-len(r.types) : s.named]
	exists = make(map[string]bool, len(streams))
	for i, k := range streams {
		switch t := r.types[i].Val(); t {
		case "stream":
			exists[k] = true
		case "none":
		default:
			return nil, s.wrongType(n, k, t, "stream")
		}
	}
	for i, k := range s.batchNew {
		if e := r.infos[i].Err(); e != nil && exists[k] {
			return nil, fmt.Errorf("append %d events: %s: %w", n, cmdName(r.infos[i]), redisconn.Classify(e))
		}
	}
	return exists, nil
}

// discard ends round 1 without writing: DISCARD drops MULTI and the
// watches, UNWATCH the watches when MULTI was refused.
func discard(ctx context.Context, tx *redis.Tx, multi *redis.Cmd) {
	cmd := "DISCARD"
	if multi.Err() != nil {
		cmd = "UNWATCH"
	}
	if err := tx.Process(ctx, redis.NewCmd(ctx, cmd)); isReply(err) {
		// Refused (a user without +discard): back in the pool inside
		// MULTI, the connection would answer QUEUED to whoever used it
		// next. QUIT, which no ACL refuses and MULTI does not queue,
		// closes it, and the PING that then fails on it makes the
		// pool drop it.
		_ = tx.Process(ctx, redis.NewCmd(ctx, "QUIT"))
		_ = tx.Process(ctx, redis.NewCmd(ctx, "PING"))
	}
}

// execResult reads round 2's replies: cmds, ending with exec. aborted
// reports that a change of a watched key aborted EXEC.
func (s *multiAppend) execResult(exec *redis.Cmd, cmds []redis.Cmder, n int, prev []byte) (aborted bool, err error) {
	// A command refused while queued makes EXEC answer EXECABORT: its own
	// reply says why.
	for _, c := range cmds[:len(cmds)-1] {
		if e := c.Err(); e != nil {
			return false, fmt.Errorf("append %d events: nothing written: %s: %w", n, cmdName(c), redisconn.Classify(e))
		}
	}
	if e := exec.Err(); e != nil {
		if errors.Is(e, redis.Nil) {
			return true, nil
		}
		// EXEC refused as a whole (OOM, READONLY, NOPERM on EXEC): Redis
		// gives the cause's reply after "because of: " (execCommandAbort),
		// and its code is what classify reads.
		if _, cause, ok := strings.Cut(e.Error(), "because of: "); ok {
			e = replyError(cause)
		}
		return false, fmt.Errorf("append %d events: nothing written: EXEC: %w", n, redisconn.Classify(e))
	}
	return false, s.checkExec(exec, cmds[:len(cmds)-1], n, prev)
}

// round2 queues the group creations, the XADDs and the position, and runs
// EXEC. cmds ends with exec.
func (s *multiAppend) round2(ctx context.Context, tx *redis.Tx, infos []*redis.XInfoGroupsCmd, exists map[string]bool, next []byte) (exec *redis.Cmd, cmds []redis.Cmder, err error) {
	cmds, err = tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		// Groups before the first XADD: no entry exists before its group.
		for i, k := range s.batchNew {
			have := map[string]bool{}
			if exists[k] {
				for _, g := range infos[i].Val() {
					have[g.Name] = true
				}
			}
			for _, g := range s.cfg.Groups {
				if !have[g] {
					p.XGroupCreateMkStream(ctx, k, g, "0")
				}
			}
		}
		for _, x := range s.xadds {
			p.Do(ctx, s.margs[x.from:x.to:x.to]...)
		}
		p.Set(ctx, s.cfg.PositionKey, next, 0)
		exec = p.Do(ctx, "EXEC")
		return nil
	})
	return exec, cmds, err
}

// checkExec reads EXEC's replies, one per queued command of cmds. An error
// among them means Redis ran the others (see above).
func (s *multiAppend) checkExec(exec *redis.Cmd, cmds []redis.Cmder, n int, prev []byte) error {
	replies, _ := exec.Val().([]any)
	if len(replies) != len(cmds) {
		return fmt.Errorf("append %d events: EXEC answered %d replies for %d commands", n, len(replies), len(cmds))
	}
	var failed []string
	var first error
	for i, r := range replies {
		if e, ok := r.(error); ok {
			failed = append(failed, cmdName(cmds[i]))
			if first == nil {
				first = e
			}
		}
	}
	if first == nil {
		return nil
	}
	stored := "was not stored either: no entry of the batch is covered by it, and restarting the relay appends again those that were written"
	if replies[len(replies)-1] == "OK" {
		stored = fmt.Sprintf("was stored: the events of the refused XADDs are missing from their streams; `binlog-outbox position set` to the previous position %q appends the whole batch again (the written ones twice)", prev)
	}
	return outbox.WithHint(fmt.Errorf("append %d events: %w: %d of %d commands refused (%s): %v",
		n, ErrPartialTransaction, len(failed), len(cmds), strings.Join(failed, ", "), first),
		"the Redis user's ACL changed while the relay appended; restore its rules (see docs/redis-tls-acl.md). The new position %s", stored)
}

// isReply reports whether err is an error reply of Redis (not a broken
// connection).
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// cmdName names a command and its key for an error: Redis's own replies
// (NOPERM, OOM) name neither.
func cmdName(c redis.Cmder) string {
	args := c.Args()
	name := strings.ToUpper(fmt.Sprint(args[0]))
	switch {
	case name == "XGROUP" && len(args) > 2:
		return fmt.Sprintf("XGROUP CREATE %v", args[2])
	case name == "XINFO" && len(args) > 2:
		return fmt.Sprintf("XINFO GROUPS %v", args[2])
	case len(args) > 1 && name != "MULTI" && name != "EXEC" && name != "WATCH":
		return fmt.Sprintf("%s %v", name, args[1])
	}
	return name
}
