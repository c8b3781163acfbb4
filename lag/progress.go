package lag

import (
	"math"
	"time"
)

// A catch-up is logged while the relay is behind by at least one of these.
const (
	catchUpSeconds = 10
	catchUpBytes   = 64 << 20
	catchUpRows    = 10000
)

// progress follows a catch-up across samples: a line every ProgressEvery
// while far behind (rates, backlog, ETA), and one when it is over. It does
// no I/O; Monitor.Step feeds it.
type progress struct {
	catching bool
	since    time.Time // when the catch-up began
	events   uint64    // the relay's events then
	lastLog  time.Time

	prev      Sample
	prevRelay Relay
}

// progressLine is a log line the monitor prints.
type progressLine struct {
	msg   string
	attrs []any
}

// observe takes the next sample and says what to log, nil for nothing.
func (p *progress) observe(s Sample, r Relay, every time.Duration) *progressLine {
	prev, prevRelay := p.prev, p.prevRelay
	p.prev, p.prevRelay = s, r
	amount, known, pending := s.behind()
	if !known {
		return nil
	}
	secs, secsKnown := s.SecondsBehind(s.At)
	limit := int64(catchUpBytes)
	if s.Mode == modePoll {
		limit = catchUpRows
	}
	far := pending && ((secsKnown && secs >= catchUpSeconds) || amount >= limit)
	switch {
	case far && !p.catching:
		p.catching, p.since, p.events, p.lastLog = true, s.At, r.Events, time.Time{}
	case !far && p.catching:
		p.catching = false
		attrs := []any{"took", s.At.Sub(p.since).Round(time.Second), "events", r.Events - p.events}
		return &progressLine{msg: "caught up", attrs: append(attrs, p.backlogAttrs(s, amount, secs, secsKnown)...)}
	case !far:
		return nil
	}
	if !p.lastLog.IsZero() && s.At.Sub(p.lastLog) < every {
		return nil
	}
	p.lastLog = s.At
	attrs := p.backlogAttrs(s, amount, secs, secsKnown)
	prevAmount, prevKnown, _ := prev.behind()
	dt := s.At.Sub(prev.At).Seconds()
	if !prevKnown || dt <= 0 || r.Events < prevRelay.Events {
		return &progressLine{msg: "catching up", attrs: attrs}
	}
	attrs = append(attrs, "events_per_second", int64(math.Round(float64(r.Events-prevRelay.Events)/dt)))
	if s.Mode == modeBinlog {
		if read, ok := s.Binlog.Server.Distance(prev.Binlog.File, prev.Binlog.Pos, s.Binlog.File, s.Binlog.Pos); ok {
			attrs = append(attrs, "bytes_per_second", int64(math.Round(float64(read)/dt)))
		}
	}
	if gained := float64(prevAmount-amount) / dt; gained > 0 {
		attrs = append(attrs, "eta", (time.Duration(float64(amount)/gained) * time.Second).Round(time.Second))
	} else {
		attrs = append(attrs, "eta", "none: the backlog is not shrinking")
	}
	return &progressLine{msg: "catching up", attrs: attrs}
}

// backlogAttrs are how far behind the relay is, in the mode's unit.
func (p *progress) backlogAttrs(s Sample, amount int64, secs float64, secsKnown bool) []any {
	key := "bytes_behind"
	if s.Mode == modePoll {
		key = "unsent_rows"
	}
	attrs := []any{key, amount}
	if secsKnown {
		attrs = append(attrs, "seconds_behind", int64(math.Round(secs)))
	}
	return attrs
}
