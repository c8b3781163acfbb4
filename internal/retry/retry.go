// Package retry is the one error and retry policy of the relay's loops (the
// binlog reader's and the poller's): which errors are final, how long to wait
// before the next attempt, and how a failing attempt is logged.
//
// A dependency that stays down must not flood the log: a loop retrying Redis
// at maxmemory every 100ms would log an ERROR line, hint included, at every
// attempt (TestReader_RedisOutOfMemoryLosesNothing checks that it logs one
// line and the hint once). A Policy logs the first failure with its hint, counts the
// repeats of the same error and logs them at most once per RepeatEvery, and
// says in one line when the loop recovered.
package retry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Final reports whether retrying err cannot help: the same configuration hits
// it again (outbox.ErrConfig, which the sub-packages' sentinels for an unfit
// table or server wrap), another relay fenced this one (outbox.ErrFenced), or
// the stored position points into a binlog that is gone
// (outbox.ErrPositionGone), or a repair holds it (outbox.ErrRepairing). A loop returns a final error to its caller, which
// prints it with its hint, instead of logging it.
func Final(err error) bool {
	return errors.Is(err, outbox.ErrConfig) || errors.Is(err, outbox.ErrFenced) || errors.Is(err, outbox.ErrPositionGone) ||
		errors.Is(err, outbox.ErrRepairing)
}

// Defaults of Config.
const (
	DefaultFirstWait   = 100 * time.Millisecond
	DefaultMaxWait     = 30 * time.Second
	DefaultRepeatEvery = 30 * time.Second
)

// Config configures a Policy.
type Config struct {
	// Message is the log message of a failed attempt, e.g. "binlog reader
	// stopped; restarting from the stored position".
	Message string
	// FirstWait is the wait after the first failure (default 100ms); each
	// further failure doubles it, up to MaxWait (default 30s). Progress
	// starts over at FirstWait.
	FirstWait time.Duration
	MaxWait   time.Duration
	// RepeatEvery is how often a failure of the same kind as the one
	// logged last (the same hint, else the same text) is logged again
	// (default 30s), with the number of repeats not logged in between. The
	// kind only decides whether a line is printed, never what the loop does.
	RepeatEvery time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.FirstWait <= 0 {
		c.FirstWait = DefaultFirstWait
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	c.MaxWait = max(c.MaxWait, c.FirstWait)
	if c.RepeatEvery <= 0 {
		c.RepeatEvery = DefaultRepeatEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Policy decides, for one loop, what a failed attempt leads to. Failed and
// Progressed may be called from different goroutines (the binlog reader
// records progress from its flusher).
type Policy struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// wait is the wait after the next failure.
	wait time.Duration
	// failed counts the failures since the last progress; since is when
	// the first of them happened.
	failed int
	since  time.Time
	// logged is set when a failure since the last progress was logged, so
	// that the recovery is logged too.
	logged bool
	// lastKind and lastAt are the kind (failureKind) and time of the last
	// logged failure, repeats the failures of that kind not logged since.
	lastKind string
	lastAt   time.Time
	repeats  int
	// lastText is the text of the last failure, logged or not (Failure).
	lastText string
}

// failureKind is what makes two failures the same for the log: their hint,
// which names the cause and the operator's fix, else their text. Texts of
// one cause differ in what they count (a retried batch holds whatever was
// received by then: "append 2 events", "append 30 events"), and comparing
// them made every retry a new line with the hint again.
func failureKind(err error) string {
	if hint := outbox.HintOf(err); hint != "" {
		return "hint: " + hint
	}
	return err.Error()
}

// New returns a Policy that logs to logger.
func New(logger *slog.Logger, cfg Config) *Policy {
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Policy{cfg: cfg, log: logger, wait: cfg.FirstWait}
}

// Failed records a failed attempt. A final error (see Final) comes back as
// final, unlogged: the loop returns it. Any other error is logged (the first
// of a kind with its hint, repeats at most once per RepeatEvery) and Failed
// returns how long to wait before the next attempt.
func (p *Policy) Failed(err error) (wait time.Duration, final error) {
	if Final(err) {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	wait = p.wait
	p.wait = min(2*p.wait, p.cfg.MaxWait)
	if p.failed == 0 {
		p.since = now
	}
	p.failed++
	// Comparing kinds only decides whether to print a line; what the loop
	// does was decided above, by Final.
	kind := failureKind(err)
	p.lastText = err.Error()
	if kind == p.lastKind && now.Sub(p.lastAt) < p.cfg.RepeatEvery {
		p.repeats++
		return wait, nil
	}
	attrs := []any{logging.KeyError, p.lastText}
	if kind == p.lastKind && p.logged {
		// The operator saw the hint with this kind's first line.
		attrs = append(attrs, "repeats", p.repeats)
	} else {
		if hint := outbox.HintOf(err); hint != "" {
			attrs = append(attrs, logging.KeyHint, hint)
		}
		if kind == p.lastKind && p.repeats > 0 {
			attrs = append(attrs, "repeats", p.repeats)
		}
	}
	if p.failed > 1 {
		attrs = append(attrs, "failing_for", now.Sub(p.since).Round(time.Millisecond))
	}
	attrs = append(attrs, "retry_in", wait)
	p.log.Error(p.cfg.Message, attrs...)
	p.lastKind, p.lastAt, p.repeats, p.logged = kind, now, 0, true
	return wait, nil
}

// Progressed records that the loop got something done: the next failure
// waits FirstWait again, and when a failure was logged since the last
// progress, one line says the loop recovered.
func (p *Policy) Progressed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logged {
		p.log.Info("recovered", "failed_attempts", p.failed, "failing_for", p.cfg.Now().Sub(p.since).Round(time.Millisecond))
	}
	// lastKind and lastAt stay: an error that comes back within
	// RepeatEvery of its last line, after a short recovery, is a repeat.
	p.wait, p.failed, p.logged = p.cfg.FirstWait, 0, false
}

// Failing reports whether the last attempt failed and nothing progressed
// since, for a loop that logs its routine steps more quietly meanwhile.
func (p *Policy) Failing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed > 0
}

// FailingFor returns how long the loop has been failing: since the first
// failure after the last progress, 0 while it is not failing.
func (p *Policy) FailingFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == 0 {
		return 0
	}
	return p.cfg.Now().Sub(p.since)
}

// Failure returns the text of the last failure while the loop is failing
// (nothing progressed since), "" otherwise: why a loop is not ready.
func (p *Policy) Failure() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == 0 {
		return ""
	}
	return p.lastText
}

// Sleep waits d, or less when ctx is done; it reports whether ctx is still
// live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every calls step every period until ctx is done or step returns false.
// It is the loop of a renewal (a lease, a server id claim): the first call
// comes one period after the start, which took or claimed the thing, and a
// step that fails says true to try again at the next tick.
func Every(ctx context.Context, period time.Duration, step func(ctx context.Context) (again bool)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !step(ctx) {
			return
		}
	}
}
