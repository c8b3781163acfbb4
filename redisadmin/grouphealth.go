package redisadmin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// DefaultGroupIdleThreshold is how long a consumer may go without reading
// before ReadGroupHealth calls it idle (--group-idle-threshold).
const DefaultGroupIdleThreshold = 10 * time.Minute

// GroupHealth is one consumer group of a stream, as ReadGroupHealth finds it.
type GroupHealth struct {
	Stream, Name string
	Consumers    int64
	// Idle are the consumers that have not read for longer than the
	// threshold, by name.
	Idle map[string]time.Duration
	// Pending counts the entries delivered and not acknowledged.
	Pending         int64
	LastDeliveredID string
	// Undelivered counts the entries after LastDeliveredID, from the
	// stream's ids: XINFO GROUPS lag cannot be trusted (Redis 7.0 keeps
	// counting entries trimmed before the group read them, and reports
	// none after an XDEL).
	Undelivered int64
	// Estimated says Undelivered is an estimate: more than maxCounted
	// entries lie on either side of the group's id. It is then XINFO
	// GROUPS lag within the bounds the count proved, or their upper bound
	// when Redis reports none.
	Estimated bool
	// Oldest is the pending entry of the lowest id; nil when none is
	// pending.
	Oldest *PendingEntry
	// HoldsBackTrim says that --trim acked stops at this group: its
	// horizon is the stream's, and entries at or after it remain. Held is
	// the first such entry and HeldAge its age; zero without.
	HoldsBackTrim bool
	Held          string
	HeldAge       time.Duration
}

// PendingEntry is an entry delivered to a group and not acknowledged.
type PendingEntry struct {
	ID, Consumer string
	// Deliveries counts how often the entry was delivered (claims
	// included): one that keeps growing is an entry its consumers fail on.
	Deliveries int64
	// Age is how long ago the entry was appended, from its id; Idle how
	// long ago it was last delivered.
	Age, Idle time.Duration
}

// countPage is how many entries one call of countScript counts: Redis
// runs nothing else meanwhile, and a page of outbox entries costs it about
// a millisecond.
const countPage = 250

// maxCounted bounds the entries counted for one group, on both sides
// together, so that a group halfway down a long stream costs a bounded
// number of pages per status or metrics pass; past it the count is an
// estimate (GroupHealth.Estimated).
// A variable for the tests.
var maxCounted int64 = 50_000

// countScript counts the entries of KEYS[1] from ARGV[1] to ARGV[2], at most
// ARGV[3], and returns {count, id of the last}: in Redis, so that counting
// does not carry every payload over the network.
var countScript = redis.NewScript(`
local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
if #r == 0 then return {0, ''} end
return {#r, r[#r][1]}
`)

// ReadGroupHealth reads the consumer groups of stream key: XINFO STREAM and
// GROUPS, per group XPENDING of its oldest entry and, when it has
// consumers, XINFO CONSUMERS, and counts of the undelivered entries. A
// consumer is idle past idleThreshold. It reads, and only reads; the
// commands run one by one, so that figures of a stream being written may
// be a few entries apart.
func ReadGroupHealth(ctx context.Context, client redis.UniversalClient, key string, idleThreshold time.Duration) ([]GroupHealth, error) {
	info, err := client.XInfoStream(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO STREAM %s: %w", key, redisconn.Classify(err))
	}
	groups, err := client.XInfoGroups(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", key, redisconn.Classify(err))
	}
	now := time.Now()
	st := streamSpan{length: info.Length}
	if info.Length > 0 {
		st.first, _ = parseID(info.FirstEntry.ID)
		st.last, _ = parseID(info.LastEntry.ID)
	}
	out := make([]GroupHealth, 0, len(groups))
	horizons := make([]streamID, len(groups))
	for i, g := range groups {
		h := GroupHealth{Stream: key, Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, LastDeliveredID: g.LastDeliveredID}
		last, ok := parseID(g.LastDeliveredID)
		if !ok {
			return nil, fmt.Errorf("XINFO GROUPS %s: group %s: last-delivered-id %q is not a stream id", key, g.Name, g.LastDeliveredID)
		}
		if h.Undelivered, h.Estimated, err = countAfter(ctx, client, key, last, st, g.Lag); err != nil {
			return nil, err
		}
		horizons[i] = last.next()
		if g.Pending > 0 {
			if h.Oldest, err = oldestPending(ctx, client, key, g.Name, now); err != nil {
				return nil, err
			}
			// Oldest is nil when the entries were acknowledged since
			// XINFO GROUPS: a relay's group metrics panicked on it under
			// load (TestRun_MetricsLagAndReadiness/poll).
			if h.Oldest != nil {
				if id, ok := parseID(h.Oldest.ID); ok && id.less(horizons[i]) {
					horizons[i] = id
				}
			}
		}
		if g.Consumers > 0 {
			if h.Idle, err = idleConsumers(ctx, client, key, g.Name, idleThreshold); err != nil {
				return nil, err
			}
		}
		out = append(out, h)
	}
	return out, markHoldsBack(ctx, client, key, out, horizons, st, now)
}

// markHoldsBack marks the groups --trim acked stops at, as trimScript
// decides: the stream's horizon is the lowest over its groups of the
// oldest pending entry and the entry after the last delivered one; the
// groups whose horizon it is hold back the entries from there on.
func markHoldsBack(ctx context.Context, client redis.UniversalClient, key string, gs []GroupHealth, horizons []streamID, st streamSpan, now time.Time) error {
	if len(gs) == 0 || st.length == 0 {
		return nil
	}
	low := horizons[0]
	for _, h := range horizons[1:] {
		if h.less(low) {
			low = h
		}
	}
	if st.last.less(low) {
		return nil // every group is done with every entry
	}
	held, err := client.XRangeN(ctx, key, low.String(), "+", 1).Result()
	if err != nil {
		return fmt.Errorf("XRANGE %s: %w", key, redisconn.Classify(err))
	}
	if len(held) == 0 {
		return nil
	}
	for i := range gs {
		if horizons[i] == low {
			gs[i].HoldsBackTrim, gs[i].Held, gs[i].HeldAge = true, held[0].ID, idAge(held[0].ID, now)
		}
	}
	return nil
}

// streamSpan is a stream's length and its first and last entries.
type streamSpan struct {
	length      int64
	first, last streamID
}

// countAfter counts the entries of key after id. It counts pages from both
// ends, the entries after id and those up to it, and stops at the first
// side done, so that it costs the smaller of the two: a group far behind
// on a stream trimmed up to it, or one near its end, is counted quickly.
// Past maxCounted it returns redisLag (-1: none) within the bounds it
// counted, estimated.
func countAfter(ctx context.Context, client redis.UniversalClient, key string, id streamID, st streamSpan, redisLag int64) (int64, bool, error) {
	switch {
	case st.length == 0 || !id.less(st.last):
		return 0, false, nil
	case id.less(st.first):
		return st.length, false, nil
	}
	// Inclusive bounds, the next id rather than "(id": Redis before 6.2
	// has no exclusive ranges.
	fwd, back := id.next().String(), "-"
	var after, upTo int64
	for after+upTo < maxCounted {
		n, last, err := countRange(ctx, client, key, fwd, "+")
		if err != nil {
			return 0, false, err
		}
		after += n
		if n < countPage {
			return after, false, nil
		}
		fwd = last.next().String()
		if n, last, err = countRange(ctx, client, key, back, id.String()); err != nil {
			return 0, false, err
		}
		upTo += n
		if n < countPage {
			return max(st.length-upTo, after), false, nil
		}
		back = last.next().String()
	}
	high := max(st.length-upTo, after)
	if redisLag < 0 {
		return high, true, nil
	}
	return min(max(redisLag, after), high), true, nil
}

// countRange counts one page of entries from start to end (XRANGE bounds),
// and returns the id of the last.
func countRange(ctx context.Context, client redis.UniversalClient, key, start, end string) (int64, streamID, error) {
	res, err := countScript.Run(ctx, client, []string{key}, start, end, countPage).Slice()
	if err != nil {
		return 0, streamID{}, fmt.Errorf("count the entries of %s: %w", key, redisconn.Classify(err))
	}
	if len(res) != 2 {
		return 0, streamID{}, fmt.Errorf("count the entries of %s: unexpected reply %v", key, res)
	}
	n, _ := res[0].(int64)
	last, _ := res[1].(string)
	id, ok := parseID(last)
	if n > 0 && !ok {
		return 0, streamID{}, fmt.Errorf("count the entries of %s: unexpected reply %v", key, res)
	}
	return n, id, nil
}

// oldestPending reads the pending entry of the lowest id of group.
func oldestPending(ctx context.Context, client redis.UniversalClient, key, group string, now time.Time) (*PendingEntry, error) {
	ps, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: "-", End: "+", Count: 1}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s: %w", key, group, redisconn.Classify(err))
	}
	if len(ps) == 0 {
		return nil, nil // acknowledged since XINFO GROUPS
	}
	p := ps[0]
	return &PendingEntry{ID: p.ID, Consumer: p.Consumer, Deliveries: p.RetryCount, Idle: p.Idle, Age: idAge(p.ID, now)}, nil
}

// idleConsumers lists the consumers of group idle for longer than
// threshold. Redis counts a consumer's idle time from its last read (or
// claim), successful or not, so a consumer blocked on a quiet stream
// shows idle too: only a group with entries left, such as one that holds
// back trimming, is stuck for having nothing but idle consumers.
func idleConsumers(ctx context.Context, client redis.UniversalClient, key, group string, threshold time.Duration) (map[string]time.Duration, error) {
	cs, err := client.XInfoConsumers(ctx, key, group).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO CONSUMERS %s %s: %w", key, group, redisconn.Classify(err))
	}
	idle := map[string]time.Duration{}
	for _, c := range cs {
		if c.Idle > threshold {
			idle[c.Name] = c.Idle
		}
	}
	return idle, nil
}

// idAge is how long ago an entry of id was appended, from the milliseconds
// of its id (the relay appends with `*`); 0 for an id in the future.
func idAge(id string, now time.Time) time.Duration {
	sid, ok := parseID(id)
	if !ok {
		return 0
	}
	return max(now.Sub(time.UnixMilli(int64(sid.ms))), 0)
}

// streamID is a stream entry id, milliseconds and sequence.
type streamID struct{ ms, seq uint64 }

// parseID reads "ms-seq".
func parseID(s string) (streamID, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	return streamID{m, q}, err1 == nil && err2 == nil
}

func (a streamID) less(b streamID) bool {
	return a.ms < b.ms || a.ms == b.ms && a.seq < b.seq
}

// next is the smallest id after a (a itself at the very last id).
func (a streamID) next() streamID {
	switch {
	case a.seq < ^uint64(0):
		return streamID{a.ms, a.seq + 1}
	case a.ms < ^uint64(0):
		return streamID{a.ms + 1, 0}
	}
	return a
}

func (a streamID) String() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}
