package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

// trimFlags are the stream retention flags of run.
func trimFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "trim", Usage: "off, or acked: trim streams to the oldest entry a group has not acknowledged (Redis 6.2+; docs/cleanup.md)", EnvVars: []string{"BINLOG_OUTBOX_TRIM"}, Value: relay.TrimOff},
		&cli.DurationFlag{Name: "trim-interval", Usage: "how often --trim and --max-len pass over the streams", EnvVars: []string{"BINLOG_OUTBOX_TRIM_INTERVAL"}, Value: redisstream.DefaultTrimInterval},
		&cli.Int64Flag{Name: "max-len", Usage: "cap each stream at about this many entries (XTRIM MAXLEN ~), logging cuts of unacknowledged ones; 0: no cap", EnvVars: []string{"BINLOG_OUTBOX_MAX_LEN"}},
	}
}
