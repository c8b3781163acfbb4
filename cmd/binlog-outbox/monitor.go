package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// monitorFlags are the flags of run for the lag probe, /readyz and the
// consumer group metrics.
func monitorFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{
			Name:    "probe-interval",
			Usage:   "how often the relay measures, on connections of its own, how far behind it is (lag and retention metrics, /readyz, catch-up progress lines)",
			EnvVars: []string{"BINLOG_OUTBOX_PROBE_INTERVAL"},
			Value:   lag.DefaultInterval,
		},
		&cli.DurationFlag{
			Name:    "ready-max-stall",
			Usage:   "/readyz reports not ready when the relay is behind and has stored no progress for this long",
			EnvVars: []string{"BINLOG_OUTBOX_READY_MAX_STALL"},
			Value:   lag.DefaultMaxStall,
		},
		&cli.BoolFlag{
			Name:    "group-metrics",
			Usage:   "export the health of every consumer group of the streams (binlog_outbox_group_*: pending and undelivered entries, idle consumers, the oldest pending entry, whether it holds back --trim acked), read every --group-metrics-interval, at most 1000 streams",
			EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS"},
		},
		groupIdleThresholdFlag(),
		&cli.DurationFlag{
			Name:    "group-metrics-interval",
			Usage:   "how often --group-metrics reads the consumer groups (a SCAN of the stream keys, and per stream XINFO STREAM and GROUPS, per group XPENDING, XINFO CONSUMERS and a count of the undelivered entries)",
			EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS_INTERVAL"},
			Value:   metrics.DefaultGroupInterval,
		},
	}
}

// groupIdleThresholdFlag is --group-idle-threshold of run and status.
func groupIdleThresholdFlag() cli.Flag {
	return &cli.DurationFlag{
		Name:    "group-idle-threshold",
		Usage:   "a consumer that has not read for longer is idle (status, --group-metrics); a group that holds back --trim acked with only idle consumers is one nobody reads",
		EnvVars: []string{"BINLOG_OUTBOX_GROUP_IDLE_THRESHOLD"},
		Value:   redisstream.DefaultGroupIdleThreshold,
	}
}

// dumperFor reaches the server for the short binlog dumps of lag, as the
// relay's binlog connection does (address, user, password, TLS).
func dumperFor(cfg config, flavor string) lag.Dumper {
	return lag.Dumper{Addr: cfg.MySQL.Addr, User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLS: cfg.MySQL.TLS, Flavor: flavor}
}

// openProbeDB opens the lag probe's own pool: its statements never wait
// for the relay's connections, nor hold one of them. Two connections let a
// readiness ping pass a slow count.
func openProbeDB(cfg config) (*sql.DB, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, fmt.Errorf("open mysql for the lag probe: %w", err)
	}
	db.SetMaxOpenConns(2)
	return db, nil
}

// startMonitor runs the lag monitor of mcfg (its Relay and Binlog or Poll
// set by the caller) and, with --metrics-addr, serves the metrics of cs, the
// lag, the consumer groups (--group-metrics) and /readyz. stop ends them
// and waits.
func startMonitor(c *cli.Context, cfg config, relayMode string, db *sql.DB, client redis.UniversalClient, mcfg lag.MonitorConfig, cs ...prometheus.Collector) (stop func(), err error) {
	mcfg.Interval = c.Duration("probe-interval")
	mcfg.MaxStall = c.Duration("ready-max-stall")
	mcfg.PingMySQL = db.PingContext
	mcfg.PingRedis = func(ctx context.Context) error { return client.Ping(ctx).Err() }
	mon, err := lag.NewMonitor(mcfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(c.Context)
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
	addr := c.String("metrics-addr")
	if addr == "" {
		return stopAll, nil
	}
	cs = append(cs, metrics.LagCollector(relayMode, mon))
	if c.Bool("group-metrics") {
		g, err := groupMetrics(c, cfg, relayMode, client)
		if err != nil {
			stopAll()
			return nil, err
		}
		spawn(g.Run)
		cs = append(cs, g)
	}
	stopServer, err := metrics.Serve(c.Context, addr, mon.Ready, cfg.Logger, cs...)
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
func groupMetrics(c *cli.Context, cfg config, relayMode string, client redis.UniversalClient) (*metrics.Groups, error) {
	tmpl, err := redisstream.ParseTemplate(streamTemplate(c, cfg), c.Int("partitions"), cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return nil, err
	}
	glob, deadLetter, idle := tmpl.Glob(), c.String("dead-letter-stream"), c.Duration("group-idle-threshold")
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
			groups, err := redisstream.ReadGroupHealth(ctx, client, key, idle)
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
	return metrics.NewGroups(relayMode, read, c.Duration("group-metrics-interval"), cfg.Logger), nil
}

// groupMetric is the series of --group-metrics of a group.
func groupMetric(g redisstream.GroupHealth) metrics.Group {
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
	keys, err := redisstream.ScanStreams(ctx, client, glob)
	if err != nil {
		return nil, redisstream.Classify(err)
	}
	if slices.Contains(keys, deadLetter) {
		return keys, nil
	}
	typ, err := client.Type(ctx, deadLetter).Result()
	if err != nil {
		return nil, fmt.Errorf("TYPE %s: %w", deadLetter, redisstream.Classify(err))
	}
	if typ == "stream" {
		keys = append(keys, deadLetter)
		slices.Sort(keys)
	}
	return keys, nil
}
