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

// Group is one consumer group of a stream (redisadmin.GroupHealth).
type Group struct {
	Stream, Group string
	// Pending counts the entries delivered and not acknowledged; Lag the
	// entries not yet delivered, counted from the stream's ids.
	Pending, Lag int64
	// Consumers counts the group's consumers, IdleConsumers those that
	// have not read for longer than --group-idle-threshold.
	Consumers, IdleConsumers int64
	// OldestPendingAge and OldestPendingDeliveries are the age and the
	// delivery count of the pending entry of the lowest id; 0 when none is
	// pending.
	OldestPendingAge        time.Duration
	OldestPendingDeliveries int64
	// HoldsBackTrim says --trim acked stops at this group; TrimHeldAge is
	// the age of the first entry it keeps (0 when it keeps none).
	HoldsBackTrim bool
	TrimHeldAge   time.Duration
}

// Groups exposes the health of every consumer group: pending entries, lag,
// idle consumers, the oldest pending entry, whether it holds back
// trimming. The reads run on a loop of its own every interval, never at scrape time: a scrape
// shows the last pass, whatever the number of streams or scrapers.
type Groups struct {
	read     func(ctx context.Context) ([]Group, error)
	interval time.Duration
	log      *slog.Logger

	pending, lag, consumers, idle, oldestAge, deliveries, holdsBack, heldAge *prometheus.Desc

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
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_group_"+name, help, []string{"stream", "group"}, labels)
	}
	return &Groups{
		read: read, interval: interval, log: logger.With("component", "metrics"),
		pending:    desc("pending", "Entries delivered to the consumer group and not acknowledged (XINFO GROUPS pending)."),
		lag:        desc("lag", "Entries of the stream not yet delivered to the consumer group, counted from the stream's ids."),
		consumers:  desc("consumers", "Consumers of the group."),
		idle:       desc("idle_consumers", "Consumers of the group that have not read for longer than --group-idle-threshold."),
		oldestAge:  desc("oldest_pending_age_seconds", "Age (from its id) of the group's pending entry of the lowest id; 0 when none is pending."),
		deliveries: desc("oldest_pending_deliveries", "Times the group's pending entry of the lowest id was delivered, claims included; 0 when none is pending."),
		holdsBack:  desc("holds_back_trim", "1 when --trim acked stops at this group: it has not acknowledged, or not been delivered, the oldest entries trimming would remove."),
		heldAge:    desc("trim_held_age_seconds", "Age of the oldest entry the group keeps from --trim acked; 0 when it keeps none."),
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
	for _, d := range []*prometheus.Desc{g.pending, g.lag, g.consumers, g.idle, g.oldestAge, g.deliveries, g.holdsBack, g.heldAge} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *Groups) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	groups := g.last
	g.mu.Unlock()
	for _, gr := range groups {
		held := 0.0
		if gr.HoldsBackTrim {
			held = 1
		}
		for d, v := range map[*prometheus.Desc]float64{
			g.pending: float64(gr.Pending), g.lag: float64(gr.Lag), g.consumers: float64(gr.Consumers), g.idle: float64(gr.IdleConsumers),
			g.oldestAge: gr.OldestPendingAge.Seconds(), g.deliveries: float64(gr.OldestPendingDeliveries),
			g.holdsBack: held, g.heldAge: gr.TrimHeldAge.Seconds(),
		} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, gr.Stream, gr.Group)
		}
	}
}
