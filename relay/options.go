// Package relay runs the relay: the preflight checks of check, then binlog
// or poll mode over one table or several, with the lag monitor, the
// metrics server, the stream trimmer and, in binlog mode, the lease. It
// takes plain options; the command line only builds them.
package relay

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// Options is everything run's flags give, global and its own, in one
// value: the command line checks each flag's range as it reads it
// (Ranges), and Validate what they say together. A zero field of the
// reader's or the poller's sizes and periods is that component's default.
type Options struct {
	// Config is the resolved global configuration (Resolve).
	Config settings.Config
	// Version is logged at start.
	Version string
	// Mode is --mode as given: binlog, poll or auto.
	Mode string
	// PositionKey is --position-key, "" for the table's default key.
	PositionKey string
	// StartFrom is --start-from: where binlog mode starts without a
	// stored position.
	StartFrom string
	// MetricsAddr serves /metrics, /healthz and /readyz; "" is off.
	MetricsAddr string
	// OwnsProcess says the relay is the whole process (the command), not
	// a part of one (a test, a program embedding it): binlog mode then
	// sets GOMAXPROCS by whether it is caught up (internal/tuning).
	OwnsProcess bool

	// Binlog mode: the reader's sizes and periods.
	Heartbeat       time.Duration
	MaxBatchEvents  int
	MaxTxBytes      int
	EventCacheBytes int

	// Binlog mode: the lease (--lease and its timings).
	Lease         bool
	LeaseTTL      time.Duration
	LeaseRenew    time.Duration
	LeaseStepDown time.Duration

	// Stream is --stream when given, "" for the table's default.
	Stream           string
	Partitions       int
	DeadLetterStream string
	// Format is the entry format of the format flags.
	Format entry.Format
	// EnsureGroups are the --ensure-group names, trimmed.
	EnsureGroups []string
	DedupeWindow time.Duration

	// Trim is --trim (off or acked), with --max-len and --trim-interval.
	Trim         string
	MaxLen       int64
	TrimInterval time.Duration

	// The lag probe, /readyz and the consumer group metrics.
	ProbeInterval        time.Duration
	ReadyMaxStall        time.Duration
	GroupMetrics         bool
	GroupMetricsInterval time.Duration
	// GroupIdleThreshold is --group-idle-threshold: a consumer that has
	// not read for longer is idle in the group metrics.
	GroupIdleThreshold time.Duration

	// Poll mode.
	PollInterval     time.Duration
	BatchSize        int
	MaxBatchBytes    int
	OnSent           string
	MaxPayloadBytes  int
	ShutdownGrace    time.Duration
	PollListInterval time.Duration
}

// Range is the valid values of one command flag. Every flag's range is in
// one table (Ranges), which the command line checks each flag it was given
// against before it runs anything, whichever command takes it (CheckFlag);
// Options.Validate checks what the flags say together.
type Range struct {
	// Flag is the flag's name without dashes.
	Flag string
	// Commands are the commands, by path ("run", "schema print"), whose
	// flag of that name the range is, where commands give one name
	// different values; nil for every command that takes the flag.
	Commands []string
	// Want says what is valid, for the error.
	Want string
	// ok says whether a value of the flag (int, int64, time.Duration or
	// string, as urfave/cli's Context.Value returns it) is valid.
	ok func(value any) bool
}

// Bounds of the flags whose components have none of their own.
const (
	// maxBatch bounds --max-batch-events, the events of one Redis round
	// trip.
	maxBatch    = 100000
	minDuration = time.Millisecond
	// maxHeartbeat: a connection is rebuilt after three silent periods,
	// and a longer wait would hide a dead one for hours.
	maxHeartbeat   = time.Hour
	minLeaseTTL    = 100 * time.Millisecond
	maxPortNumber  = 65535
	anyPositiveInt = math.MaxInt
	// minTxBytes: below it nearly every transaction overflows the buffer
	// and is read twice, with a log line each time (--max-tx-bytes 1 was
	// accepted and doubled the binlog reading).
	minTxBytes = 64 << 10
	// maxBackfillRate: more a second than one Redis appends while it
	// serves the relay would only mean "unbounded"; 0 says that.
	maxBackfillRate = 1000000
)

// Ranges are the valid values of the flags of every command: run and check,
// the commands that share their flags (status, verify, mark-appended,
// position), and the flags of the operator's commands (backfill, verify,
// repair, cleanup). A flag that two commands share has one range. A
// component would otherwise take 0 or "" for its default without a word.
func Ranges() []Range {
	return []Range{
		intIn("partitions", 1, entry.MaxPartitions),
		nonEmpty("stream", "a stream key template, e.g. outbox:{aggregate_type}"),
		nonEmpty("dead-letter-stream", "a stream key, e.g. outbox:dead-letter"),
		intIn("max-batch-events", 1, maxBatch),
		intIn("max-tx-bytes", minTxBytes, anyPositiveInt),
		intIn("event-cache-bytes", 1, anyPositiveInt),
		durationIn("heartbeat", minDuration, maxHeartbeat),
		// Each alone; whether the renewals come often enough for the TTL
		// is Validate's (checkLease).
		durationIn("lease-ttl", minLeaseTTL, 0),
		durationIn("lease-renew", minDuration, 0),
		durationIn("lease-step-down", 0, 0),
		{Flag: "start-from", Want: "now, earliest, <file>:<offset> or a GTID set", ok: func(v any) bool {
			_, err := position.ParseStart(v.(string))
			return err == nil
		}},
		{Flag: "metrics-addr", Want: "empty (off) or host:port, e.g. :9108", ok: func(v any) bool { return v == "" || hostPort(v.(string)) }},
		{Flag: "trim", Want: TrimOff + " or " + TrimAcked, ok: func(v any) bool {
			_, err := ParseTrim(v.(string))
			return err == nil
		}},
		durationIn("trim-interval", minDuration, 0),
		intIn("max-len", 0, math.MaxInt64),
		durationIn("probe-interval", minDuration, 0),
		durationIn("ready-max-stall", minDuration, 0),
		durationIn("group-metrics-interval", minDuration, 0),
		durationIn("group-idle-threshold", minDuration, 0),
		durationIn("poll-interval", minDuration, 0),
		intIn("batch-size", 1, poller.MaxBatchSize),
		intIn("max-batch-bytes", 1, anyPositiveInt),
		oneOf("on-sent", poller.OnSentMark, poller.OnSentDelete),
		durationIn("dedupe-window", 0, 0),
		intIn("max-payload-bytes", 1, anyPositiveInt),
		durationIn("shutdown-grace", minDuration, 0),
		durationIn("poll-list-interval", minDuration, 0),
		durationIn("timeout", minDuration, 0),
		// backfill's entries per second; 0 lifts the bound.
		intIn("rate", 0, maxBackfillRate),
		// verify's and repair's walk, and repair's refusal of foreign
		// entries.
		intIn("chunk-rows", 1, anyPositiveInt),
		intIn("page-entries", 1, anyPositiveInt),
		intIn("accept-foreign", 0, anyPositiveInt).wanting("the count of foreign entries a dry run reported, 0 or more"),
		oneOf("snapshot", admin.SnapshotAuto, admin.SnapshotStatus, admin.SnapshotLock),
		// --mode of run and check, and repair's for a Redis that lost
		// the relay's state, where it can only say which; schema print's
		// --format.
		oneOf("mode", mode.Binlog, mode.Poll, mode.Auto).of("run", "check"),
		oneOf("mode", mode.Binlog, mode.Poll).of("repair"),
		oneOf("format", "sql", "laravel").of("schema print"),
		// cleanup's DELETEs, and its and verify's wait for the relay.
		intIn("batch", 1, admin.MaxCleanupBatch),
		durationIn("pause", 0, 0),
		durationIn("wait", 0, 0),
	}
}

// For says whether r is the range of the flag of command (its path, e.g.
// "schema print").
func (r Range) For(command string) bool {
	return r.Commands == nil || slices.Contains(r.Commands, command)
}

// of is r for the commands alone.
func (r Range) of(commands ...string) Range {
	r.Commands = commands
	return r
}

// wanting is r saying want of what is valid.
func (r Range) wanting(want string) Range {
	r.Want = want
	return r
}

// CheckFlag refuses a value of the flag name of command (its path, e.g.
// "schema print") outside its range, naming the flag, env (its environment
// variable, "" for none) and the range, and def, the flag's default as
// --help shows it ("" for none), in the hint. A flag without a range
// passes.
func CheckFlag(command, name string, value any, env, def string) error {
	for _, r := range Ranges() {
		if r.Flag != name || !r.For(command) || r.ok(value) {
			continue
		}
		given := "--" + name
		if env != "" {
			given += " (or " + env + ")"
		}
		if def != "" {
			def = " (" + def + ")"
		}
		return outbox.WithHint(fmt.Errorf("%w: --%s %s is not valid: want %s", outbox.ErrConfig, name, shown(value), r.Want),
			"set %s within that range, or leave it out for the default%s", given, def)
	}
	return nil
}

// shown is a flag's value as an error quotes it: a string quoted, so that
// an empty one shows.
func shown(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// intIn is an integer flag from lo to hi.
func intIn(name string, lo, hi int64) Range {
	want := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	if hi == anyPositiveInt || hi == math.MaxInt64 {
		want = fmt.Sprintf("a whole number of at least %d", lo)
	}
	return Range{Flag: name, Want: want, ok: func(v any) bool {
		var n int64
		switch x := v.(type) {
		case int:
			n = int64(x)
		case int64:
			n = x
		default:
			return false
		}
		return n >= lo && n <= hi
	}}
}

// durationIn is a duration flag from lo to hi; hi 0 is no bound.
func durationIn(name string, lo, hi time.Duration) Range {
	want := fmt.Sprintf("a duration of at least %s, e.g. 5s", lo)
	if lo == 0 {
		want = "a duration of at least 0 (off), e.g. 30s"
	}
	if hi > 0 {
		want = fmt.Sprintf("a duration from %s to %s", lo, hi)
	}
	return Range{Flag: name, Want: want, ok: func(v any) bool {
		d, ok := v.(time.Duration)
		return ok && d >= lo && (hi == 0 || d <= hi)
	}}
}

func nonEmpty(name, want string) Range {
	return Range{Flag: name, Want: want, ok: func(v any) bool {
		s, ok := v.(string)
		return ok && strings.TrimSpace(s) != ""
	}}
}

// oneOf is a flag that takes one of values, in any letter case.
func oneOf(name string, values ...string) Range {
	want := values[len(values)-1]
	if n := len(values); n > 1 {
		want = strings.Join(values[:n-1], ", ") + " or " + want
	}
	return Range{Flag: name, Want: want, ok: func(v any) bool {
		s, _ := v.(string)
		for _, want := range values {
			if strings.EqualFold(s, want) {
				return true
			}
		}
		return false
	}}
}

// hostPort says addr is host:port with a port number, as net.Listen takes.
func hostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= maxPortNumber
}

// Values of --trim.
const (
	TrimOff   = "off"
	TrimAcked = "acked"
)

// ParseTrim reads --trim: whether it trims acknowledged entries.
func ParseTrim(s string) (acked bool, err error) {
	switch strings.ToLower(s) {
	case TrimOff:
		return false, nil
	case TrimAcked:
		return true, nil
	}
	return false, outbox.WithHint(fmt.Errorf("%w: --trim %q: want off or acked", outbox.ErrConfig, s), "use --trim acked to trim what every consumer group acknowledged, or --trim off")
}

// checkLease refuses lease timings under which a holder would step down at
// the first missed renewal: what --lease-ttl and --lease-renew say
// together (each alone is in Ranges).
func checkLease(ttl, renew time.Duration) error {
	if renew > ttl/3 {
		return outbox.WithHint(fmt.Errorf("%w: --lease-ttl %s with --lease-renew %s: the renewals must come at most a third of the TTL apart", outbox.ErrConfig, ttl, renew),
			"keep the defaults (--lease-ttl 5s --lease-renew 1s), or renew at least three times per TTL so that a missed renewal does not make the holder step down")
	}
	return nil
}

// Validate refuses what the options say together that run would refuse at
// start, with its fix: the lease's renewals too rare for its TTL. Each
// option alone is its flag's to check, as the command line reads it, by
// the one table of every command's flags (Ranges, CheckFlag). The
// preflight reports the result as the settings check
// (preflight.Start.Refused), so check says what run would refuse; what
// depends on the table (the sink's stream template against its columns)
// the preflight checks itself.
func (o Options) Validate() error {
	return checkLease(o.LeaseTTL, o.LeaseRenew)
}
