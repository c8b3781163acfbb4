package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
)

// monitorFlags are the flags of run for the lag probe, /readyz and the
// consumer group metrics.
func monitorFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "probe-interval", Usage: "how often the relay measures its lag (lag and retention metrics, /readyz, progress lines)", EnvVars: []string{"BINLOG_OUTBOX_PROBE_INTERVAL"}, Value: lag.DefaultInterval},
		&cli.DurationFlag{Name: "ready-max-stall", Usage: "/readyz reports not ready when the relay is behind and has stored no progress for this long", EnvVars: []string{"BINLOG_OUTBOX_READY_MAX_STALL"}, Value: lag.DefaultMaxStall},
		&cli.BoolFlag{Name: "group-metrics", Usage: "export binlog_outbox_group_* metrics of every consumer group, at most 1000 streams (docs/monitoring.md)", EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS"}},
		groupIdleThresholdFlag(),
		&cli.DurationFlag{Name: "group-metrics-interval", Usage: "how often --group-metrics reads the groups (a SCAN, then XINFO and XPENDING per stream and group)", EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS_INTERVAL"}, Value: metrics.DefaultGroupInterval},
	}
}

// groupIdleThresholdFlag is --group-idle-threshold of run and status.
func groupIdleThresholdFlag() cli.Flag {
	return &cli.DurationFlag{Name: "group-idle-threshold", Usage: "a consumer silent for longer is idle (status, --group-metrics)", EnvVars: []string{"BINLOG_OUTBOX_GROUP_IDLE_THRESHOLD"}, Value: redisadmin.DefaultGroupIdleThreshold}
}
