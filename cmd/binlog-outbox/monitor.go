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
		&cli.DurationFlag{Name: "probe-interval", Usage: "how often the relay measures, on connections of its own, how far behind it is (lag and retention metrics, /readyz, catch-up progress lines)", EnvVars: []string{"BINLOG_OUTBOX_PROBE_INTERVAL"}, Value: lag.DefaultInterval},
		&cli.DurationFlag{Name: "ready-max-stall", Usage: "/readyz reports not ready when the relay is behind and has stored no progress for this long", EnvVars: []string{"BINLOG_OUTBOX_READY_MAX_STALL"}, Value: lag.DefaultMaxStall},
		&cli.BoolFlag{Name: "group-metrics", Usage: "export the health of every consumer group of the streams (binlog_outbox_group_*: pending and undelivered entries, idle consumers, the oldest pending entry, whether it holds back --trim acked), read every --group-metrics-interval, at most 1000 streams", EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS"}},
		groupIdleThresholdFlag(),
		&cli.DurationFlag{Name: "group-metrics-interval", Usage: "how often --group-metrics reads the consumer groups (a SCAN of the stream keys, and per stream XINFO STREAM and GROUPS, per group XPENDING, XINFO CONSUMERS and a count of the undelivered entries)", EnvVars: []string{"BINLOG_OUTBOX_GROUP_METRICS_INTERVAL"}, Value: metrics.DefaultGroupInterval},
	}
}

// groupIdleThresholdFlag is --group-idle-threshold of run and status.
func groupIdleThresholdFlag() cli.Flag {
	return &cli.DurationFlag{Name: "group-idle-threshold", Usage: "a consumer that has not read for longer is idle (status, --group-metrics); a group that holds back --trim acked with only idle consumers is one nobody reads", EnvVars: []string{"BINLOG_OUTBOX_GROUP_IDLE_THRESHOLD"}, Value: redisadmin.DefaultGroupIdleThreshold}
}
