package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Defaults of the consumer group metrics.
const (
	DefaultGroupInterval = 30 * time.Second
	// MaxGroupStreams bounds the streams one pass reads XINFO GROUPS of;
	// a stream template with a key per aggregate can name millions.
	MaxGroupStreams = 1000
)

// Group is one consumer group of a stream, as XINFO GROUPS shows it.
type Group struct {
	Stream, Group string
	// Pending counts the entries delivered and not acknowledged; Lag the
	// entries not yet delivered, -1 when Redis cannot tell (after XDEL or
	// trimming, or before Redis 7).
	Pending, Lag int64
}

// Groups exposes per consumer group pending entries and lag. XINFO GROUPS
// runs on a loop of its own every interval, never at scrape time: a scrape
// shows the last pass, whatever the number of streams or scrapers.
type Groups struct {
	read     func(ctx context.Context) ([]Group, error)
	interval time.Duration
	log      *slog.Logger

	pending, lag *prometheus.Desc

	mu   sync.Mutex
	last []Group
}

// NewGroups returns the collector; read lists the groups (at most
// MaxGroupStreams streams; with an error, those it could read), Run calls it
// every interval (default 30s).
func NewGroups(mode string, read func(ctx context.Context) ([]Group, error), interval time.Duration, logger *slog.Logger) *Groups {
	if interval <= 0 {
		interval = DefaultGroupInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	labels := prometheus.Labels{"mode": mode}
	return &Groups{
		read: read, interval: interval, log: logger.With("component", "metrics"),
		pending: prometheus.NewDesc(namespace+"_group_pending", "Entries delivered to the consumer group and not acknowledged (XINFO GROUPS pending).", []string{"stream", "group"}, labels),
		lag:     prometheus.NewDesc(namespace+"_group_lag", "Entries of the stream not yet delivered to the consumer group (XINFO GROUPS lag); absent when Redis cannot tell.", []string{"stream", "group"}, labels),
	}
}

// Step reads the groups once. A pass that read some streams and failed on
// others shows what it read.
func (g *Groups) Step(ctx context.Context) error {
	groups, err := g.read(ctx)
	if err != nil && len(groups) == 0 {
		return err
	}
	g.mu.Lock()
	g.last = groups
	g.mu.Unlock()
	return err
}

// Run reads the groups every interval until ctx is cancelled; a failure
// keeps the last pass and is logged once until a pass succeeds.
func (g *Groups) Run(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	failing := false
	for {
		err := g.Step(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			g.log.Warn("reading consumer groups failed; the group metrics show the last pass", logging.KeyError, err)
			failing = true
		case err == nil:
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Describe implements prometheus.Collector.
func (g *Groups) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.pending
	ch <- g.lag
}

// Collect implements prometheus.Collector.
func (g *Groups) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	groups := g.last
	g.mu.Unlock()
	for _, gr := range groups {
		ch <- prometheus.MustNewConstMetric(g.pending, prometheus.GaugeValue, float64(gr.Pending), gr.Stream, gr.Group)
		if gr.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(g.lag, prometheus.GaugeValue, float64(gr.Lag), gr.Stream, gr.Group)
		}
	}
}
