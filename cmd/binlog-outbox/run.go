package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// defaultMemoryLimit is the relay's soft memory limit (GOMEMLIMIT overrides).
const defaultMemoryLimit = 20 << 20

// defaultGCPercent is the relay's GOGC under that limit (GOGC overrides):
// with GOGC's 100 the collector ran whenever the heap doubled its live
// part, far below the limit, which a catch-up's small live heap makes
// often; at 400 the limit decides in most cycles, which spends less CPU per
// event at the same peak RSS (bench measures both; BENCHMARKS.md).
const defaultGCPercent = 400

// streamFlags are the flags of `run` that shape the streams; `position`
// shares the ones that name the position key.
func streamFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "stream",
			Usage:   "stream key template; placeholders {aggregate_type}, {aggregate_id}, {event_type}, {partition}, {database}, {table} (default \"outbox\" when the table has no aggregate_type column)",
			EnvVars: []string{"BINLOG_OUTBOX_STREAM"},
			Value:   redisstream.DefaultStream,
		},
		&cli.IntFlag{
			Name:    "partitions",
			Usage:   "number of partitions {partition} ranges over: crc32(aggregate_id) % N, as PHP's crc32() computes it",
			EnvVars: []string{"BINLOG_OUTBOX_PARTITIONS"},
			Value:   1,
		},
		&cli.StringFlag{
			Name:    "dead-letter-stream",
			Usage:   "stream for rows that cannot be delivered (NULL in a required column, ...), with the reason",
			EnvVars: []string{"BINLOG_OUTBOX_DEAD_LETTER_STREAM"},
			Value:   redisstream.DefaultDeadLetterStream,
		},
	}
}

// ensureGroupFlag is --ensure-group of run.
func ensureGroupFlag() cli.Flag {
	return &cli.StringSliceFlag{
		Name:    "ensure-group",
		Usage:   "consumer group every stream has from its first entry: created with the stream (at id 0), before any entry is appended to it; repeatable, comma-separated in the environment variable",
		EnvVars: []string{"BINLOG_OUTBOX_ENSURE_GROUP"},
	}
}

func positionKeyFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "position-key",
		Usage:   "Redis key of the binlog position (default binlog-outbox:position:<database>.<table>; required with several tables or a pattern)",
		EnvVars: []string{"BINLOG_OUTBOX_POSITION_KEY"},
	}
}

func startFromFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "start-from",
		Usage:   "where binlog mode starts when Redis holds no position: now, earliest, <file>:<offset> or a GTID set",
		EnvVars: []string{"BINLOG_OUTBOX_START_FROM"},
		Value:   "now",
	}
}

// runFlags are the flags of run, which check accepts too: every value that
// shapes the start is checked by both the same way (preflight.Start).
func runFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{
			Name:    "mode",
			Usage:   "binlog (tail the binary log), poll (SELECT ... FOR UPDATE SKIP LOCKED) or auto (binlog when its requirements are met, else poll); with several tables one mode for all of them",
			EnvVars: []string{"BINLOG_OUTBOX_MODE"},
			Value:   mode.Auto,
		},
		positionKeyFlag(),
		startFromFlag(),
		&cli.DurationFlag{
			Name:    "heartbeat",
			Usage:   "binlog heartbeat period; a connection silent for 3 periods is rebuilt",
			EnvVars: []string{"BINLOG_OUTBOX_HEARTBEAT"},
			Value:   canal.DefaultHeartbeatPeriod,
		},
		&cli.StringFlag{
			Name:    "metrics-addr",
			Usage:   "serve Prometheus /metrics, /healthz (liveness) and /readyz (readiness) on this address, e.g. :9108 (off when empty)",
			EnvVars: []string{"BINLOG_OUTBOX_METRICS_ADDR"},
		},
		&cli.IntFlag{
			Name:    "max-batch-events",
			Usage:   "most events appended in one Redis round trip",
			EnvVars: []string{"BINLOG_OUTBOX_MAX_BATCH_EVENTS"},
			Value:   canal.DefaultMaxBatchEvents,
		},
		&cli.IntFlag{
			Name:    "max-tx-bytes",
			Usage:   "largest transaction held in memory; larger ones are re-read and appended in chunks",
			EnvVars: []string{"BINLOG_OUTBOX_MAX_TX_BYTES"},
			Value:   canal.DefaultMaxTxBytes,
		},
		&cli.BoolFlag{
			Name:    "lease",
			Usage:   "binlog mode: relays of one position take turns: the one holding a lease in Redis reads, the others stand by and take over within --lease-ttl of its death or pause; false: a second relay is fenced by the position and exits",
			EnvVars: []string{"BINLOG_OUTBOX_LEASE"},
			Value:   true,
		},
		&cli.DurationFlag{
			Name:    "lease-ttl",
			Usage:   "binlog mode: how long the lease outlives its holder's last renewal; a standby takes over within about this plus --lease-renew",
			EnvVars: []string{"BINLOG_OUTBOX_LEASE_TTL"},
			Value:   redisstream.DefaultLeaseTTL,
		},
		&cli.DurationFlag{
			Name:    "lease-renew",
			Usage:   "binlog mode: how often the holder renews the lease and a standby tries to take it; at most a third of --lease-ttl",
			EnvVars: []string{"BINLOG_OUTBOX_LEASE_RENEW"},
			Value:   redisstream.DefaultLeaseRenew,
		},
		&cli.DurationFlag{
			Name:    "lease-step-down",
			Usage:   "binlog mode: the holder gives the lease up after failing to read or append for this long (MySQL unreachable from its host, say), so that a standby that can reach the servers takes over; 0: never",
			EnvVars: []string{"BINLOG_OUTBOX_LEASE_STEP_DOWN"},
			Value:   canal.DefaultLeaseStepDown,
		},
		&cli.IntFlag{
			Name:    "event-cache-bytes",
			Usage:   "binlog mode: most bytes of binlog events read ahead of the relay (one larger event still passes, alone)",
			EnvVars: []string{"BINLOG_OUTBOX_EVENT_CACHE_BYTES"},
			Value:   canal.DefaultEventCacheBytes,
		},
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
	requested, err := mode.Parse(c.String("mode"))
	if err != nil {
		return usageError{err}
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	format, err := entryFormat(c)
	if err != nil {
		return err
	}
	setMemoryLimit()
	log := cfg.Logger
	log.Info("binlog-outbox starting", "version", versionString(), "config", cfg, "mode", requested)

	if cfg.Several && requested != mode.Poll {
		// Poll mode keeps each table's progress in its rows; auto mode
		// needs the key even so, or a missing flag would be a reason to
		// fall back to polling.
		if err := requirePositionKey(c, cfg); err != nil {
			return err
		}
	}

	checkCtx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	rep := preflight.Run(checkCtx, preflightConfig(c, cfg, &format, pollOnSent(c, requested)))
	cancel()
	if c.Context.Err() != nil {
		return nil
	}
	rep.TolerateOwnServerID()
	// What stops every mode stops here, as check reported it: a refused
	// value, or a server that cannot be reached.
	if err := rep.Stop(); err != nil {
		return err
	}

	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return fmt.Errorf("open mysql: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	// Before any key is built from the names: they must be the server's.
	if !cfg.Several {
		if err := resolveTable(c.Context, &cfg, db); err != nil {
			return err
		}
	}

	client := cfg.redisClient()
	defer client.Close()
	if cfg.Several {
		return runSeveral(c, cfg, rep, requested, format, db, client)
	}
	store := redisstream.NewModeStore(client, redisstream.KeysFor(cfg.Database, cfg.Table, "").Mode)
	relayMode, err := mode.Resolve(c.Context, log, rep, requested, store)
	if err != nil {
		return err
	}
	logWarnings(log, rep, relayMode)

	// The preflight resolved the mapping against the table once; both modes
	// relay with that same mapping, so they fill the same fields.
	res := rep.Table
	if res == nil {
		return fmt.Errorf("the outbox table %s.%s was not inspected", cfg.Database, cfg.Table)
	}
	if err := schema.ProblemsError(cfg.Table, res.Problems); err != nil {
		return err
	}
	cfg.Mapping = res.Mapping
	if len(res.Absent) > 0 {
		log.Info("outbox table has no column for "+strings.Join(res.Absent, ", "), "entries", schema.DescribeAbsent(res.Absent),
			"columns", cfg.Mapping.String(), "stream", streamTemplate(c, cfg),
			"note", "an optional column added later is used after a restart; binlog mode stops when it first sees one")
	}
	if d := schema.DescribeFields(res.Fields); d != "" {
		log.Info("entries carry columns beside the built-in fields", "fields", d)
	}
	logFormat(log, format)

	if relayMode == mode.Poll {
		// Binlog mode starts its trimmer with its lease (runBinlog).
		stopTrim, err := startTrimmer(c, cfg, client, nil)
		if err != nil {
			return err
		}
		defer stopTrim()
		return runPoll(c, cfg, rep.Server, db, client, res.Table)
	}
	return runBinlog(c, cfg, rep.Server, db, client, res.Absent, nil)
}

// setMemoryLimit sets the relay's soft memory limit and GOGC, unless the
// environment sets them. The relay's live data is bounded
// (--event-cache-bytes, --max-tx-bytes, the batches); a soft limit keeps
// the garbage collector from letting the heap double past it.
func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// preflightConfig is what `check` and `run` check: the table or tables of
// cfg, the stream and format flags, the position key, and what run does
// with its flags at start.
func preflightConfig(c *cli.Context, cfg config, format *redisstream.Format, onSent string) preflight.Config {
	pc := preflight.Config{
		MySQLDSN: cfg.DSN(), Redis: cfg.checkedRedis(c.Context), Table: cfg.Table, Database: cfg.Database, Mapping: cfg.Mapping, Declared: cfg.Declared,
		Extra: cfg.Extra, ServerID: cfg.ServerID, OnSent: onSent, PositionKey: positionKey(c, cfg),
		Format: format, Stream: givenStream(c), Partitions: c.Int("partitions"),
		Start: startFlags(c, cfg, *format),
	}
	if cfg.Several {
		pc.Sources = cfg.Sources
	}
	return pc
}

// startFlags is what run does at start with its flags (check has them
// too): the sink, the lease, trimming, --start-from.
func startFlags(c *cli.Context, cfg config, format redisstream.Format) *preflight.Start {
	return &preflight.Start{
		Sink: redisstream.Config{
			Stream:           givenStream(c),
			Partitions:       c.Int("partitions"),
			DeadLetterStream: c.String("dead-letter-stream"),
			PositionKey:      positionKey(c, cfg),
			// The same keys as poll mode's, so that a switch between the
			// modes skips what the other one appended.
			Dedupe: redisstream.Dedupe{
				Window:    c.Duration("dedupe-window"),
				KeyPrefix: redisstream.KeysFor(cfg.Database, cfg.Table, "").DedupePrefix,
				BySource:  cfg.Several,
			},
			Groups:  ensureGroups(c),
			Format:  format,
			Cluster: cfg.RedisCluster != nil,
		},
		Lease: c.Bool("lease"), LeaseTTL: c.Duration("lease-ttl"), LeaseRenew: c.Duration("lease-renew"),
		Trim: c.String("trim"), MaxLen: c.Int64("max-len"), TrimInterval: c.Duration("trim-interval"),
		StartFrom: c.String("start-from"), Mode: c.String("mode"),
	}
}

// logWarnings logs the preflight's warnings that concern the mode, once.
func logWarnings(log *slog.Logger, rep preflight.Report, relayMode string) {
	for _, w := range rep.Warned(preflight.Mode(relayMode)) {
		log.Warn("preflight: "+w.Name, "detail", w.Detail, logging.KeyHint, w.Fix)
	}
}

func logFormat(log *slog.Logger, format redisstream.Format) {
	if format.Name != redisstream.FormatFlat {
		log.Info("entry format", "format", format.String())
	}
}

// runBinlog relays in binlog mode: the one table of cfg (its absent
// columns) or, with several, the tables the preflight matched.
func runBinlog(c *cli.Context, cfg config, srv mysqlserver.Server, db *sql.DB, client redis.UniversalClient, absent []string, tables []preflight.TableMatch) error {
	start, err := position.ParseStart(c.String("start-from"))
	if err != nil {
		return err
	}
	if err := checkOldPositionKey(c, cfg, client); err != nil {
		return err
	}
	lease, err := newLease(c, cfg, client)
	if err != nil {
		return err
	}
	stopTrim, err := startTrimmer(c, cfg, client, lease)
	if err != nil {
		return err
	}
	defer stopTrim()
	sink, err := newSink(c, cfg, client, lease)
	if err != nil {
		return err
	}
	appends := metrics.NewAppends(mode.Binlog)
	var cuts canal.Cuts
	if cfg.RedisCluster != nil {
		cuts = sink
	}
	reader, err := newReader(c, cfg, srv, db, appends.Sink(sink), cuts, absent, tables, start, lease, client)
	if err != nil {
		return err
	}
	probeDB, err := openProbeDB(cfg)
	if err != nil {
		return err
	}
	defer probeDB.Close()
	stop, err := startMonitor(c, cfg, mode.Binlog, probeDB, client, lag.MonitorConfig{
		Binlog: &lag.Binlog{DB: probeDB, Server: srv, Dumper: dumperFor(cfg, srv.Flavor)},
		Relay: func() lag.Relay {
			s := reader.Stats()
			return lag.Relay{Events: s.Events, LastProgress: s.LastAppend, Retrying: s.Retrying, File: s.Stored.File, Pos: s.Stored.Pos, Standby: s.Standby}
		},
	}, metrics.BinlogCollector(reader.Stats), appends)
	if err != nil {
		return err
	}
	defer stop()
	return reader.Run(c.Context)
}

// newLease builds the lease of the position from --lease, --lease-ttl and
// --lease-renew; nil with --lease=false.
func newLease(c *cli.Context, cfg config, client redis.UniversalClient) (*redisstream.Lease, error) {
	if !c.Bool("lease") {
		return nil, nil
	}
	if err := preflight.CheckLease(c.Duration("lease-ttl"), c.Duration("lease-renew")); err != nil {
		return nil, err
	}
	return redisstream.NewLease(client, redisstream.LeaseConfig{Key: redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key")).Lease, TTL: c.Duration("lease-ttl"),
		Cluster: cfg.RedisCluster != nil})
}

// newSink builds the Redis sink from the stream and format flags; lease,
// when not nil, is checked with every append.
func newSink(c *cli.Context, cfg config, client redis.UniversalClient, lease *redisstream.Lease) (*redisstream.Sink, error) {
	format, err := entryFormat(c)
	if err != nil {
		return nil, err
	}
	sc := startFlags(c, cfg, format).SinkConfig(cfg.Mapping)
	sc.Lease = lease
	return redisstream.New(client, sc)
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

// givenStream returns --stream when it is set, or "" for the default,
// which depends on the table (the preflight resolves it).
func givenStream(c *cli.Context) string {
	if !c.IsSet("stream") {
		return ""
	}
	return c.String("stream")
}

// streamTemplate returns --stream, or, when it is not set and the table has
// no aggregate_type column, a default that does not need one.
func streamTemplate(c *cli.Context, cfg config) string {
	if !c.IsSet("stream") && !cfg.Mapping.Has(schema.ColAggregateType) {
		return redisstream.DefaultStreamNoAggregateType
	}
	return c.String("stream")
}

// checkOldPositionKey stops binlog mode when a position is stored under the
// table's name as configured while the server stores it in another letter
// case. Earlier versions of the relay compared the binlog with the
// configured name on such servers, skipped the table's rows and stored a
// position past them; starting afresh under the server's name would hide
// that gap.
func checkOldPositionKey(c *cli.Context, cfg config, client redis.UniversalClient) error {
	if c.String("position-key") != "" || cfg.Given == "" {
		return nil
	}
	old, key := redisstream.KeyPrefix+"position:"+cfg.Given, positionKey(c, cfg)
	n, err := client.Exists(c.Context, old).Result()
	if err != nil {
		return fmt.Errorf("look for a position stored under %s (EXISTS): %w", old, redisstream.Classify(err))
	}
	if n == 0 {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: a position is stored under %s, but the server names the table %s (lower_case_table_names=%d), and the relay now keeps it at %s",
		outbox.ErrConfig, old, cfg.Database+"."+cfg.Table, cfg.LowerCaseTableNames, key),
		"a relay that ran with %s compared the binlog with that name and skipped the table's rows; re-read from where it started, or accept the gap and republish rows it missed with --mode poll, then delete %s (redis-cli DEL %s) and set the position with `binlog-outbox position set`",
		old, old, old)
}

// positionKey is --position-key or, for one table, the table's default key;
// "" for several tables without --position-key (requirePositionKey).
func positionKey(c *cli.Context, cfg config) string {
	if cfg.Several {
		return c.String("position-key")
	}
	return redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key")).Position
}

// requirePositionKey refuses several tables without --position-key, in
// the words of check (preflight.NoPositionKey).
func requirePositionKey(c *cli.Context, cfg config) error {
	if !cfg.Several || c.String("position-key") != "" {
		return nil
	}
	return preflight.NoPositionKey(cfg.TableString())
}

// newReader builds the binlog reader; cuts, when not nil, is the sink on
// Redis Cluster, which says where batches must end. With client (run) the
// reader claims its server id there before every binlog connection
// (redisstream.ServerIDClaimer).
func newReader(c *cli.Context, cfg config, srv mysqlserver.Server, db *sql.DB, sink outbox.Sink, cuts canal.Cuts, absent []string, tables []preflight.TableMatch, start position.Start, lease *redisstream.Lease, client redis.UniversalClient) (*canal.Reader, error) {
	host, port, err := preflight.BinlogAddr(cfg.MySQL.Net, cfg.MySQL.Addr)
	if err != nil {
		return nil, err
	}
	rcfg := canal.Config{
		Host: host, Port: port, User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLSConfig: cfg.MySQL.TLS,
		Flavor: srv.Flavor, Server: srv, ServerID: cfg.ServerID,
		Database: cfg.Database, Table: cfg.Table, Mapping: cfg.Mapping, Absent: absent, Extra: cfg.Extra,
		Name:  schema.Name{Database: cfg.Database, Table: cfg.Table, LowerCaseTableNames: cfg.LowerCaseTableNames},
		Start: start, PositionKey: positionKey(c, cfg), Cuts: cuts,
	}
	if cfg.Resolved {
		rcfg.Name = schema.Name{Database: cfg.Database, Table: cfg.Table, LowerCaseTableNames: cfg.LowerCaseTableNames}
	}
	if cfg.Several {
		rcfg.Sources = canalSources(cfg, tables)
	}
	if c.Command.Name == "run" {
		rcfg.HeartbeatPeriod = c.Duration("heartbeat")
		rcfg.MaxBatchEvents = c.Int("max-batch-events")
		rcfg.MaxTxBytes = c.Int("max-tx-bytes")
		rcfg.EventCacheBytes = c.Int("event-cache-bytes")
	}
	if client != nil {
		host, _ := os.Hostname()
		rcfg.ServerIDClaim = redisstream.NewServerIDClaimer(client, cfg.ServerID, rcfg.PositionKey, fmt.Sprintf("%s/%d", host, os.Getpid()), 0)
	}
	if lease != nil {
		// Not a nil *Lease in the interface: the reader would take it for one.
		rcfg.Lease, rcfg.LeaseRenew = lease, c.Duration("lease-renew")
		if rcfg.LeaseStepDown = c.Duration("lease-step-down"); rcfg.LeaseStepDown <= 0 {
			rcfg.LeaseStepDown = -1
		}
	}
	return canal.New(db, sink, rcfg, cfg.Logger)
}
