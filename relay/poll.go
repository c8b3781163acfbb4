package relay

import (
	"context"
	"database/sql"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// PollOnSent is the --on-sent choice when poll mode may run (m, the mode
// requested), for the preflight's privilege check.
func PollOnSent(o Options, m string) string {
	if m == mode.Binlog {
		return ""
	}
	return strings.ToLower(o.OnSent)
}

// pollerConfig is the poller of database.table (table as the preflight
// inspected it, nil if not) under the poll flags and cfg's mapping and extra
// columns.
func pollerConfig(o Options, cfg settings.Config, srv mysqlserver.Server, database, tableName string, table *schema.Table) poller.Config {
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
		BatchSize:       o.BatchSize,
		MaxBatchBytes:   o.MaxBatchBytes,
		PollInterval:    o.PollInterval,
		OnSent:          strings.ToLower(o.OnSent),
		MaxPayloadBytes: o.MaxPayloadBytes,
		PayloadJSON:     payloadJSON,
		ShutdownGrace:   o.ShutdownGrace,
	}
}

// startPollMonitor is startMonitor of poll mode: the backlog of the rows
// not sent yet, read on the probe's pool, and the pollers' stats.
func startPollMonitor(ctx context.Context, o Options, cfg settings.Config, client redis.UniversalClient, backlog func(context.Context, *sql.DB) (poller.Backlog, error), stats func() poller.Stats, appends *metrics.Appends) (stop func(), err error) {
	return startMonitor(ctx, o, cfg, mode.Poll, client, func(probeDB *sql.DB) lag.MonitorConfig {
		return lag.MonitorConfig{
			Poll: func(ctx context.Context) (poller.Backlog, error) { return backlog(ctx, probeDB) },
			Relay: func() lag.Relay {
				s := stats()
				return lag.Relay{Events: s.Events, LastProgress: s.LastRelay, Retrying: s.Retrying}
			},
		}
	}, metrics.PollCollector(func() metrics.PollStats { return pollMetric(stats()) }), appends)
}

func runPoll(ctx context.Context, o Options, cfg settings.Config, srv mysqlserver.Server, db *sql.DB, client redis.UniversalClient, table *schema.Table) error {
	// The same sink as binlog mode's (streams, dead letters, dedupe keys,
	// groups): entries a consumer cannot tell apart, and a switch between
	// the modes that skips what the other one appended.
	sink, err := newSink(o, cfg, client, nil)
	if err != nil {
		return err
	}
	appends := metrics.NewAppends(mode.Poll)
	p, err := poller.New(db, appends.Publisher(sink), pollerConfig(o, cfg, srv, cfg.Database, cfg.Table, table), cfg.Logger)
	if err != nil {
		return err
	}
	stop, err := startPollMonitor(ctx, o, cfg, client, p.Backlog, p.Stats, appends)
	if err != nil {
		return err
	}
	defer stop()
	return p.Run(ctx)
}
