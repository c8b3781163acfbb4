package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
)

// Defaults of TrimConfig.
const (
	DefaultTrimInterval = 10 * time.Second
)

// TrimConfig configures a Trimmer.
type TrimConfig struct {
	// Glob selects the streams to trim (SCAN MATCH, streams only):
	// entry.Template.Glob of --stream. Required.
	Glob string
	// Exclude lists streams never trimmed although Glob matches them: the
	// dead-letter stream, whose entries are records for an operator.
	Exclude []string
	// Acked trims each stream to the oldest entry some consumer group has
	// not acknowledged (--trim acked). A stream without a group is left
	// alone: nobody consumes it, so nothing says what is done with.
	Acked bool
	// MaxLen, when positive, caps each stream at about this many entries
	// (--max-len; XTRIM MAXLEN ~). Over the cap, the acknowledged entries go
	// first; what is cut beyond them some group has not acknowledged, and
	// each such cut is logged as a warning.
	MaxLen int64
	// Interval is the wait between two passes of Run (default
	// DefaultTrimInterval). Shorter keeps the streams tighter and costs one
	// SCAN of the keyspace (of every master on a Redis Cluster) and one
	// script per stream each time.
	Interval time.Duration
	// Active, when set, tells whether this relay is the one that should
	// trim: the lease holder, not a standby (--lease). Run skips a pass while
	// it returns false, so that relays of one position do not each SCAN
	// the keyspace and race to trim the same streams. Nil: always.
	Active func() bool
}

// Trimmer keeps streams bounded: it removes the entries every consumer
// group has acknowledged, and enforces a hard cap. Step runs one pass; Run
// repeats it. It is safe for use by one goroutine at a time.
type Trimmer struct {
	client redis.UniversalClient
	cfg    TrimConfig
	log    *slog.Logger
	// checked is set once the server's version was found recent enough.
	checked bool
	// noGroup holds the streams already reported as having no group, so
	// that the line is printed once per stream.
	noGroup map[string]bool
}

// TrimStats is what one pass did.
type TrimStats struct {
	// Streams is how many streams the pass looked at; NoGroup how many of
	// them have no consumer group.
	Streams, NoGroup int
	// Acked counts the entries removed that every group had acknowledged.
	Acked int64
	// Unacked counts the entries --max-len cut that some group had not
	// acknowledged (or, on a stream without groups, that nobody read).
	Unacked int64
}

// NewTrimmer returns a Trimmer. It does not talk to Redis: Step checks the
// server's version first.
func NewTrimmer(client redis.UniversalClient, cfg TrimConfig, logger *slog.Logger) (*Trimmer, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultTrimInterval
	}
	if cfg.Glob == "" {
		return nil, fmt.Errorf("%w: trim: no stream pattern", outbox.ErrConfig)
	}
	if cfg.Interval < 0 {
		return nil, outbox.WithHint(fmt.Errorf("%w: --trim-interval %s is negative", outbox.ErrConfig, cfg.Interval), "use e.g. --trim-interval 10s")
	}
	if cfg.MaxLen < 0 {
		return nil, outbox.WithHint(fmt.Errorf("%w: --max-len %d is negative", outbox.ErrConfig, cfg.MaxLen), "use a positive number of entries, or 0 for no cap")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Trimmer{client: client, cfg: cfg, log: logger.With("component", "trimmer"), noGroup: map[string]bool{}}, nil
}

// trimScript trims one stream, KEYS[1], in one atomic step: the groups'
// progress it reads cannot change before the XTRIM (a group created in
// between, by the append script or a consumer, from id 0, would otherwise
// lose entries it was promised).
//
// The horizon is the minimum over groups of the oldest pending entry
// (XPENDING summary) and the entry after the group's last-delivered-id:
// every entry below it was delivered to every group and acknowledged. Ids
// are compared as decimal strings, since Lua numbers lose precision past
// 2^53.
//
// It checks the user's permissions first (aclCheckLua), so that a refusal
// names the command and the key.
//
// ARGV[1] "1" to trim to the horizon; ARGV[2] the length cap (0: none). It
// returns {groups, horizon, acked removed, cut by the cap}, or {-1} when the
// key is no longer a stream.
var trimScript = redis.NewScript(aclCheckLua + `
local key = KEYS[1]
local denied = deny('TYPE', '', key) or deny('XINFO', 'GROUPS', key) or deny('XPENDING', '', key, 'g') or
  deny('XLEN', '', key) or deny('XTRIM', '', key, 'MINID', '0')
if denied then return denied end
if redis.call('TYPE', key)['ok'] ~= 'stream' then
  return {-1}
end
local function numless(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function idless(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if am ~= bm then return numless(am, bm) end
  return numless(as, bs)
end
local function incr(s)
  local i = #s
  local tail = ''
  while i >= 1 do
    local d = string.byte(s, i) - 48
    if d < 9 then
      return string.sub(s, 1, i - 1) .. string.char(d + 49) .. tail
    end
    tail = '0' .. tail
    i = i - 1
  end
  return '1' .. tail
end
local function after(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if seq == '18446744073709551615' then
    return id -- keeps one entry more; no id follows in this millisecond
  end
  return ms .. '-' .. incr(seq)
end
local groups = redis.call('XINFO', 'GROUPS', key)
local horizon = false
for _, g in ipairs(groups) do
  local name, last, pending
  for j = 1, #g, 2 do
    if g[j] == 'name' then name = g[j + 1]
    elseif g[j] == 'last-delivered-id' then last = g[j + 1]
    elseif g[j] == 'pending' then pending = g[j + 1] end
  end
  local h = after(last)
  if pending > 0 then
    local oldest = redis.call('XPENDING', key, name)[2]
    if oldest and idless(oldest, h) then h = oldest end
  end
  if not horizon or idless(h, horizon) then horizon = h end
end
local acked = 0
local cap = tonumber(ARGV[2])
if horizon and (ARGV[1] == '1' or (cap > 0 and redis.call('XLEN', key) > cap)) then
  acked = redis.call('XTRIM', key, 'MINID', horizon)
end
local cut = 0
if cap > 0 and redis.call('XLEN', key) > cap then
  cut = redis.call('XTRIM', key, 'MAXLEN', '~', cap)
end
return {#groups, horizon or '', acked, cut}
`)

// Step runs one pass over the streams. An error stops the pass; what it
// trimmed before stays trimmed, which is safe: each stream is trimmed
// atomically, to what its groups are done with.
func (t *Trimmer) Step(ctx context.Context) (TrimStats, error) {
	var st TrimStats
	if err := t.Check(ctx); err != nil {
		return st, err
	}
	keys, err := t.streams(ctx)
	if err != nil {
		return st, err
	}
	acked := "0"
	if t.cfg.Acked {
		acked = "1"
	}
	for _, key := range keys {
		res, err := trimScript.Run(ctx, t.client, []string{key}, acked, t.cfg.MaxLen).Slice()
		if err != nil {
			return st, fmt.Errorf("trim %s: %w", key, classifyTrim(err))
		}
		if len(res) != 4 {
			continue // no longer a stream
		}
		groups, _ := res[0].(int64)
		horizon, _ := res[1].(string)
		removed, _ := res[2].(int64)
		cut, _ := res[3].(int64)
		st.Streams++
		st.Acked += removed
		st.Unacked += cut
		if groups == 0 {
			st.NoGroup++
			if t.cfg.Acked && !t.noGroup[key] {
				t.noGroup[key] = true
				t.log.Info("stream has no consumer group; --trim acked leaves it alone", "stream", key,
					logging.KeyHint, "create the consumers' groups (--ensure-group), or trim it yourself")
			}
		}
		if removed > 0 {
			t.log.Debug("trimmed acknowledged entries", "stream", key, "removed", removed, "horizon", horizon)
		}
		if cut > 0 {
			msg := "--max-len cut entries some consumer group had not acknowledged"
			hint := "consumers are behind: the cut entries are lost to the groups that had not processed them; scale the consumers or raise --max-len"
			if groups == 0 {
				msg = "--max-len cut entries of a stream without consumer group"
				hint = "nobody consumes this stream through a group; create the groups (--ensure-group) or raise --max-len"
			}
			t.log.Warn(msg, "stream", key, "cut", cut, "max_len", t.cfg.MaxLen, "horizon", horizon, logging.KeyHint, hint)
		}
	}
	return st, nil
}

// Run trims every Interval until ctx is done, and returns nil then. A failed
// pass is logged (repeats rate-limited) and retried, a master failover on a
// Redis Cluster included: each stream is trimmed by one script on its
// current master, so a pass cut short trims nothing wrongly. A final error
// (an old Redis, see Step) is returned. Passes are skipped while Active
// says false.
func (t *Trimmer) Run(ctx context.Context) error {
	policy := retry.New(t.log, retry.Config{Message: "trim pass failed; retrying", MaxWait: max(t.cfg.Interval, retry.DefaultFirstWait)})
	for {
		if t.cfg.Active != nil && !t.cfg.Active() {
			// A standby checks often: it may take the lease any moment.
			if !retry.Sleep(ctx, min(t.cfg.Interval, time.Second)) {
				return nil
			}
			continue
		}
		st, err := t.Step(ctx)
		wait := t.cfg.Interval
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var final error
			if wait, final = policy.Failed(err); final != nil {
				return final
			}
		} else {
			policy.Progressed()
			if st.Acked > 0 {
				t.log.Debug("trim pass", "streams", st.Streams, "acked_removed", st.Acked, "unacked_cut", st.Unacked)
			}
		}
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// minTrimVersion is the first Redis with XTRIM MINID.
var minTrimVersion = [2]int{6, 2}

// Check makes sure, once, that the server knows XTRIM MINID (Redis 6.2+);
// an older one is a configuration error with the fix. Step calls it; run
// calls it before relaying, so that an unfit Redis stops the start.
func (t *Trimmer) Check(ctx context.Context) error {
	if t.checked {
		return nil
	}
	info, err := t.client.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("trim: read the Redis version: %w", classifyTrim(err))
	}
	version := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	major, minor, ok := parseVersion(version)
	if !ok {
		return fmt.Errorf("trim: cannot tell the Redis version from INFO server (redis_version %q)", version)
	}
	if major < minTrimVersion[0] || major == minTrimVersion[0] && minor < minTrimVersion[1] {
		return outbox.WithHint(fmt.Errorf("%w: --trim and --max-len need Redis 6.2 or later (XTRIM MINID), and the server is %s", outbox.ErrConfig, version),
			"upgrade Redis, or run without --trim and --max-len and trim the streams otherwise")
	}
	t.checked = true
	return nil
}

// parseVersion reads major.minor from a version such as "7.0.15".
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// streams lists the streams Glob matches, sorted, without the excluded
// ones; on a Redis Cluster, those of every master.
func (t *Trimmer) streams(ctx context.Context) ([]string, error) {
	all, err := redisconn.ScanStreams(ctx, t.client, t.cfg.Glob)
	if err != nil {
		return nil, fmt.Errorf("trim: %w", classifyTrim(err))
	}
	keys := all[:0]
	for _, k := range all {
		if !slices.Contains(t.cfg.Exclude, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// classifyTrim is classify with the permissions the trimmer needs.
func classifyTrim(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM") {
		return redisconn.Denied(err, "trimming needs +scan +info +evalsha +eval +type +xinfo|groups +xpending +xlen +xtrim on the streams")
	}
	return redisconn.Classify(err)
}
