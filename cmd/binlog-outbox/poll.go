package main

import (
	"context"
	"database/sql"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// pollFlags are the flags of poll mode.
func pollFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{
			Name:    "poll-interval",
			Usage:   "poll mode: longest wait between polls of an idle table (a full batch is followed by the next poll at once)",
			EnvVars: []string{"BINLOG_OUTBOX_POLL_INTERVAL"},
			Value:   poller.DefaultPollInterval,
		},
		&cli.IntFlag{
			Name:    "batch-size",
			Usage:   "poll mode: most rows one poll locks and appends",
			EnvVars: []string{"BINLOG_OUTBOX_BATCH_SIZE"},
			Value:   poller.DefaultBatchSize,
		},
		&cli.IntFlag{
			Name:    "max-batch-bytes",
			Usage:   "poll mode: most payload and header bytes one poll reads and appends, which bounds the memory (a single larger row goes alone)",
			EnvVars: []string{"BINLOG_OUTBOX_MAX_BATCH_BYTES"},
			Value:   poller.DefaultMaxBatchBytes,
		},
		onSentFlag(),
		&cli.DurationFlag{
			Name:    "dedupe-window",
			Usage:   "remember appended message ids this long and skip re-appends: effectively once in poll mode, and no duplicates while switching between the modes (docs/switching-modes.md); 0 is off",
			EnvVars: []string{"BINLOG_OUTBOX_DEDUPE_WINDOW"},
		},
		&cli.IntFlag{
			Name:    "max-payload-bytes",
			Usage:   "poll mode: larger payloads go to the dead-letter stream",
			EnvVars: []string{"BINLOG_OUTBOX_MAX_PAYLOAD_BYTES"},
			Value:   poller.DefaultMaxPayloadBytes,
		},
		&cli.DurationFlag{
			Name:    "shutdown-grace",
			Usage:   "poll mode: how long a stop lets the poll in flight finish its append and COMMIT; a poll cut short is appended again at the next start",
			EnvVars: []string{"BINLOG_OUTBOX_SHUTDOWN_GRACE"},
			Value:   poller.DefaultShutdownGrace,
		},
		pollListFlag(),
	}
}

// onSentFlag is --on-sent, shared by poll mode and mark-appended.
func onSentFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "on-sent",
		Usage:   "poll mode: what happens to a relayed row: mark (set sent_at) or delete",
		EnvVars: []string{"BINLOG_OUTBOX_ON_SENT"},
		Value:   poller.OnSentMark,
	}
}

// pollOnSent is the --on-sent choice when poll mode may run, for the
// preflight's privilege check.
func pollOnSent(c *cli.Context, m string) string {
	if m == mode.Binlog {
		return ""
	}
	return strings.ToLower(c.String("on-sent"))
}

// pollerConfig is the poller of database.table (table as the preflight
// inspected it, nil if not) under the poll flags and cfg's mapping and extra
// columns.
func pollerConfig(c *cli.Context, cfg config, srv mysqlserver.Server, database, tableName string, table *schema.Table) poller.Config {
	payloadJSON := false
	if table != nil {
		if col, ok := table.Column(cfg.Mapping[schema.ColPayload]); ok {
			payloadJSON = col.JSON
		}
	}
	return poller.Config{
		Database:        database,
		Table:           tableName,
		Server:          srv,
		TableInfo:       table,
		Mapping:         cfg.Mapping,
		Extra:           cfg.Extra,
		BatchSize:       c.Int("batch-size"),
		MaxBatchBytes:   c.Int("max-batch-bytes"),
		PollInterval:    c.Duration("poll-interval"),
		OnSent:          strings.ToLower(c.String("on-sent")),
		MaxPayloadBytes: c.Int("max-payload-bytes"),
		PayloadJSON:     payloadJSON,
		ShutdownGrace:   c.Duration("shutdown-grace"),
	}
}

func runPoll(c *cli.Context, cfg config, srv mysqlserver.Server, db *sql.DB, client redis.UniversalClient, table *schema.Table) error {
	// The same sink as binlog mode's (streams, dead letters, dedupe keys,
	// groups): entries a consumer cannot tell apart, and a switch between
	// the modes that skips what the other one appended.
	sink, err := newSink(c, cfg, client, nil)
	if err != nil {
		return err
	}
	appends := metrics.NewAppends(mode.Poll)
	p, err := poller.New(db, appends.Publisher(sink), pollerConfig(c, cfg, srv, cfg.Database, cfg.Table, table), cfg.Logger)
	if err != nil {
		return err
	}
	probeDB, err := openProbeDB(cfg)
	if err != nil {
		return err
	}
	defer probeDB.Close()
	stop, err := startMonitor(c, cfg, mode.Poll, probeDB, client, lag.MonitorConfig{
		Poll: func(ctx context.Context) (poller.Backlog, error) { return p.Backlog(ctx, probeDB) },
		Relay: func() lag.Relay {
			s := p.Stats()
			return lag.Relay{Events: s.Events, LastProgress: s.LastRelay, Retrying: s.Retrying}
		},
	}, metrics.PollCollector(p.Stats), appends)
	if err != nil {
		return err
	}
	defer stop()
	return p.Run(c.Context)
}
