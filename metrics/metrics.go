// Package metrics exposes the relay's counters to Prometheus and serves
// /metrics, /healthz and /readyz. The counters are read from the relay's
// Stats at scrape time, and the lag from the lag monitor's last sample, so
// the hot path pays nothing for them but the append histograms' two atomic
// adds.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

const namespace = "binlog_outbox"

// counter describes one counter read from a stats snapshot.
type counter[S any] struct {
	desc *prometheus.Desc
	get  func(S) float64
}

// collector turns a Stats snapshot function into Prometheus metrics.
type collector[S any] struct {
	stats    func() S
	counters []counter[S]
	gauges   []counter[S]
}

func (c *collector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.counters {
		ch <- m.desc
	}
	for _, m := range c.gauges {
		ch <- m.desc
	}
}

func (c *collector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range c.counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, m.get(s))
	}
	for _, m := range c.gauges {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.get(s))
	}
}

func desc(mode, name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, prometheus.Labels{"mode": mode})
}

// BinlogStats are the binlog reader's counters that metrics reports; the
// relay fills them from the reader's own stats at each scrape, so this
// package knows no reader.
type BinlogStats struct {
	Events, DeadLetters, Batches, Sessions uint64
	// StatementDML counts outbox INSERTs seen as statements (lost to the
	// relay).
	StatementDML uint64
	// LastAppend is when the last batch was appended, LastCommit the commit
	// time of the newest transaction appended.
	LastAppend, LastCommit time.Time
	// Leader is true while the relay reads (holds the lease, or runs
	// without one).
	Leader bool
}

// PollStats are a poller's counters that metrics reports, summed over
// every table's poller.
type PollStats struct {
	Events, DeadLetters, Oversize, Duplicates, Rounds, Deferred, Errors uint64
}

// BinlogCollector exposes a binlog reader's counters.
func BinlogCollector(stats func() BinlogStats) prometheus.Collector {
	const m = "binlog"
	return &collector[BinlogStats]{
		stats: stats,
		counters: []counter[BinlogStats]{
			{desc(m, "events_appended_total", "Events appended to streams, dead letters included."), func(s BinlogStats) float64 { return float64(s.Events) }},
			{desc(m, "dead_letters_total", "Rows moved to the dead-letter stream."), func(s BinlogStats) float64 { return float64(s.DeadLetters) }},
			{desc(m, "batches_total", "Atomic appends (entries and position in one step)."), func(s BinlogStats) float64 { return float64(s.Batches) }},
			{desc(m, "reader_sessions_total", "Binlog connections started; more than one means the reader recovered from errors."), func(s BinlogStats) float64 { return float64(s.Sessions) }},
			{desc(m, "statement_inserts_total", "INSERTs into the outbox logged as statements: their events are lost to the relay. Alert on any."), func(s BinlogStats) float64 { return float64(s.StatementDML) }},
		},
		gauges: []counter[BinlogStats]{
			{desc(m, "last_append_timestamp_seconds", "When the last batch was appended (Unix time)."), func(s BinlogStats) float64 { return unix(s.LastAppend) }},
			{desc(m, "last_commit_timestamp_seconds", "Commit time of the newest transaction appended, from the binlog (Unix time)."), func(s BinlogStats) float64 { return unix(s.LastCommit) }},
			{desc(m, "leader", "1 while this relay reads (it holds the lease of the position, or runs with --lease=false), 0 while it stands by."), func(s BinlogStats) float64 { return bool01(s.Leader) }},
		},
	}
}

// PollCollector exposes a poller's counters.
func PollCollector(stats func() PollStats) prometheus.Collector {
	const m = "poll"
	return &collector[PollStats]{
		stats: stats,
		counters: []counter[PollStats]{
			{desc(m, "events_appended_total", "Rows relayed (appended or skipped as duplicates, then marked), dead letters included."), func(s PollStats) float64 { return float64(s.Events) }},
			{desc(m, "dead_letters_total", "Rows moved to the dead-letter stream."), func(s PollStats) float64 { return float64(s.DeadLetters) }},
			{desc(m, "oversize_total", "Dead letters whose payload exceeded --max-payload-bytes."), func(s PollStats) float64 { return float64(s.Oversize) }},
			{desc(m, "duplicates_skipped_total", "Re-appends the dedupe window prevented."), func(s PollStats) float64 { return float64(s.Duplicates) }},
			{desc(m, "rounds_total", "Poll transactions that locked at least one row."), func(s PollStats) float64 { return float64(s.Rounds) }},
			{desc(m, "deferred_total", "Rows left for a later round to keep an aggregate in order."), func(s PollStats) float64 { return float64(s.Deferred) }},
			{desc(m, "errors_total", "Failed rounds (retried)."), func(s PollStats) float64 { return float64(s.Errors) }},
		},
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// Readiness reports whether the relay does its job, with a one-line reason
// ("ready" when it does); lag.Monitor.Ready is one.
type Readiness func(ctx context.Context) (ok bool, reason string)

// Serve serves /metrics, /healthz (liveness: the process answers) and
// /readyz (200 "ready", or 503 and the reason) on addr until ctx is
// cancelled. The listener is opened before Serve returns its first error, so
// a taken port fails the start rather than later.
func Serve(ctx context.Context, addr string, ready Readiness, log *slog.Logger, cs ...prometheus.Collector) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		rctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		ok, why := ready(rctx)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			why = "not ready: " + why
		}
		fmt.Fprintln(w, why)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		hint := "give --metrics-addr a host:port this process may listen on"
		if errors.Is(err, syscall.EADDRINUSE) {
			// Most often a second relay on the same host, or one that
			// has not exited yet.
			hint = "another process listens on that port (ss -ltnp 'sport = :<port>' names it): a second relay on this host needs a --metrics-addr of its own, or stop the other one"
		}
		return nil, outbox.WithHint(fmt.Errorf("metrics: listen on %s: %w", addr, err), "%s", hint)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", logging.KeyError, err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
