package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// readyTimeout bounds the readiness check of a scrape.
const readyTimeout = 5 * time.Second

// Lag is how far behind the relay is, as the lag monitor last sampled it and
// as seen at a moment (an age grows between samples). A figure whose Known
// is false is left out of the scrape rather than shown as 0.
type Lag struct {
	// Sampled is false before the first sample: nothing is reported.
	Sampled bool
	// Seconds is the age of the oldest committed event not yet appended.
	Seconds      float64
	SecondsKnown bool
	// Unsent counts the unsent rows (poll mode).
	Unsent int64
	// BytesBehind is the binlog between the stored position and the
	// server's end (binlog mode).
	BytesBehind      int64
	BytesBehindKnown bool
	// Headroom is the seconds until the server may purge the binlog file
	// the position points into (binlog mode).
	Headroom      float64
	HeadroomKnown bool
}

// lagCollector exposes the lag monitor's last sample and the readiness.
type lagCollector struct {
	mode  string
	ready Readiness
	lag   func(now time.Time) Lag

	lagSeconds, bytesBehind, headroom, unsent, oldestAge, readyDesc *prometheus.Desc
}

// LagCollector exposes how far behind the relay is, as lag computes it at
// each scrape, and whether it is ready. mode is "binlog" or "poll".
func LagCollector(mode string, ready Readiness, lag func(now time.Time) Lag) prometheus.Collector {
	return &lagCollector{
		mode: mode, ready: ready, lag: lag,
		lagSeconds: desc(mode, "lag_seconds", "Age of the oldest committed event not yet appended; 0 when caught up. Sampled every --probe-interval."),
		bytesBehind: desc(mode, "bytes_behind",
			"Binlog bytes between the stored position and the end of the server's binlog."),
		headroom: desc(mode, "binlog_retention_headroom_seconds",
			"Seconds until the server may purge the binlog file the stored position points into: +Inf while it is the current file or the server does not expire binlogs, 0 when it may purge it at its next rotation. Alert below 3600."),
		unsent:    desc(mode, "unsent_rows", "Unsent rows in the outbox table (counted up to 1,000,000)."),
		oldestAge: desc(mode, "oldest_unsent_age_seconds", "Age of the oldest unsent row, by its occurred_at; 0 when none is unsent."),
		readyDesc: desc(mode, "ready", "1 when the relay is ready (MySQL and Redis answer, it is not retrying, not stuck), as /readyz says; else 0."),
	}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagSeconds
	ch <- c.readyDesc
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
	ok, _ := c.ready(ctx)
	cancel()
	gauge(c.readyDesc, bool01(ok))
	l := c.lag(time.Now())
	if !l.Sampled {
		return
	}
	if l.SecondsKnown {
		gauge(c.lagSeconds, l.Seconds)
	}
	if c.mode == "poll" {
		gauge(c.unsent, float64(l.Unsent))
		if l.SecondsKnown {
			gauge(c.oldestAge, l.Seconds)
		}
		return
	}
	if l.BytesBehindKnown {
		gauge(c.bytesBehind, float64(l.BytesBehind))
	}
	if l.HeadroomKnown {
		gauge(c.headroom, l.Headroom)
	}
}
