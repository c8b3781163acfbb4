package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/bench"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure the relay against the limits of this machine (starts private MariaDB and Redis unless told otherwise)",
		Description: "Loads backlogs (single-row and multi-row transactions, 16 KiB and 512 KiB payloads, one huge transaction,\n" +
			"application-shaped transactions that update two wide rows besides their outbox row), runs this binary\n" +
			"as the relay in a child process for each workload (catch-up and live, binlog and poll mode) and prints\n" +
			"events/s, latency from COMMIT's return to the entry being readable, peak RSS, CPU per million events\n" +
			"and lag, next to what go-mysql, go-redis, the producers, a naive polling relay and a minimal relay\n" +
			"(go-mysql rows pipelined into Redis as decoded, beside the live relay) reach in the same run.\n" +
			"The global --mysql-dsn and --redis-url, when set, point it at existing servers instead of private ones:\n" +
			"the DSN's user must be administrative (the database binlog_outbox_bench is created and dropped, and\n" +
			"innodb_flush_log_at_trx_commit and sync_binlog are changed for the run and restored), and Redis keys\n" +
			"under bob:* are written and deleted.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "rows", Usage: "rows of each catch-up backlog", Value: bench.DefaultRows, EnvVars: []string{"BINLOG_OUTBOX_BENCH_ROWS"}},
			&cli.IntFlag{Name: "tx-rows", Usage: "rows per transaction of the multi-row backlog", Value: bench.DefaultTxRows},
			&cli.IntFlag{Name: "large-rows", Usage: "rows of the 16 KiB backlog (default rows/40)"},
			&cli.IntFlag{Name: "huge-rows", Usage: "rows of the 512 KiB backlog (default rows/5000, at least 10)"},
			&cli.IntFlag{Name: "naive-rows", Usage: "rows the naive polling relay moves (default rows/200)"},
			&cli.IntFlag{Name: "app-rows", Usage: "transactions of the application-shaped backlog, each updating two wide rows of other tables and inserting one outbox row (default rows/10)"},
			&cli.IntFlag{Name: "conns", Usage: "producer connections", Value: bench.DefaultConns},
			&cli.IntFlag{Name: "streams", Usage: "streams of the many-streams workload", Value: bench.DefaultStreams},
			&cli.DurationFlag{Name: "live-duration", Usage: "how long each live workload produces", Value: bench.DefaultLiveDuration},
			&cli.Float64Flag{Name: "live-rate", Usage: "transactions per second of the paced live workload", Value: bench.DefaultLiveRate},
			&cli.StringSliceFlag{Name: "workloads", Usage: "run only these workloads (comma-separated): " + strings.Join(bench.Workloads(), ", ") + " (default: all)"},
			&cli.BoolFlag{Name: "skip-big-tx", Usage: "leave out the single transaction of --rows rows"},
			&cli.StringFlag{Name: "relay-binary", Usage: "binlog-outbox executable to run as the relay (default: this one)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: runBench,
	}
}

func runBench(c *cli.Context) error {
	cfg, err := loadTableConfig(c)
	if err != nil {
		return err
	}
	if f := cfg.TLS("redis"); f.Set() {
		// The relays bench starts get --redis-url only, and its private
		// Redis speaks no TLS.
		return outbox.WithHint(fmt.Errorf("%w: bench measures without TLS to Redis, and %s is set", outbox.ErrConfig, f.Given()),
			"unset the --redis-tls-* flags and BINLOG_OUTBOX_REDIS_TLS_* for bench; point --redis-url at a Redis reachable without TLS, or leave it out for a private one")
	}
	bin := c.String("relay-binary")
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("find this executable: %w", err)
		}
	}
	rep, err := bench.Run(c.Context, bench.Config{
		MySQLDSN: cfg.Supplied("mysql-dsn"), RedisURL: cfg.Supplied("redis-url"), RelayBinary: bin,
		Rows: c.Int("rows"), TxRows: c.Int("tx-rows"), LargeRows: c.Int("large-rows"), HugeRows: c.Int("huge-rows"), NaiveRows: c.Int("naive-rows"),
		AppRows: c.Int("app-rows"), Conns: c.Int("conns"), Streams: c.Int("streams"), LiveDuration: c.Duration("live-duration"),
		LiveRate: c.Float64("live-rate"), SkipBigTx: c.Bool("skip-big-tx"), Workloads: c.StringSlice("workloads"), Log: cfg.Logger.With("component", "bench"),
	})
	if err != nil {
		if rep != nil && len(rep.Results) > 0 {
			_ = rep.WriteTable(c.App.ErrWriter)
		}
		return err
	}
	fmt.Fprintf(c.App.Writer, "$ binlog-outbox %s\n", strings.Join(os.Args[1:], " "))
	if c.Bool("json") {
		return rep.WriteJSON(c.App.Writer)
	}
	return rep.WriteTable(c.App.Writer)
}
