// Command binlog-outbox-bench measures the relay against the limits of the
// machine it runs on (package bench). It is a binary of its own so that the
// relay links neither the benchmark nor the server launcher it starts
// private MariaDB and Redis with.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/bench"
	"github.com/binlog-outbox/binlog-outbox/internal/exitcode"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// relayName is the relay's executable, looked for beside this one and then
// on PATH when --relay-binary is not given.
const relayName = "binlog-outbox"

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	// The first signal stops the run and its relay child and servers
	// cleanly; a second one exits at once.
	exitcode.CancelOnSignal(cancel, os.Interrupt, syscall.SIGTERM)
	app := NewApp()
	err := app.RunContext(ctx, os.Args)
	cancel()
	os.Exit(exitcode.Report(app.ErrWriter, err, nil))
}

// NewApp builds the command line; tests drive it in-process.
func NewApp() *cli.App {
	return &cli.App{
		Name:  "binlog-outbox-bench",
		Usage: "measure the relay against the limits of this machine (starts private MariaDB and Redis unless told otherwise)",
		Description: "Loads backlogs (single-row and multi-row transactions, 16 KiB and 512 KiB payloads, one huge transaction,\n" +
			"application-shaped transactions that update two wide rows besides their outbox row), runs the binlog-outbox\n" +
			"binary as the relay in a child process for each workload (catch-up and live, binlog and poll mode) and prints\n" +
			"events/s, latency from COMMIT's return to the entry being readable, peak RSS, CPU per million events\n" +
			"and lag, next to what go-mysql, go-redis, the producers, a naive polling relay and a minimal relay\n" +
			"(go-mysql rows pipelined into Redis as decoded, beside the live relay) reach in the same run.\n" +
			"--redis-callgrind counts Redis's instructions instead of its CPU time, which a shared machine does not move.\n" +
			"--mysql-dsn and --redis-url, when set, point it at existing servers instead of private ones:\n" +
			"the DSN's user must be administrative (the database binlog_outbox_bench is created and dropped, and\n" +
			"innodb_flush_log_at_trx_commit and sync_binlog are changed for the run and restored), and Redis keys\n" +
			"under bob:* are written and deleted.",
		Flags: []cli.Flag{
			// DefaultText hides the value an environment variable gave,
			// which --help would otherwise print, password and all.
			&cli.StringFlag{Name: "mysql-dsn", Usage: "administrative go-sql-driver DSN of an existing server", EnvVars: []string{"BINLOG_OUTBOX_MYSQL_DSN"}, DefaultText: "a private MariaDB"},
			&cli.StringFlag{Name: "redis-url", Usage: "redis:// URL of an existing Redis (no TLS, no cluster)", EnvVars: []string{"BINLOG_OUTBOX_REDIS_URL"}, DefaultText: "a private Redis"},
			&cli.StringFlag{Name: "log-format", Usage: "log format: text (coloured on a terminal) or json", EnvVars: []string{"BINLOG_OUTBOX_LOG_FORMAT"}, Value: logging.DefaultFormat},
			&cli.StringFlag{Name: "log-level", Usage: "log level: debug, info, warn or error", EnvVars: []string{"BINLOG_OUTBOX_LOG_LEVEL"}, Value: logging.DefaultLevel},
			&cli.IntFlag{Name: "rows", Usage: "rows of each catch-up backlog", Value: bench.DefaultRows, EnvVars: []string{"BINLOG_OUTBOX_BENCH_ROWS"}},
			&cli.IntFlag{Name: "tx-rows", Usage: "rows per transaction of the multi-row backlog", Value: bench.DefaultTxRows},
			&cli.IntFlag{Name: "large-rows", Usage: "rows of the 16 KiB backlog (default rows/40)"},
			&cli.IntFlag{Name: "huge-rows", Usage: "rows of the 512 KiB backlog (default rows/2000, at least 10)"},
			&cli.IntFlag{Name: "giant-rows", Usage: "rows of the 16 MiB backlog", Value: bench.DefaultGiantRows},
			&cli.IntFlag{Name: "naive-rows", Usage: "rows the naive polling relay moves (default rows/200)"},
			&cli.IntFlag{Name: "app-rows", Usage: "transactions of the application-shaped backlog, each updating two wide rows of other tables and inserting one outbox row (default rows/10)"},
			&cli.IntFlag{Name: "conns", Usage: "producer connections", Value: bench.DefaultConns},
			&cli.IntFlag{Name: "streams", Usage: "streams of the many-streams workload", Value: bench.DefaultStreams},
			&cli.DurationFlag{Name: "live-duration", Usage: "how long each live workload produces", Value: bench.DefaultLiveDuration},
			&cli.Float64Flag{Name: "live-rate", Usage: "transactions per second of the paced live workload", Value: bench.DefaultLiveRate},
			&cli.IntFlag{Name: "tenants", Usage: "tenant databases of the tenants workload", Value: bench.DefaultTenants},
			&cli.IntFlag{Name: "pairs", Usage: "times each catch-up with a go-mysql ceiling (single, streams, app) runs, its ceiling measured again before each, and each binlog live workload runs, beside its minimal relay, with the median of their p99s over it", Value: 1},
			&cli.StringSliceFlag{Name: "workloads", Usage: "run only these workloads (comma-separated): " + strings.Join(bench.Workloads(), ", ") + " (default: all)"},
			&cli.StringFlag{Name: "redis-callgrind", Usage: "run the private Redis under valgrind's callgrind, its dumps in this directory (kept, for callgrind_annotate), and print Redis's instructions per entry of each binlog catch-up beside a bare pipelined XADD's of the same entries, a ratio the machine's load does not move (Redis's CPU time is then left out); Redis runs some 50 times slower: e.g. --workloads single --rows 20000"},
			&cli.BoolFlag{Name: "skip-big-tx", Usage: "leave out the single transaction of --rows rows"},
			&cli.StringFlag{Name: "relay-binary", Usage: "binlog-outbox executable to run as the relay (default: binlog-outbox beside this executable, else on PATH)"},
			&cli.StringFlag{Name: "baseline-relay-binary", Usage: "another binlog-outbox build the tenants workload and the binlog live workloads also run, alternating with --relay-binary, so that both are measured in the same run"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		HideHelpCommand: true,
		Writer:          os.Stdout,
		ErrWriter:       os.Stderr,
		// main maps errors to exit codes; cli must not exit by itself, or
		// tests driving the app in-process would end.
		ExitErrHandler: func(*cli.Context, error) {},
		Action:         runBench,
	}
}

func runBench(c *cli.Context) error {
	if c.Args().Present() {
		return outbox.WithHint(fmt.Errorf("%w: unexpected argument %q", outbox.ErrConfig, c.Args().First()),
			"binlog-outbox-bench takes flags only: see binlog-outbox-bench --help")
	}
	log, err := logging.New(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
	if err != nil {
		return err
	}
	// The Config's zero means its default; on the command line 0 is a mistake.
	if p := c.Int("pairs"); p < 1 {
		return fmt.Errorf("%w: --pairs %d must be at least 1", outbox.ErrConfig, p)
	}
	bin, err := relayBinary(c.String("relay-binary"))
	if err != nil {
		return err
	}
	rep, err := bench.Run(c.Context, bench.Config{
		MySQLDSN: c.String("mysql-dsn"), RedisURL: c.String("redis-url"), RelayBinary: bin, BaselineBinary: c.String("baseline-relay-binary"),
		Rows: c.Int("rows"), TxRows: c.Int("tx-rows"), LargeRows: c.Int("large-rows"), HugeRows: c.Int("huge-rows"), GiantRows: c.Int("giant-rows"), NaiveRows: c.Int("naive-rows"),
		AppRows: c.Int("app-rows"), Conns: c.Int("conns"), Streams: c.Int("streams"), LiveDuration: c.Duration("live-duration"),
		LiveRate: c.Float64("live-rate"), SkipBigTx: c.Bool("skip-big-tx"), Tenants: c.Int("tenants"), Pairs: c.Int("pairs"), RedisCallgrind: c.String("redis-callgrind"), Workloads: c.StringSlice("workloads"), Log: log.With("component", "bench"),
	})
	if err != nil {
		if rep != nil && len(rep.Results) > 0 {
			_ = rep.WriteTable(c.App.ErrWriter)
		}
		return err
	}
	fmt.Fprintf(c.App.Writer, "$ binlog-outbox-bench %s\n", strings.Join(os.Args[1:], " "))
	if c.Bool("json") {
		return rep.WriteJSON(c.App.Writer)
	}
	return rep.WriteTable(c.App.Writer)
}

// relayBinary returns the relay to measure: given, else binlog-outbox
// beside this executable (where go build -o DIR/ puts both), else on PATH.
func relayBinary(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this executable: %w", err)
	}
	beside := filepath.Join(filepath.Dir(self), relayName)
	if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
		return beside, nil
	}
	if p, err := exec.LookPath(relayName); err == nil {
		return p, nil
	}
	return "", outbox.WithHint(fmt.Errorf("%w: no %s beside %s nor on PATH to run as the relay", outbox.ErrConfig, relayName, self),
		"build both into one folder (go build -o /tmp/bo/ ./cmd/binlog-outbox ./cmd/binlog-outbox-bench), or pass --relay-binary")
}
