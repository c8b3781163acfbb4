package lag

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/poller"
)

// Defaults of MonitorConfig.
const (
	DefaultInterval = 10 * time.Second
	DefaultMaxStall = time.Minute
	// readyCache is how long a readiness answer is reused: a probe polled
	// many times a second pings the servers once.
	readyCache = time.Second
	// pingTimeout bounds each readiness ping.
	pingTimeout = 2 * time.Second
)

// Relay is what the monitor learns from the running relay at each look.
type Relay struct {
	// Events counts the events relayed so far.
	Events uint64
	// LastProgress is when the relay last stored progress (an append, a
	// checkpoint of the position, a marked round); zero before the first.
	LastProgress time.Time
	// Retrying is the error the relay is retrying after, "" when it is not.
	Retrying string
	// File and Pos are, in binlog mode, the position last stored; File is
	// "" before the first (or in GTID mode before the first rotate).
	File string
	Pos  uint32
	// Standby is set while the relay waits for the lease another relay
	// holds: it measures nothing (its own position is not the one being
	// advanced) and is ready, doing what it should.
	Standby bool
}

// MonitorConfig configures a Monitor. Relay, PingMySQL and PingRedis are
// required, and Binlog (binlog mode) or Poll (poll mode).
type MonitorConfig struct {
	// Interval is how often the monitor samples (default 10s): a few
	// cheap statements (SHOW BINARY LOGS and the binlog status, or two
	// index reads of the outbox) and, only while the relay is behind or
	// its position's file changed, a short binlog dump.
	Interval time.Duration
	// MaxStall is how long the relay may be behind without storing
	// progress before it is reported not ready (default 1m).
	MaxStall time.Duration
	// ProgressEvery is how often a catch-up is logged (default 10s, or
	// Interval when that is longer): a short Interval must not flood the
	// log.
	ProgressEvery time.Duration

	Relay     func() Relay
	Binlog    *Binlog
	Poll      func(ctx context.Context) (poller.Backlog, error)
	PingMySQL func(ctx context.Context) error
	PingRedis func(ctx context.Context) error
}

func (c *MonitorConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxStall <= 0 {
		c.MaxStall = DefaultMaxStall
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = max(c.Interval, DefaultInterval)
	}
}

// Sample is the monitor's last measurement.
type Sample struct {
	// At is when it was taken; zero before the first.
	At time.Time
	// Err is why the last measurement failed; the figures are then
	// those of the last one that did not.
	Err error
	// Binlog is binlog mode's measurement, Backlog poll mode's.
	Binlog  BinlogSample
	Backlog poller.Backlog
	// Mode is "binlog" or "poll".
	Mode string
}

// SecondsBehind is the age of the oldest event not relayed: 0 when caught
// up; ok is false when unknown.
func (s Sample) SecondsBehind(now time.Time) (float64, bool) {
	if s.At.IsZero() {
		return 0, false
	}
	if s.Mode == modePoll {
		if s.Backlog.Unsent == 0 {
			return 0, true
		}
		if !s.Backlog.OldestKnown {
			return 0, false
		}
		return max(now.Sub(s.Backlog.Oldest).Seconds(), 0), true
	}
	return s.Binlog.SecondsBehind(now)
}

// behind is the backlog in the mode's unit (bytes of binlog, unsent rows),
// known false when it is unknown, and whether anything is to be relayed in
// it (bytes of the server's own events are not).
func (s Sample) behind() (amount int64, known, pending bool) {
	if s.At.IsZero() {
		return 0, false, false
	}
	if s.Mode == modePoll {
		return s.Backlog.Unsent, true, s.Backlog.Unsent > 0
	}
	return s.Binlog.BytesBehind, s.Binlog.BehindKnown, s.Binlog.Pending()
}

const (
	modeBinlog = "binlog"
	modePoll   = "poll"
)

// Monitor samples how far behind the relay is, logs the progress of a long
// catch-up, and answers readiness. Its connections are its own, never the
// relay's.
type Monitor struct {
	cfg     MonitorConfig
	log     *slog.Logger
	started time.Time
	mode    string

	mu     sync.Mutex
	last   Sample
	prog   progress
	readyT time.Time
	ready  bool
	why    string
}

// NewMonitor returns a Monitor; Run or Step sample.
func NewMonitor(cfg MonitorConfig, logger *slog.Logger) (*Monitor, error) {
	cfg.setDefaults()
	switch {
	case cfg.Relay == nil || cfg.PingMySQL == nil || cfg.PingRedis == nil:
		return nil, fmt.Errorf("lag: Relay, PingMySQL and PingRedis are required")
	case (cfg.Binlog == nil) == (cfg.Poll == nil):
		return nil, fmt.Errorf("lag: exactly one of Binlog and Poll is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{cfg: cfg, log: logger.With("component", "lag"), started: time.Now(), mode: modeBinlog}
	if cfg.Poll != nil {
		m.mode = modePoll
	}
	m.last.Mode = m.mode
	return m, nil
}

// Run samples every Interval until ctx is cancelled. A failing sample is
// logged once per kind (the relay's own loop reports the outage itself).
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	lastErr := ""
	for {
		err := m.Step(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && err.Error() != lastErr:
			m.log.Warn("lag probe failed; metrics show the last measurement", logging.KeyError, err)
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step takes one sample and logs the catch-up's progress.
func (m *Monitor) Step(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Interval+DefaultDumpTimeout)
	defer cancel()
	relay := m.cfg.Relay()
	if relay.Standby {
		// The holder's figures are the ones that mean something; a
		// standby's would be of a position it no longer advances.
		m.mu.Lock()
		m.last = Sample{}
		m.prog = progress{}
		m.mu.Unlock()
		return nil
	}
	m.mu.Lock()
	s := m.last
	m.mu.Unlock()
	var err error
	if m.mode == modePoll {
		var b poller.Backlog
		if b, err = m.cfg.Poll(ctx); err == nil {
			s.Backlog = b
		}
	} else {
		var b BinlogSample
		if b, err = m.cfg.Binlog.Measure(ctx, relay.File, relay.Pos); err == nil {
			s.Binlog = b
		}
	}
	s.Err = err
	if err == nil || s.At.IsZero() {
		s.At = time.Now()
	}
	m.mu.Lock()
	m.last = s
	var line *progressLine
	if err == nil {
		line = m.prog.observe(s, relay, m.cfg.ProgressEvery)
	}
	m.mu.Unlock()
	if line != nil {
		m.log.Info(line.msg, line.attrs...)
	}
	return err
}

// Latest returns the last sample.
func (m *Monitor) Latest() Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Ready reports whether the relay does its job: MySQL and Redis answer, the
// relay is not retrying after an error, and it is not behind without
// progress for longer than MaxStall. The reason is one line, "ready" when
// ready. Answers are reused for a second.
func (m *Monitor) Ready(ctx context.Context) (bool, string) {
	m.mu.Lock()
	if time.Since(m.readyT) < readyCache {
		defer m.mu.Unlock()
		return m.ready, m.why
	}
	m.mu.Unlock()
	ok, why := m.readiness(ctx)
	m.mu.Lock()
	m.readyT, m.ready, m.why = time.Now(), ok, why
	m.mu.Unlock()
	return ok, why
}

func (m *Monitor) readiness(ctx context.Context) (bool, string) {
	ping := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, pingTimeout)
		defer cancel()
		return f(ctx)
	}
	if err := ping(m.cfg.PingMySQL); err != nil {
		return false, "mysql unreachable: " + logging.Truncate(err.Error(), 200)
	}
	if err := ping(m.cfg.PingRedis); err != nil {
		return false, "redis unreachable: " + logging.Truncate(err.Error(), 200)
	}
	r := m.cfg.Relay()
	if r.Standby {
		return true, "ready: standby, waiting for the lease"
	}
	if r.Retrying != "" {
		return false, "the relay is retrying after an error: " + logging.Truncate(r.Retrying, 200)
	}
	s := m.Latest()
	amount, _, pending := s.behind()
	if !pending {
		return true, "ready"
	}
	since := r.LastProgress
	if since.Before(m.started) {
		since = m.started
	}
	// Progress after the sample may have caught up already.
	if stalled := time.Since(since); since.Before(s.At) && stalled > m.cfg.MaxStall {
		return false, fmt.Sprintf("stuck: %d %s behind and no progress for %s", amount, m.unit(), stalled.Round(time.Second))
	}
	return true, "ready"
}

// unit names what Sample.behind counts.
func (m *Monitor) unit() string {
	if m.mode == modePoll {
		return "unsent rows"
	}
	return "bytes of binlog"
}
