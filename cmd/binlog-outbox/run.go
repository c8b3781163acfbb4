package main

import (
	"strings"

	"github.com/binlog-outbox/binlog-outbox/relay"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// streamFlags are the flags of `run` that shape the streams; `position`
// shares the ones that name the position key.
func streamFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "stream", Usage: "stream key template: {aggregate_type}, {aggregate_id}, {event_type}, {partition}, {database}, {table} (docs/entries.md)", EnvVars: []string{"BINLOG_OUTBOX_STREAM"}, Value: entry.DefaultStream},
		&cli.IntFlag{Name: "partitions", Usage: "number of partitions {partition} ranges over: crc32(aggregate_id) % N, as PHP's crc32() computes it", EnvVars: []string{"BINLOG_OUTBOX_PARTITIONS"}, Value: 1},
		&cli.StringFlag{Name: "dead-letter-stream", Usage: "stream for rows that cannot be delivered (NULL in a required column, ...), with the reason", EnvVars: []string{"BINLOG_OUTBOX_DEAD_LETTER_STREAM"}, Value: redisstream.DefaultDeadLetterStream},
	}
}

// ensureGroupFlag is --ensure-group of run.
func ensureGroupFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "ensure-group", Usage: "consumer group created with every stream (at id 0) before its first entry; repeatable", EnvVars: []string{"BINLOG_OUTBOX_ENSURE_GROUP"}}
}

func positionKeyFlag() cli.Flag {
	return &cli.StringFlag{Name: "position-key", Usage: "Redis key of the binlog position (default binlog-outbox:position:<database>.<table>; required for several tables)", EnvVars: []string{"BINLOG_OUTBOX_POSITION_KEY"}}
}

func startFromFlag() cli.Flag {
	return &cli.StringFlag{Name: "start-from", Usage: "binlog mode, first start: now, earliest, <file>:<offset> or a GTID set; unset, an empty table starts now (docs/running.md)", EnvVars: []string{"BINLOG_OUTBOX_START_FROM"}}
}

// runFlags are the flags of run, which check accepts too: every value that
// shapes the start is checked by both the same way (preflight.Start).
func runFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "mode", Usage: "binlog, poll (SELECT ... FOR UPDATE SKIP LOCKED) or auto (binlog when its requirements are met); one for all tables", EnvVars: []string{"BINLOG_OUTBOX_MODE"}, Value: mode.Auto},
		positionKeyFlag(),
		startFromFlag(),
		&cli.DurationFlag{Name: "heartbeat", Usage: "binlog heartbeat period; a connection silent for 3 periods is rebuilt", EnvVars: []string{"BINLOG_OUTBOX_HEARTBEAT"}, Value: canal.DefaultHeartbeatPeriod},
		&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus /metrics, /healthz (liveness) and /readyz (readiness) on this address, e.g. :9108 (off when empty)", EnvVars: []string{"BINLOG_OUTBOX_METRICS_ADDR"}},
		&cli.IntFlag{Name: "max-batch-events", Usage: "most events appended in one Redis round trip", EnvVars: []string{"BINLOG_OUTBOX_MAX_BATCH_EVENTS"}, Value: canal.DefaultMaxBatchEvents},
		&cli.IntFlag{Name: "max-tx-bytes", Usage: "largest transaction held in memory; larger ones are re-read and appended in chunks", EnvVars: []string{"BINLOG_OUTBOX_MAX_TX_BYTES"}, Value: canal.DefaultMaxTxBytes},
		&cli.BoolFlag{Name: "lease", Usage: "binlog mode: one relay holds a lease and reads, others stand by and take over (docs/standby-relays.md); false: fenced", EnvVars: []string{"BINLOG_OUTBOX_LEASE"}, Value: true},
		&cli.DurationFlag{Name: "lease-ttl", Usage: "binlog mode: lease lifetime after its last renewal; a standby takes over within about this plus --lease-renew", EnvVars: []string{"BINLOG_OUTBOX_LEASE_TTL"}, Value: redisstream.DefaultLeaseTTL},
		&cli.DurationFlag{Name: "lease-renew", Usage: "binlog mode: how often the lease is renewed or tried; at most a third of --lease-ttl", EnvVars: []string{"BINLOG_OUTBOX_LEASE_RENEW"}, Value: redisstream.DefaultLeaseRenew},
		&cli.DurationFlag{Name: "lease-step-down", Usage: "binlog mode: give the lease up after failing to read or append this long, for a standby to take over; 0: never", EnvVars: []string{"BINLOG_OUTBOX_LEASE_STEP_DOWN"}, Value: canal.DefaultLeaseStepDown},
		&cli.IntFlag{Name: "event-cache-bytes", Usage: "binlog mode: most bytes of binlog events read ahead (one larger event passes alone)", EnvVars: []string{"BINLOG_OUTBOX_EVENT_CACHE_BYTES"}, Value: canal.DefaultEventCacheBytes},
	}
	flags = append(flags, streamFlags()...)
	flags = append(flags, formatFlags()...)
	flags = append(flags, ensureGroupFlag())
	flags = append(flags, trimFlags()...)
	flags = append(flags, monitorFlags()...)
	flags = append(flags, pollFlags()...)
	return flags
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "relay committed outbox rows to Redis Streams until SIGINT, SIGTERM or SIGHUP",
		Description: "Runs the preflight checks of `check`, then relays. In binlog mode every committed event is appended\n" +
			"exactly once: the appends and the binlog position are written to Redis in one atomic step.\n" +
			"SIGINT, SIGTERM or SIGHUP stops cleanly (exit 0) and gives the lease up; a second signal exits at once.",
		Flags:  runFlags(),
		Action: runRelay,
	}
}

func runRelay(c *cli.Context) error {
	o, _, err := loadOptions(c)
	if err != nil {
		return err
	}
	o.OwnsProcess = ownsProcess
	return relay.Run(c.Context, o)
}

// loadOptions is the prologue of run and check: --mode, the resolved
// configuration and the relay's options of the flags.
func loadOptions(c *cli.Context) (relay.Options, string, error) {
	requested, err := mode.Parse(c.String("mode"))
	if err != nil {
		return relay.Options{}, "", usageError{err}
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return relay.Options{}, "", err
	}
	o, err := optionsFrom(c, cfg)
	return o, requested, err
}

// optionsFrom is what the flags of run (which check has too) give: the
// relay's options over cfg.
func optionsFrom(c *cli.Context, cfg config) (relay.Options, error) {
	format, err := entryFormat(c, cfg)
	if err != nil {
		return relay.Options{}, err
	}
	stream, err := givenStream(c, cfg, format.Name)
	if err != nil {
		return relay.Options{}, err
	}
	return relay.Options{
		Config: cfg, Version: versionString(), Mode: c.String("mode"),
		PositionKey: c.String("position-key"), StartFrom: c.String("start-from"), MetricsAddr: c.String("metrics-addr"),
		Heartbeat: c.Duration("heartbeat"), MaxBatchEvents: c.Int("max-batch-events"),
		MaxTxBytes: c.Int("max-tx-bytes"), EventCacheBytes: c.Int("event-cache-bytes"),
		Lease: c.Bool("lease"), LeaseTTL: c.Duration("lease-ttl"), LeaseRenew: c.Duration("lease-renew"),
		LeaseStepDown: c.Duration("lease-step-down"),
		Stream:        stream, Partitions: c.Int("partitions"), DeadLetterStream: c.String("dead-letter-stream"),
		Format: format, EnsureGroups: ensureGroups(c), DedupeWindow: c.Duration("dedupe-window"),
		Trim: c.String("trim"), MaxLen: c.Int64("max-len"), TrimInterval: c.Duration("trim-interval"),
		ProbeInterval: c.Duration("probe-interval"), ReadyMaxStall: c.Duration("ready-max-stall"),
		GroupMetrics: c.Bool("group-metrics"), GroupMetricsInterval: c.Duration("group-metrics-interval"), GroupIdleThreshold: c.Duration("group-idle-threshold"),
		PollInterval: c.Duration("poll-interval"), BatchSize: c.Int("batch-size"), MaxBatchBytes: c.Int("max-batch-bytes"),
		OnSent: c.String("on-sent"), MaxPayloadBytes: c.Int("max-payload-bytes"), ShutdownGrace: c.Duration("shutdown-grace"),
		PollListInterval: c.Duration("poll-list-interval"),
	}, nil
}

// ensureGroups returns the --ensure-group names; commands without the flag
// have none.
func ensureGroups(c *cli.Context) []string {
	var out []string
	for _, g := range c.StringSlice("ensure-group") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// givenStream returns --stream when it is set, else the stream of the
// source in format (settings.Config.SourceStream), or "" for the default,
// which depends on the table (the preflight resolves it).
func givenStream(c *cli.Context, cfg config, format string) (string, error) {
	if !c.IsSet("stream") {
		return cfg.SourceStream(format)
	}
	return c.String("stream"), nil
}
