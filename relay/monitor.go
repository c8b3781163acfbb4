package relay

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// DumperFor reaches the server for the short binlog dumps of lag, as the
// relay's binlog connection does (address, user, password, TLS).
func DumperFor(cfg settings.Config, flavor string) lag.Dumper {
	return lag.Dumper{Addr: cfg.MySQL.Addr, User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLS: cfg.MySQL.TLS, Flavor: flavor}
}

// openProbeDB opens the lag probe's own pool: its statements never wait
// for the relay's connections, nor hold one of them. Two connections let a
// readiness ping pass a slow count.
func openProbeDB(cfg settings.Config) (*sql.DB, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, fmt.Errorf("open mysql for the lag probe: %w", err)
	}
	db.SetMaxOpenConns(2)
	return db, nil
}

// startMonitor opens the lag probe's pool (openProbeDB), runs the lag
// monitor that probe gives (its Relay and Binlog or Poll set by the
// caller, over that pool) and, with --metrics-addr, serves the metrics of
// cs, the lag, the consumer groups (--group-metrics) and /readyz. stop ends
// them, waits and closes the pool.
func startMonitor(ctx context.Context, o Options, cfg settings.Config, relayMode string, client redis.UniversalClient, probe func(db *sql.DB) lag.MonitorConfig, cs ...prometheus.Collector) (stop func(), err error) {
	db, err := openProbeDB(cfg)
	if err != nil {
		return nil, err
	}
	stopProbe, err := startProbe(ctx, o, cfg, relayMode, db, client, probe(db), cs...)
	if err != nil {
		db.Close()
		return nil, err
	}
	return func() {
		stopProbe()
		db.Close()
	}, nil
}

// startProbe is startMonitor over the probe's pool db.
func startProbe(ctx context.Context, o Options, cfg settings.Config, relayMode string, db *sql.DB, client redis.UniversalClient, mcfg lag.MonitorConfig, cs ...prometheus.Collector) (stop func(), err error) {
	mcfg.Interval = o.ProbeInterval
	mcfg.MaxStall = o.ReadyMaxStall
	mcfg.PingMySQL = db.PingContext
	mcfg.PingRedis = func(ctx context.Context) error { return client.Ping(ctx).Err() }
	mon, err := lag.NewMonitor(mcfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	spawn := func(fn func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
		}()
	}
	spawn(mon.Run)
	stopAll := func() {
		cancel()
		wg.Wait()
	}
	addr := o.MetricsAddr
	if addr == "" {
		return stopAll, nil
	}
	cs = append(cs, metrics.LagCollector(relayMode, mon.Ready, func(now time.Time) metrics.Lag { return lagMetric(mon.Latest(), now) }))
	if o.GroupMetrics {
		g, err := groupMetrics(o, cfg, relayMode, client)
		if err != nil {
			stopAll()
			return nil, err
		}
		spawn(g.Run)
		cs = append(cs, g)
	}
	stopServer, err := metrics.Serve(ctx, addr, mon.Ready, cfg.Logger, cs...)
	if err != nil {
		stopAll()
		return nil, err
	}
	return func() {
		stopServer()
		stopAll()
	}, nil
}

// groupMetrics builds the collector of --group-metrics over the streams the
// --stream template names and the dead-letter stream, as status reads them;
// on a Redis Cluster, the streams of every master, each read through the
// cluster client from the master of its slot.
func groupMetrics(o Options, cfg settings.Config, relayMode string, client redis.UniversalClient) (*metrics.Groups, error) {
	tmpl, err := entry.ParseTemplate(StreamTemplate(cfg, o.Stream), o.Partitions, cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return nil, err
	}
	glob, deadLetter, idle := tmpl.Glob(), o.DeadLetterStream, o.GroupIdleThreshold
	var warn sync.Once
	read := func(ctx context.Context) ([]metrics.Group, error) {
		keys, err := groupStreams(ctx, client, glob, deadLetter)
		if err != nil {
			return nil, err
		}
		if len(keys) > metrics.MaxGroupStreams {
			warn.Do(func() {
				cfg.Logger.Warn("more streams than the group metrics read; the others are left out", "streams", len(keys), "read", metrics.MaxGroupStreams)
			})
			keys = keys[:metrics.MaxGroupStreams]
		}
		var out []metrics.Group
		var first error
		for _, key := range keys {
			groups, err := redisadmin.ReadGroupHealth(ctx, client, key, idle)
			if err != nil {
				// A stream deleted since the SCAN, or a slot failing
				// over; the others still count.
				first = cmp.Or(first, err)
				continue
			}
			for _, g := range groups {
				out = append(out, groupMetric(g))
			}
		}
		return out, first
	}
	return metrics.NewGroups(relayMode, read, o.GroupMetricsInterval, cfg.Logger), nil
}

// groupMetric is the series of --group-metrics of a group.
func groupMetric(g redisadmin.GroupHealth) metrics.Group {
	m := metrics.Group{Stream: g.Stream, Group: g.Name, Pending: g.Pending, Lag: g.Undelivered, Consumers: g.Consumers,
		IdleConsumers: int64(len(g.Idle)), HoldsBackTrim: g.HoldsBackTrim, TrimHeldAge: g.HeldAge}
	if g.Oldest != nil {
		m.OldestPendingAge, m.OldestPendingDeliveries = g.Oldest.Age, g.Oldest.Deliveries
	}
	return m
}

// groupStreams lists the streams glob matches (on every master of a
// cluster) and the dead-letter stream when it is one, sorted.
func groupStreams(ctx context.Context, client redis.UniversalClient, glob, deadLetter string) ([]string, error) {
	keys, err := redisconn.ScanStreams(ctx, client, glob)
	if err != nil {
		return nil, redisconn.Classify(err)
	}
	if slices.Contains(keys, deadLetter) {
		return keys, nil
	}
	typ, err := client.Type(ctx, deadLetter).Result()
	if err != nil {
		return nil, fmt.Errorf("TYPE %s: %w", deadLetter, redisconn.Classify(err))
	}
	if typ == "stream" {
		keys = append(keys, deadLetter)
		slices.Sort(keys)
	}
	return keys, nil
}

// lagMetric is what metrics reports of the lag monitor's sample s at now.
func lagMetric(s lag.Sample, now time.Time) metrics.Lag {
	if s.At.IsZero() {
		return metrics.Lag{}
	}
	m := metrics.Lag{Sampled: true, Unsent: s.Backlog.Unsent, BytesBehind: s.Binlog.BytesBehind, BytesBehindKnown: s.Binlog.BehindKnown}
	m.Seconds, m.SecondsKnown = s.SecondsBehind(now)
	m.Headroom, m.HeadroomKnown = s.Binlog.Retention.Headroom(now)
	return m
}

// binlogMetric is what metrics reports of the binlog reader's stats.
func binlogMetric(s canal.Stats) metrics.BinlogStats {
	return metrics.BinlogStats{Events: s.Events, DeadLetters: s.DeadLetters, Batches: s.Batches, Sessions: s.Sessions,
		StatementDML: s.StatementDML, LastAppend: s.LastAppend, LastCommit: s.LastCommit, Leader: s.Leader}
}

// pollMetric is what metrics reports of the pollers' stats.
func pollMetric(s poller.Stats) metrics.PollStats {
	return metrics.PollStats{Events: s.Events, DeadLetters: s.DeadLetters, Oversize: s.Oversize, Duplicates: s.Duplicates,
		Rounds: s.Rounds, Deferred: s.Deferred, Errors: s.Errors}
}
