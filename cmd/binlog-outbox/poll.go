package main

import (
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

// pollFlags are the flags of poll mode.
func pollFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "poll-interval", Usage: "poll mode: longest wait between polls of an idle table (a full batch is followed by the next poll at once)", EnvVars: []string{"BINLOG_OUTBOX_POLL_INTERVAL"}, Value: poller.DefaultPollInterval},
		&cli.IntFlag{Name: "batch-size", Usage: "poll mode: most rows one poll locks and appends", EnvVars: []string{"BINLOG_OUTBOX_BATCH_SIZE"}, Value: poller.DefaultBatchSize},
		&cli.IntFlag{Name: "max-batch-bytes", Usage: "poll mode: most payload and header bytes per poll (a single larger row goes alone)", EnvVars: []string{"BINLOG_OUTBOX_MAX_BATCH_BYTES"}, Value: poller.DefaultMaxBatchBytes},
		onSentFlag(),
		&cli.DurationFlag{Name: "dedupe-window", Usage: "skip re-appends of message ids seen this long: effectively once in poll mode (docs/switching-modes.md); 0: off", EnvVars: []string{"BINLOG_OUTBOX_DEDUPE_WINDOW"}},
		&cli.IntFlag{Name: "max-payload-bytes", Usage: "poll mode: larger payloads go to the dead-letter stream", EnvVars: []string{"BINLOG_OUTBOX_MAX_PAYLOAD_BYTES"}, Value: poller.DefaultMaxPayloadBytes},
		&cli.DurationFlag{Name: "shutdown-grace", Usage: "poll mode: how long a stop lets the poll in flight finish; one cut short is appended again", EnvVars: []string{"BINLOG_OUTBOX_SHUTDOWN_GRACE"}, Value: poller.DefaultShutdownGrace},
		&cli.DurationFlag{Name: "poll-list-interval", Usage: "poll mode, several tables: how often the tables are listed again, to follow created and dropped ones", EnvVars: []string{"BINLOG_OUTBOX_POLL_LIST_INTERVAL"}, Value: relay.DefaultPollListInterval},
	}
}

// onSentFlag is --on-sent, shared by poll mode and mark-appended.
func onSentFlag() cli.Flag {
	return &cli.StringFlag{Name: "on-sent", Usage: "poll mode: what happens to a relayed row: mark (set sent_at) or delete", EnvVars: []string{"BINLOG_OUTBOX_ON_SENT"}, Value: poller.OnSentMark}
}
