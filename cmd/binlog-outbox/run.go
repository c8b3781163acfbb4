package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// defaultMemoryLimit is the relay's soft memory limit (GOMEMLIMIT overrides).
const defaultMemoryLimit = 20 << 20

// Modes of `run`.
const (
	modeBinlog = string(preflight.ModeBinlog)
	modePoll   = string(preflight.ModePoll)
)

// streamFlags are the flags of `run` that shape the streams; `position`
// shares the ones that name the position key.
func streamFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "stream",
			Usage:   "stream key template; placeholders {aggregate_type}, {aggregate_id}, {event_type}, {partition}",
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

func positionKeyFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "position-key",
		Usage:   "Redis key of the binlog position (default binlog-outbox:position:<database>.<table>)",
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

func runCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{
			Name:    "mode",
			Usage:   "binlog (tail the binary log), poll (SELECT ... FOR UPDATE SKIP LOCKED) or auto (binlog when its requirements are met)",
			EnvVars: []string{"BINLOG_OUTBOX_MODE"},
			Value:   modeAuto,
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
			Usage:   "serve Prometheus /metrics and /healthz on this address, e.g. :9108 (off when empty)",
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
	}
	flags = append(flags, streamFlags()...)
	flags = append(flags, pollFlags()...)
	return &cli.Command{
		Name:  "run",
		Usage: "relay committed outbox rows to Redis Streams until SIGINT or SIGTERM",
		Description: "Runs the preflight checks of `check`, then relays. In binlog mode every committed event is appended\n" +
			"exactly once: the appends and the binlog position are written to Redis in one atomic step.\n" +
			"SIGINT or SIGTERM stops cleanly (exit 0); a second signal exits at once.",
		Flags:  flags,
		Action: runRelay,
	}
}

func runRelay(c *cli.Context) error {
	mode := strings.ToLower(c.String("mode"))
	if mode != modeAuto && mode != modeBinlog && mode != modePoll {
		return usageError{fmt.Errorf("--mode %q: want binlog, poll or auto", c.String("mode"))}
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The relay's live data is bounded (--max-tx-bytes, the batches);
		// a soft limit keeps the garbage collector from letting the heap
		// double past it. GOMEMLIMIT overrides it.
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	log := cfg.Logger
	log.Info("binlog-outbox starting", "version", versionString(), "config", cfg, "mode", mode)

	checkCtx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	rep := preflight.Run(checkCtx, preflight.Config{
		MySQLDSN: cfg.DSN(), RedisURL: cfg.RedisURL, Table: cfg.Table, Mapping: cfg.Mapping, ServerID: cfg.ServerID,
		OnSent: pollOnSent(c, mode),
	})
	cancel()
	if c.Context.Err() != nil {
		return nil
	}
	tolerateOwnServerID(&rep)

	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return fmt.Errorf("open mysql: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	// Before any key is built from the names: they must be the server's.
	if err := resolveTable(c.Context, &cfg, db); err != nil {
		return err
	}

	client, err := redisstream.NewClient(cfg.RedisURL)
	if err != nil {
		return err
	}
	defer client.Close()
	modeKey := "binlog-outbox:mode:" + cfg.Database + "." + cfg.Table
	stored, err := client.Get(c.Context, modeKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the mode this table ran in (%s): %w", modeKey, err)
	}
	mode, err = chooseMode(log, rep, mode, stored, modeKey)
	if err != nil {
		return err
	}
	if mode != stored {
		if err := client.Set(c.Context, modeKey, mode, 0).Err(); err != nil {
			return fmt.Errorf("store the mode (%s): %w", modeKey, err)
		}
	}
	for _, w := range rep.Warned(preflight.Mode(mode)) {
		log.Warn("preflight: "+w.Name, "detail", w.Detail, "fix", w.Fix)
	}

	table, problems, err := schema.Validate(c.Context, db, cfg.Database, cfg.Table, cfg.Mapping)
	if err != nil {
		return fmt.Errorf("inspect the outbox table: %w", err)
	}
	if err := schema.ProblemsError(cfg.Table, problems); err != nil {
		return err
	}

	if mode == modePoll {
		return runPoll(c, cfg, db, client, table)
	}
	return runBinlog(c, cfg, rep.Server, db, client, table)
}

// tolerateOwnServerID turns a "server id in use" failure into a warning.
// Right after a crash or restart the replica holding the id is usually the
// relay's own previous connection, which the server drops when it notices;
// the reader retries a refused id for a grace period and then stops with the
// fix. Failing here instead would keep a restarted relay from starting, and
// would make auto mode fall back to polling for a moment.
func tolerateOwnServerID(rep *preflight.Report) {
	for i, r := range rep.Results {
		if r.Name == preflight.NameServerID && r.Status == preflight.Fail && strings.Contains(r.Detail, "used by a replica") {
			rep.Results[i].Status = preflight.Warn
			rep.Results[i].Detail += "; if this is the relay's own previous connection the server drops it shortly, otherwise the relay stops after a minute of refusals"
		}
	}
}

// chooseMode applies --mode to the preflight report and to the mode the
// table ran in before (stored in Redis). Auto mode prefers binlog mode on a
// first start and says in one line why it falls back to polling; after that
// it stays with the mode it chose. Changing modes silently would lose or
// repeat events: poll mode would re-append every row binlog mode left
// unmarked, binlog mode starting "now" would skip rows not yet polled. A
// switch is deliberate: --mode and docs/switching-modes.md.
func chooseMode(log *slog.Logger, rep preflight.Report, mode, stored, modeKey string) (string, error) {
	switch mode {
	case modeBinlog, modePoll:
		if stored != "" && stored != mode {
			log.Warn("switching modes: follow docs/switching-modes.md to lose and repeat nothing", "from", stored, "to", mode)
		}
		return mode, rep.Err(preflight.Mode(mode))
	}
	switch stored {
	case modeBinlog:
		if err := rep.Err(preflight.ModeBinlog); err != nil {
			return "", outbox.WithHint(fmt.Errorf("auto mode: this table is relayed in binlog mode (%s), and binlog mode cannot run: %w", modeKey, err),
				"%s; auto mode never falls back to polling once binlog mode ran (polling would append again every row binlog mode appended); to switch for good follow docs/switching-modes.md", outbox.HintOf(err))
		}
		return modeBinlog, nil
	case modePoll:
		if len(rep.Failed(preflight.ModeBinlog)) == 0 {
			log.Info("auto mode: binlog mode is available; this table is relayed in poll mode, switch deliberately (docs/switching-modes.md)")
		}
		return modePoll, rep.Err(preflight.ModePoll)
	}
	failed := rep.Failed(preflight.ModeBinlog)
	if len(failed) == 0 {
		log.Info("auto mode: binlog requirements met, using binlog mode")
		return modeBinlog, nil
	}
	if err := rep.Err(preflight.ModePoll); err != nil {
		return "", fmt.Errorf("auto mode: neither mode can run: %w", err)
	}
	log.Warn("auto mode: binlog mode unavailable, using poll mode",
		"reason", failed[0].Name+": "+failed[0].Detail, "fix", failed[0].Fix,
		"how", "meet the binlog requirements (`binlog-outbox check --mode binlog` lists them), then switch as docs/switching-modes.md describes for exactly-once binlog mode")
	return modePoll, nil
}

func runBinlog(c *cli.Context, cfg config, srv preflight.Server, db *sql.DB, client *redis.Client, table *schema.Table) error {
	start, err := position.ParseStart(c.String("start-from"))
	if err != nil {
		return err
	}
	if err := checkOldPositionKey(c, cfg, client); err != nil {
		return err
	}
	sink, err := newSink(c, cfg, client)
	if err != nil {
		return err
	}
	reader, err := newReader(c, cfg, srv, db, sink, table, start)
	if err != nil {
		return err
	}
	stop, err := serveMetrics(c, cfg, metrics.BinlogCollector(reader.Stats))
	if err != nil {
		return err
	}
	defer stop()
	return reader.Run(c.Context)
}

// serveMetrics starts the metrics endpoint when --metrics-addr is set.
func serveMetrics(c *cli.Context, cfg config, col prometheus.Collector) (stop func(), err error) {
	addr := c.String("metrics-addr")
	if addr == "" {
		return func() {}, nil
	}
	return metrics.Serve(c.Context, addr, col, cfg.Logger)
}

// newSink builds the Redis sink from the stream flags.
func newSink(c *cli.Context, cfg config, client redis.UniversalClient) (*redisstream.Sink, error) {
	return redisstream.New(client, redisstream.Config{
		Stream:           c.String("stream"),
		Partitions:       c.Int("partitions"),
		DeadLetterStream: c.String("dead-letter-stream"),
		PositionKey:      positionKey(c, cfg),
		NoAggregateType:  !cfg.Mapping.Has(schema.ColAggregateType),
		NoHeaders:        !cfg.Mapping.Has(schema.ColHeaders),
		// The same keys as poll mode's, so that a switch between the
		// modes skips what the other one appended.
		Dedupe: redisstream.Dedupe{
			Window:    c.Duration("dedupe-window"),
			KeyPrefix: redisstream.DefaultDedupeKeyPrefix + cfg.Database + "." + cfg.Table + ":",
		},
	})
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
	old, key := "binlog-outbox:position:"+cfg.Given, positionKey(c, cfg)
	n, err := client.Exists(c.Context, old).Result()
	if err != nil {
		return fmt.Errorf("look for a position stored under %s: %w", old, err)
	}
	if n == 0 {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: a position is stored under %s, but the server names the table %s (lower_case_table_names=%d), and the relay now keeps it at %s",
		outbox.ErrConfig, old, cfg.Database+"."+cfg.Table, cfg.LowerCaseTableNames, key),
		"a relay that ran with %s compared the binlog with that name and skipped the table's rows; re-read from where it started, or accept the gap and republish rows it missed with --mode poll, then delete %s (redis-cli DEL %s) and set the position with `binlog-outbox position set`",
		old, old, old)
}

func positionKey(c *cli.Context, cfg config) string {
	if k := c.String("position-key"); k != "" {
		return k
	}
	return "binlog-outbox:position:" + cfg.Database + "." + cfg.Table
}

func newReader(c *cli.Context, cfg config, srv preflight.Server, db *sql.DB, sink outbox.Sink, table *schema.Table, start position.Start) (*canal.Reader, error) {
	host, portStr, err := net.SplitHostPort(cfg.MySQL.Addr)
	if err != nil || cfg.MySQL.Net != "tcp" {
		return nil, outbox.WithHint(fmt.Errorf("%w: binlog mode needs a TCP address in --mysql-dsn, got %s(%s)", outbox.ErrConfig, cfg.MySQL.Net, cfg.MySQL.Addr),
			"write the DSN as user:pass@tcp(host:3306)/app")
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q in --mysql-dsn", outbox.ErrConfig, portStr)
	}
	var cols []canal.Column
	if table != nil {
		for _, col := range table.Columns {
			cols = append(cols, canal.Column{Name: col.Name, DataType: col.DataType})
		}
	}
	rcfg := canal.Config{
		Host: host, Port: uint16(port), User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLSConfig: cfg.MySQL.TLS,
		Flavor: srv.Flavor, ServerID: cfg.ServerID,
		Database: cfg.Database, Table: cfg.Table, Mapping: cfg.Mapping, Columns: cols,
		Start: start, PositionKey: positionKey(c, cfg),
	}
	if c.Command.Name == "run" {
		rcfg.HeartbeatPeriod = c.Duration("heartbeat")
		rcfg.MaxBatchEvents = c.Int("max-batch-events")
		rcfg.MaxTxBytes = c.Int("max-tx-bytes")
	}
	return canal.New(db, sink, rcfg, cfg.Logger)
}
