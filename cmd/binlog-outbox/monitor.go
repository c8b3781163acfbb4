package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
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
			Usage:   "export binlog_outbox_group_pending and binlog_outbox_group_lag for every consumer group of the streams (XINFO GROUPS every --group-metrics-interval, at most 1000 streams)",
			EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS"},
		},
		&cli.DurationFlag{
			Name:    "group-metrics-interval",
			Usage:   "how often --group-metrics reads the consumer groups (a SCAN of the stream keys and XINFO GROUPS per stream)",
			EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS_INTERVAL"},
			Value:   metrics.DefaultGroupInterval,
		},
	}
}
