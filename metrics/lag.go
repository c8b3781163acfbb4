package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/binlog-outbox/binlog-outbox/lag"
)

// readyTimeout bounds the readiness check of a scrape.
const readyTimeout = 5 * time.Second

// lagCollector exposes the lag monitor's last sample and the readiness.
// The figures are computed at scrape time from the sample (an age grows
// between samples), and left out while unknown rather than shown as 0.
type lagCollector struct {
	mode string
	mon  *lag.Monitor

	lagSeconds, bytesBehind, headroom, unsent, oldestAge, ready *prometheus.Desc
}

// LagCollector exposes how far behind the relay is, as the monitor sampled
// it, and whether it is ready. mode is "binlog" or "poll".
func LagCollector(mode string, mon *lag.Monitor) prometheus.Collector {
	return &lagCollector{
		mode: mode, mon: mon,
		lagSeconds: desc(mode, "lag_seconds", "Age of the oldest committed event not yet appended; 0 when caught up. Sampled every --probe-interval."),
		bytesBehind: desc(mode, "bytes_behind",
			"Binlog bytes between the stored position and the end of the server's binlog."),
		headroom: desc(mode, "binlog_retention_headroom_seconds",
			"Seconds until the server may purge the binlog file the stored position points into: +Inf while it is the current file or the server does not expire binlogs, 0 when it may purge it at its next rotation. Alert below 3600."),
		unsent:    desc(mode, "unsent_rows", "Unsent rows in the outbox table (counted up to 1,000,000)."),
		oldestAge: desc(mode, "oldest_unsent_age_seconds", "Age of the oldest unsent row, by its occurred_at; 0 when none is unsent."),
		ready:     desc(mode, "ready", "1 when the relay is ready (MySQL and Redis answer, it is not retrying, not stuck), as /readyz says; else 0."),
	}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagSeconds
	ch <- c.ready
	if c.mode == "poll" {
		ch <- c.unsent
		ch <- c.oldestAge
		return
	}
	ch <- c.bytesBehind
	ch <- c.headroom
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	ok, _ := c.mon.Ready(ctx)
	cancel()
	gauge(c.ready, map[bool]float64{true: 1, false: 0}[ok])
	s := c.mon.Latest()
	if s.At.IsZero() {
		return
	}
	now := time.Now()
	if secs, ok := s.SecondsBehind(now); ok {
		gauge(c.lagSeconds, secs)
	}
	if c.mode == "poll" {
		gauge(c.unsent, float64(s.Backlog.Unsent))
		if secs, ok := s.SecondsBehind(now); ok {
			gauge(c.oldestAge, secs)
		}
		return
	}
	if s.Binlog.BehindKnown {
		gauge(c.bytesBehind, float64(s.Binlog.BytesBehind))
	}
	if h, ok := s.Binlog.Retention.Headroom(now); ok {
		gauge(c.headroom, h)
	}
}
