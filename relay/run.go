package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/internal/tuning"
	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// Run relays as o says until ctx is cancelled (nil then) or an error
// stops it: the preflight checks of check first, what fails every mode
// stopping the start as check reports it, then the mode resolved for the
// table or tables, binlog or poll.
func Run(ctx context.Context, o Options) error {
	requested, err := mode.Parse(o.Mode)
	if err != nil {
		return err
	}
	cfg := o.Config
	log := cfg.Logger
	defer tuning.OwnMemoryLimit(ctx, log)()
	log.Info("binlog-outbox starting", "version", o.Version, "config", cfg, "mode", requested)

	if cfg.Several && requested != mode.Poll {
		// Poll mode keeps each table's progress in its rows; auto mode
		// needs the key even so, or a missing flag would be a reason to
		// fall back to polling.
		if err := RequirePositionKey(cfg, o.PositionKey); err != nil {
			return err
		}
	}

	format := o.Format
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	rep := runPreflight(checkCtx, o, &format, PollOnSent(o, requested))
	cancel()
	if ctx.Err() != nil {
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
	var name TableName
	if !cfg.Several {
		if name, err = ResolveTable(ctx, &cfg, db); err != nil {
			return err
		}
	}

	client := cfg.RedisClient()
	defer client.Close()
	if cfg.Several {
		return runSeveral(ctx, o, cfg, rep, requested, format, db, client)
	}
	return runOne(ctx, o, cfg, name, rep, requested, format, db, client)
}

// runOne relays the one table of cfg, named as the server names it (name),
// in the mode resolved from requested and what the table ran in.
func runOne(ctx context.Context, o Options, cfg settings.Config, name TableName, rep preflight.Report, requested string, format entry.Format, db *sql.DB, client redis.UniversalClient) error {
	log := cfg.Logger
	store := redisstream.NewModeStore(client, redisstream.KeysFor(cfg.Database, cfg.Table, "").Mode)
	relayMode, err := mode.Resolve(ctx, log, rep, requested, store)
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
			"columns", cfg.Mapping.String(), "stream", StreamTemplate(cfg, o.Stream),
			"note", "an optional column added later is used after a restart; binlog mode stops when it first sees one")
	}
	return relayIn(ctx, o, cfg, client, relayMode, res.Fields, format,
		func() error { return runPoll(ctx, o, cfg, rep.Server, db, client, res.Table) },
		func() error { return runBinlog(ctx, o, cfg, name, rep, db, client, res.Absent, nil) })
}

// relayIn logs the fields entries carry beside the built-in ones and the
// format, then relays in relayMode: poll with its trimmer running, or
// binlog, which starts its trimmer with its lease (runBinlog).
func relayIn(ctx context.Context, o Options, cfg settings.Config, client redis.UniversalClient, relayMode string, fields []schema.ExtraColumn, format entry.Format, poll, binlog func() error) error {
	log := cfg.Logger
	if d := schema.DescribeFields(fields); d != "" {
		log.Info("entries carry columns beside the built-in fields", "fields", d)
	}
	logFormat(log, format)
	if o.OwnsProcess {
		// Start-up is done: what it alone ran need not stay resident.
		if n, err := tuning.UnmapStartupPages(); err != nil {
			log.Debug("start-up pages of the executable stay mapped", "err", err)
		} else {
			log.Debug("unmapped the executable's start-up pages", "resident_kib", n>>10)
		}
	}
	if relayMode != mode.Poll {
		return binlog()
	}
	stopTrim, err := startTrimmer(ctx, o, cfg, client, nil)
	if err != nil {
		return err
	}
	defer stopTrim()
	return poll()
}

// runPreflight runs the checks of `check` and `run` (PreflightConfig),
// the relay's state in Redis included, read with a client of its own.
func runPreflight(ctx context.Context, o Options, format *entry.Format, onSent string) preflight.Report {
	pc := PreflightConfig(ctx, o, format, onSent)
	client := o.Config.RedisClient()
	defer client.Close()
	pc.StateRedis = client
	return preflight.Run(ctx, pc)
}

// PreflightConfig is what `check` and `run` check: the table or tables of
// o.Config, the stream and format flags, the position key, and what run
// does with its flags at start; format is o.Format or a copy of it, which
// the preflight may complete, and onSent is PollOnSent's.
func PreflightConfig(ctx context.Context, o Options, format *entry.Format, onSent string) preflight.Config {
	cfg := o.Config
	pc := preflight.Config{
		MySQLDSN: cfg.DSN(), Redis: checkedRedis(ctx, cfg), Table: cfg.Table, Database: cfg.Database, Mapping: cfg.Mapping, Declared: cfg.Declared,
		Extra: cfg.Extra, ServerID: cfg.ServerID, ReservedColumn: cfg.ReservedColumn(), OnSent: onSent, PositionKey: cfg.PositionKey(o.PositionKey),
		Format: format, Stream: o.Stream, Partitions: o.Partitions,
		Start: startFlags(o, cfg, *format),
	}
	if cfg.Several {
		pc.Sources = cfg.Sources
	}
	return pc
}

// startFlags is what run does at start with its flags (check has them
// too): the sink, the lease, trimming, --start-from, and what Validate
// refuses of them.
func startFlags(o Options, cfg settings.Config, format entry.Format) *preflight.Start {
	return &preflight.Start{
		Sink:    sinkConfig(o, cfg, format),
		Refused: o.Validate(),
		Lease:   o.Lease, Trim: o.Trim, Trimming: trimming(o), StartFrom: o.StartFrom, Mode: o.Mode,
	}
}

// sinkConfig is the sink's configuration from the flags, before the
// mapping resolved against the table completes it (Start.SinkConfig).
func sinkConfig(o Options, cfg settings.Config, format entry.Format) redisstream.Config {
	sc := entryConfig(o, cfg, format)
	sc.PositionKey = cfg.PositionKey(o.PositionKey)
	// The same keys as poll mode's, so that a switch between the modes
	// skips what the other one appended.
	sc.Dedupe = redisstream.Dedupe{
		Window:    o.DedupeWindow,
		KeyPrefix: redisstream.KeysFor(cfg.Database, cfg.Table, "").DedupePrefix,
		BySource:  cfg.Several,
	}
	return sc
}

// entryConfig is the part of the sink's configuration that decides which
// stream an entry goes to and how it is encoded: the stream and format
// options, which run, dead-letters replay and backfill share.
func entryConfig(o Options, cfg settings.Config, format entry.Format) redisstream.Config {
	return redisstream.Config{
		Stream:           o.Stream,
		Partitions:       o.Partitions,
		DeadLetterStream: o.DeadLetterStream,
		Groups:           o.EnsureGroups,
		Format:           format,
		Cluster:          cfg.RedisCluster != nil,
	}
}

// EntrySinkConfig is the sink configuration of o's stream and format
// options (Stream, Partitions, DeadLetterStream, EnsureGroups, Format)
// resolved against the table's mapping, as run builds it but without
// run's position key and dedupe: the commands that append entries
// outside run (dead-letters, backfill) build their sink from it, so that
// an option of the entries reaches them as it reaches run.
func EntrySinkConfig(o Options) redisstream.Config {
	return preflight.Start{Sink: entryConfig(o, o.Config, o.Format)}.SinkConfig(o.Config.Mapping)
}

// EntrySink is the sink of EntrySinkConfig(o) over client.
func EntrySink(client redis.UniversalClient, o Options) (*redisstream.Sink, error) {
	return redisstream.New(client, EntrySinkConfig(o))
}

// logWarnings logs the preflight's warnings that concern the mode, once.
func logWarnings(log *slog.Logger, rep preflight.Report, relayMode string) {
	for _, w := range rep.Warned(preflight.Mode(relayMode)) {
		log.Warn("preflight: "+w.Name, "detail", w.Detail, logging.KeyHint, w.Fix)
	}
}

func logFormat(log *slog.Logger, format entry.Format) {
	if format.Name != entry.FormatFlat {
		log.Info("entry format", "format", format.String())
	}
}

// runBinlog relays in binlog mode: the one table of cfg (as the server
// names it, and its absent columns) or, with several, the tables the
// preflight matched.
func runBinlog(ctx context.Context, o Options, cfg settings.Config, name TableName, rep preflight.Report, db *sql.DB, client redis.UniversalClient, absent []string, tables []preflight.TableMatch) error {
	srv := rep.Server
	start, err := position.ParseStart(o.StartFrom)
	if err != nil {
		return err
	}
	if err := checkOldPositionKey(ctx, o, cfg, name, client); err != nil {
		return err
	}
	lease, err := newLease(o, cfg, client)
	if err != nil {
		return err
	}
	stopTrim, err := startTrimmer(ctx, o, cfg, client, lease)
	if err != nil {
		return err
	}
	defer stopTrim()
	sink, err := newSink(o, cfg, client, lease)
	if err != nil {
		return err
	}
	appends := metrics.NewAppends(mode.Binlog)
	var cuts canal.Cuts
	if cfg.RedisCluster != nil {
		cuts = sink
	}
	reader, err := newReader(o, cfg, name.Name, srv, db, appends.Sink(sink), cuts, absent, tables, start, lease, client, recorder(client, rep))
	if err != nil {
		return err
	}
	stop, err := startMonitor(ctx, o, cfg, mode.Binlog, client, func(probeDB *sql.DB) lag.MonitorConfig {
		return lag.MonitorConfig{
			Binlog: &lag.Binlog{DB: probeDB, Server: srv, Dumper: DumperFor(cfg, srv.Flavor)},
			Relay: func() lag.Relay {
				s := reader.Stats()
				return lag.Relay{Events: s.Events, LastProgress: s.LastAppend, Retrying: s.Retrying, File: s.Stored.File, Pos: s.Stored.Pos, Standby: s.Standby}
			},
		}
	}, metrics.BinlogCollector(func() metrics.BinlogStats { return binlogMetric(reader.Stats()) }), appends)
	if err != nil {
		return err
	}
	defer stop()
	if o.OwnsProcess {
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tuning.FollowCatchUp(pctx, cfg.Logger, func() tuning.CatchUp {
				s := reader.Stats()
				return tuning.CatchUp{LastAppend: s.LastAppend, LastCommit: s.LastCommit, Checkpoint: canal.DefaultIdleCheckpoint}
			})
		}()
		unmapped := make(chan struct{})
		go func() {
			defer close(unmapped)
			unmapAfterFirstAppend(pctx, cfg.Logger, func() bool { return !reader.Stats().LastAppend.IsZero() })
		}()
		defer func() { cancel(); <-done; <-unmapped }()
	}
	return reader.Run(ctx)
}

// newLease builds the lease of the position from --lease, --lease-ttl and
// --lease-renew; nil with --lease=false.
func newLease(o Options, cfg settings.Config, client redis.UniversalClient) (*redisstream.Lease, error) {
	if !o.Lease {
		return nil, nil
	}
	return redisstream.NewLease(client, redisstream.LeaseConfig{Key: redisstream.KeysFor(cfg.Database, cfg.Table, o.PositionKey).Lease, TTL: o.LeaseTTL,
		Cluster: cfg.RedisCluster != nil, Log: cfg.Logger.With("component", "lease")})
}

// newSink builds the Redis sink from the stream and format flags; lease,
// when not nil, is checked with every append.
func newSink(o Options, cfg settings.Config, client redis.UniversalClient, lease *redisstream.Lease) (*redisstream.Sink, error) {
	sc := preflight.Start{Sink: sinkConfig(o, cfg, o.Format)}.SinkConfig(cfg.Mapping)
	sc.Lease = lease
	return redisstream.New(client, sc)
}

// StreamTemplate returns given (--stream), or, when it is not set (""), the
// default: one without {aggregate_type} when the table has no such column.
func StreamTemplate(cfg settings.Config, given string) string {
	switch {
	case given != "":
		return given
	case !cfg.Mapping.Has(schema.ColAggregateType):
		return entry.DefaultStreamNoAggregateType
	}
	return entry.DefaultStream
}

// checkOldPositionKey stops binlog mode when a position is stored under the
// table's name as configured while the server stores it in another letter
// case. Earlier versions of the relay compared the binlog with the
// configured name on such servers, skipped the table's rows and stored a
// position past them; starting afresh under the server's name would hide
// that gap.
func checkOldPositionKey(ctx context.Context, o Options, cfg settings.Config, name TableName, client redis.UniversalClient) error {
	if o.PositionKey != "" || name.Given == "" {
		return nil
	}
	old, key := redisstream.KeyPrefix+"position:"+name.Given, cfg.PositionKey(o.PositionKey)
	n, err := client.Exists(ctx, old).Result()
	if err != nil {
		return fmt.Errorf("look for a position stored under %s (EXISTS): %w", old, redisconn.Classify(err))
	}
	if n == 0 {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: a position is stored under %s, but the server names the table %s (lower_case_table_names=%d), and the relay now keeps it at %s",
		outbox.ErrConfig, old, name.String(), name.LowerCaseTableNames, key),
		"a relay that ran with %s compared the binlog with that name and skipped the table's rows; re-read from where it started, or accept the gap and republish rows it missed with --mode poll, then delete %s (redis-cli DEL %s) and set the position with `binlog-outbox position set`",
		old, old, old)
}

// RequirePositionKey refuses several tables without --position-key
// (given), in the words of check (preflight.NoPositionKey).
func RequirePositionKey(cfg settings.Config, given string) error {
	if !cfg.Several || given != "" {
		return nil
	}
	return preflight.NoPositionKey(cfg.TableString())
}

// newReader builds the binlog reader of the table name (as the server names
// it; zero for the reader to ask, or with several tables); cuts, when not
// nil, is the sink on Redis Cluster, which says where batches must end. With client (run) the reader claims its server id
// there before every binlog connection (redisstream.ServerIDClaimer).
func newReader(o Options, cfg settings.Config, name schema.Name, srv mysqlserver.Server, db *sql.DB, sink outbox.Sink, cuts canal.Cuts, absent []string, tables []preflight.TableMatch, start position.Start, lease *redisstream.Lease, client redis.UniversalClient, rec *startRecord) (*canal.Reader, error) {
	host, port, err := preflight.BinlogAddr(cfg.MySQL.Net, cfg.MySQL.Addr)
	if err != nil {
		return nil, err
	}
	rcfg := canal.Config{
		Host: host, Port: port, User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLSConfig: cfg.MySQL.TLS,
		Flavor: srv.Flavor, Server: srv, ServerID: cfg.ServerID,
		Database: cfg.Database, Table: cfg.Table, Mapping: cfg.Mapping, Absent: absent, Extra: cfg.Extra,
		Name:  name,
		Start: start, PositionKey: cfg.PositionKey(o.PositionKey), Cuts: cuts,
		UpdateWarning: cfg.UpdateWarning(),
	}
	if cfg.Several {
		rcfg.Sources = canalSources(cfg, tables)
	}
	// Zero (a command other than run) is the reader's default.
	rcfg.HeartbeatPeriod = o.Heartbeat
	rcfg.MaxBatchEvents = o.MaxBatchEvents
	rcfg.MaxTxBytes = o.MaxTxBytes
	rcfg.EventCacheBytes = o.EventCacheBytes
	if client != nil {
		host, _ := os.Hostname()
		var ttl time.Duration // the claim's default
		if !o.Lease {
			// The claim is what keeps a twin out; a crashed relay's
			// restart waits it out, as a lease holder's waits its lease.
			ttl = o.LeaseTTL
		}
		claim := redisstream.NewServerIDClaimer(client, cfg.ServerID, rcfg.PositionKey, fmt.Sprintf("%s/%d", host, os.Getpid()), ttl)
		if !o.Lease {
			claim.Exclusive()
		}
		rcfg.ServerIDClaim = claim
	}
	if rec != nil {
		rcfg.Recorder, rcfg.ExpectPosition = rec.write, rec.expectPosition
	}
	if lease != nil {
		// Not a nil *Lease in the interface: the reader would take it for one.
		rcfg.Lease, rcfg.LeaseRenew = lease, o.LeaseRenew
		if rcfg.LeaseStepDown = o.LeaseStepDown; rcfg.LeaseStepDown <= 0 {
			rcfg.LeaseStepDown = -1
		}
	}
	return canal.New(db, sink, rcfg, cfg.Logger)
}

// NewReader builds the binlog reader of cfg's table or tables that
// `position set` checks a position with: under positionKey (--position-key),
// without lease or server id claim, with the reader's defaults; the reader
// asks the server for the table's name.
func NewReader(cfg settings.Config, positionKey string, srv mysqlserver.Server, db *sql.DB, sink outbox.Sink, start position.Start) (*canal.Reader, error) {
	return newReader(Options{PositionKey: positionKey}, cfg, schema.Name{}, srv, db, sink, nil, nil, nil, start, nil, nil, nil)
}

// unmapAfterFirstAppend gives back the executable's pages once more when
// appended first reports the first append: the binlog session's start
// (connecting, registering as a replica, the lease, the first batch) runs
// code the catch-up does not run again, which the unmapping at the end of
// the checks (relayIn) cannot drop.
func unmapAfterFirstAppend(ctx context.Context, log *slog.Logger, appended func() bool) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !appended() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	if n, err := tuning.UnmapStartupPages(); err != nil {
		log.Debug("session start's pages of the executable stay mapped", "err", err)
	} else {
		log.Debug("unmapped the executable's session start pages", "resident_kib", n>>10)
	}
}
