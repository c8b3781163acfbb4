package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Appends measures the appends to Redis, each one call of the append
// script: entries per append and how long the call took. Wrap the sink with
// Sink (binlog mode) or Publisher (poll mode); an observation costs two
// atomic adds, nothing the hot path notices.
type Appends struct {
	entries  prometheus.Histogram
	duration prometheus.Histogram
}

// NewAppends returns the histograms of mode ("binlog" or "poll").
func NewAppends(mode string) *Appends {
	labels := prometheus.Labels{"mode": mode}
	return &Appends{
		entries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_entries", ConstLabels: labels,
			Help:    "Entries per append that carried entries (dead letters included); binlog mode's position-only checkpoints are not counted.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000},
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "append_duration_seconds", ConstLabels: labels,
			Help:    "Duration of one call of the append script (entries, and in binlog mode the position, in one atomic step), failed calls included.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15), // 0.25ms to 4s
		}),
	}
}

// Describe implements prometheus.Collector.
func (a *Appends) Describe(ch chan<- *prometheus.Desc) {
	a.entries.Describe(ch)
	a.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (a *Appends) Collect(ch chan<- prometheus.Metric) {
	a.entries.Collect(ch)
	a.duration.Collect(ch)
}

func (a *Appends) observe(start time.Time, entries int, err error) {
	a.duration.Observe(time.Since(start).Seconds())
	if err == nil && entries > 0 {
		a.entries.Observe(float64(entries))
	}
}

// Sink returns s, measured.
func (a *Appends) Sink(s outbox.Sink) outbox.Sink { return &measuredSink{Sink: s, a: a} }

// Publisher is what poll mode appends through (poller.Publisher).
type Publisher interface {
	// Publish appends events and returns how many it appended; see
	// poller.Publisher for the contract, which the measured publisher
	// keeps.
	Publish(ctx context.Context, events []outbox.Event) (int, error)
	// Prepare finishes an event for the entry format as it is read.
	Prepare(e *outbox.Event)
}

// Publisher returns p, measured.
func (a *Appends) Publisher(p Publisher) Publisher {
	return &measuredPublisher{Publisher: p, a: a}
}

type measuredSink struct {
	outbox.Sink
	a *Appends
}

var _ outbox.Sink = (*measuredSink)(nil)

// Append implements outbox.Sink.
func (s *measuredSink) Append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	start := time.Now()
	err := s.Sink.Append(ctx, events, prev, next)
	s.a.observe(start, len(events), err)
	return err
}

type measuredPublisher struct {
	Publisher
	a *Appends
}

var _ Publisher = (*measuredPublisher)(nil)

// Publish implements Publisher.
func (p *measuredPublisher) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	start := time.Now()
	n, err := p.Publisher.Publish(ctx, events)
	p.a.observe(start, len(events), err)
	return n, err
}
