package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

// trimFlags are the stream retention flags of run.
func trimFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "trim", Usage: "off, or acked: trim each stream to the oldest entry some consumer group has not acknowledged (XTRIM MINID; Redis 6.2+); streams without a group are left alone", EnvVars: []string{"BINLOG_OUTBOX_TRIM"}, Value: relay.TrimOff},
		&cli.DurationFlag{Name: "trim-interval", Usage: "how often --trim and --max-len pass over the streams", EnvVars: []string{"BINLOG_OUTBOX_TRIM_INTERVAL"}, Value: redisstream.DefaultTrimInterval},
		&cli.Int64Flag{Name: "max-len", Usage: "hard cap of each stream, about this many entries (XTRIM MAXLEN ~): acknowledged entries go first, and a cut of entries some group has not acknowledged is logged as a warning; 0 is no cap", EnvVars: []string{"BINLOG_OUTBOX_MAX_LEN"}},
	}
}
