// Package bench is the harness behind `binlog-outbox-bench`: it loads
// workloads into MariaDB (or MySQL), runs the relay as a child process so
// that its memory and CPU are its own, and measures in the same run the
// ceilings the relay is compared with: go-mysql reading and decoding the same
// binlog alone, go-redis pipelining the same XADDs alone, the producers'
// own commit rate, and the naive polling relay.
//
// Figures are comparable within one run only; ratios are what carry over
// to another machine.
package bench

import (
	"context"
	"database/sql"
	"debug/buildinfo"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// Defaults of Config.
const (
	DefaultRows         = 1_000_000
	DefaultTxRows       = 100
	DefaultConns        = 8
	DefaultPayloadBytes = 300
	DefaultLargePayload = 16 << 10
	DefaultHugePayload  = 512 << 10
	DefaultGiantPayload = 16 << 20
	DefaultGiantRows    = 6
	DefaultStreams      = 16
	DefaultLiveDuration = 15 * time.Second
	DefaultBatch        = 2000
	DefaultLiveRate     = 200
)

// Workload names, by which Config.Workloads selects a subset.
const (
	WorkSingle   = "single"    // catch-up of single-row transactions, one stream
	WorkStreams  = "streams"   // the same backlog into Config.Streams streams
	WorkTx       = "tx"        // catch-up of Config.TxRows-row transactions
	WorkLarge    = "large"     // catch-up of 16 KiB payloads
	WorkHuge     = "huge"      // catch-up of 512 KiB payloads
	WorkGiant    = "giant"     // catch-up of Config.GiantRows single-row transactions of 16 MiB payloads
	WorkOneTx    = "onetx"     // catch-up of one Config.Rows-row transaction
	WorkApp      = "app"       // catch-up of application-shaped transactions
	WorkPoll     = "poll"      // poll mode catch-up, against the naive relay
	WorkLiveRate = "live-rate" // live, Config.LiveRate tx/s, beside the minimal relay
	WorkLiveFlat = "live-flat" // live, Config.Conns producers flat out, beside the minimal relay
	WorkLivePoll = "live-poll" // live in poll mode, producers flat out
	WorkTenants  = "tenants"   // Config.Tenants tenant tables: poll idle statements/s, binlog catch-up against one table
)

// Workloads returns every workload name, in the order a run takes them.
func Workloads() []string {
	return []string{WorkSingle, WorkStreams, WorkTx, WorkLarge, WorkHuge, WorkGiant, WorkOneTx, WorkApp, WorkPoll, WorkLiveRate, WorkLiveFlat, WorkLivePoll, WorkTenants}
}

// Config configures a benchmark run.
type Config struct {
	// MySQLDSN is an administrative go-sql-driver DSN (it creates and drops
	// the database binlog_outbox_bench and sets global durability settings).
	// Empty: a private MariaDB is started.
	MySQLDSN string
	// RedisURL is where the relay appends; only keys under a run-specific
	// prefix are written and removed. Empty: a private Redis is started.
	RedisURL string
	// RelayBinary is the binlog-outbox executable run as the relay.
	RelayBinary string
	// BaselineBinary, when set, is another build the tenants workload and
	// the binlog live workloads run beside RelayBinary, once with each
	// build, alternating, so that a change is measured beside its baseline
	// in the same run.
	BaselineBinary string
	// Rows is the backlog of the catch-up workloads (default 1,000,000).
	Rows int
	// TxRows is the size of the multi-row transactions (default 100).
	TxRows int
	// LargeRows is the backlog of 16 KiB payloads (default Rows/40).
	LargeRows int
	// HugeRows is the backlog of 512 KiB payloads (default Rows/2000, at
	// least 10): CPU time comes in ticks of 10 ms, a few rows' worth.
	HugeRows int
	// GiantRows is the backlog of 16 MiB payloads (default 6): each row is
	// larger than the relay's --max-tx-bytes and --event-cache-bytes, so
	// its peak RSS shows what the relay holds of a row it cannot bound.
	GiantRows int
	// NaiveRows is how many rows the naive relay moves (default Rows/200,
	// at least 1): it is slow, and its rate is flat.
	NaiveRows int
	// AppRows is the backlog of application-shaped transactions, each
	// updating two wide rows of other tables and inserting one outbox row
	// (default Rows/10).
	AppRows int
	// Conns is the number of producer connections (default 8).
	Conns int
	// Streams is the stream count of the many-streams workload (default 16).
	Streams int
	// LiveDuration is how long each live workload produces (default 15s).
	LiveDuration time.Duration
	// LiveRate is the transactions per second of the paced live workload
	// (default 200).
	LiveRate float64
	// Tenants is the tenant databases of the tenants workload (default
	// 1,000).
	Tenants int
	// Pairs is how many times each catch-up with a go-mysql ceiling (single,
	// streams, app) is measured, its ceiling again before each time, so
	// that every ratio pairs a relay run with a ceiling of the same minute
	// (default 1): a ceiling timed over a second moves with the machine's
	// load, and one ratio over it says little on a shared machine. The
	// binlog live workloads run as many times, each beside its minimal
	// relay, and the report gives the median of their p99s over it: one
	// run's p99 moves by tenths of a millisecond from run to run on 2
	// cores, more than the paced target leaves.
	Pairs int
	// RedisCallgrind, when set, is a directory (created if missing) where
	// the private Redis, run under valgrind's callgrind, writes a dump of
	// its instructions for each binlog catch-up and each go-redis XADD
	// ceiling; the report sets the relay's instructions per entry beside
	// the ceiling's. Redis runs some 50 times slower: measure a catch-up
	// or two of a few ten thousand rows (--workloads single --rows 20000).
	RedisCallgrind string
	// SkipBigTx leaves out the single Rows-row transaction.
	SkipBigTx bool
	// Workloads, when not empty, selects the workloads to run by name
	// (Workloads lists them); only the backlogs and ceilings they need are
	// loaded and measured.
	Workloads []string
	// Log receives progress lines; nil discards them.
	Log *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Rows == 0 {
		c.Rows = DefaultRows
	}
	if c.TxRows == 0 {
		c.TxRows = DefaultTxRows
	}
	if c.LargeRows == 0 {
		c.LargeRows = max(1, c.Rows/40)
	}
	if c.HugeRows == 0 {
		c.HugeRows = max(10, c.Rows/2000)
	}
	if c.GiantRows == 0 {
		c.GiantRows = DefaultGiantRows
	}
	if c.NaiveRows == 0 {
		c.NaiveRows = max(1, c.Rows/200)
	}
	if c.AppRows == 0 {
		c.AppRows = max(1, c.Rows/10)
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.LiveRate == 0 {
		c.LiveRate = DefaultLiveRate
	}
	if c.Streams == 0 {
		c.Streams = DefaultStreams
	}
	if c.LiveDuration == 0 {
		c.LiveDuration = DefaultLiveDuration
	}
	if c.Tenants == 0 {
		c.Tenants = DefaultTenants
	}
	if c.Pairs == 0 {
		c.Pairs = 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.RelayBinary == "":
		return errors.New("bench: RelayBinary is required")
	case c.Rows < c.TxRows || c.Rows < 1:
		return fmt.Errorf("bench: Rows %d must be at least TxRows %d", c.Rows, c.TxRows)
	case c.NaiveRows >= c.Rows:
		return fmt.Errorf("bench: NaiveRows %d must be below Rows %d", c.NaiveRows, c.Rows)
	case c.LiveRate < 0:
		return fmt.Errorf("bench: LiveRate %v must be positive", c.LiveRate)
	case c.RedisCallgrind != "" && c.RedisURL != "":
		return fmt.Errorf("%w: bench: RedisCallgrind runs a private Redis under callgrind; leave RedisURL empty", outbox.ErrConfig)
	case c.Pairs < 0:
		return fmt.Errorf("%w: bench: Pairs %d must be at least 1 (0 means 1)", outbox.ErrConfig, c.Pairs)
	}
	for _, w := range c.Workloads {
		if !slices.Contains(Workloads(), w) {
			return fmt.Errorf("%w: bench: unknown workload %q; choose from %s", outbox.ErrConfig, w, strings.Join(Workloads(), ", "))
		}
	}
	return nil
}

// Report is the outcome of a run.
type Report struct {
	Machine  string    `json:"machine"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	// Ceilings are what the parts achieve alone, measured in this run.
	Ceilings []Figure `json:"ceilings"`
	// Load is the machine's load average at the start and the end: CPU
	// per event moves little with it, rates a lot.
	Load string `json:"load"`
	// CPU is the headline: each binlog catch-up's CPU per event beside
	// its ceilings.
	CPU []CPURow `json:"cpu"`
	// Results are the relay's workloads.
	Results []Result `json:"results"`
	// Idle are what idle relays cost the server (the tenants workload).
	Idle []IdleFigure `json:"idle,omitempty"`
	// Tenants are the binlog catch-ups of the tenants workload.
	Tenants []TenantFigure `json:"tenants,omitempty"`
	// Latency is, for each binlog live workload run more than once
	// (Config.Pairs) or beside a baseline build, the median of its runs'
	// p99 over the minimal relay's.
	Latency []LatencyMedian `json:"latency,omitempty"`
}

// LatencyMedian sums up the runs of one binlog live workload with one build.
type LatencyMedian struct {
	Workload string `json:"workload"`
	Runs     int    `json:"runs"`
	// P99DiffMs is the median of the runs' p99 over the minimal relay's;
	// MinMs and MaxMs are their spread.
	P99DiffMs float64 `json:"p99_diff_ms"`
	MinMs     float64 `json:"min_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// latencyMedian sums up diffs, the p99s over the minimal relay's of the runs
// of workload.
func latencyMedian(workload string, diffs []float64) LatencyMedian {
	d := slices.Sorted(slices.Values(diffs))
	m := LatencyMedian{Workload: workload, Runs: len(d)}
	if len(d) == 0 {
		return m
	}
	m.MinMs, m.MaxMs = d[0], d[len(d)-1]
	m.P99DiffMs = d[len(d)/2]
	if len(d)%2 == 0 {
		m.P99DiffMs = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return m
}

// Figure is a named rate.
type Figure struct {
	Name         string  `json:"name"`
	EventsPerSec float64 `json:"events_per_sec"`
	// RedisCPUus is Redis's CPU time per entry, in microseconds, for the
	// ceilings that append.
	RedisCPUus float64 `json:"redis_cpu_us,omitempty"`
	// MySQLCPUus is the MySQL server's, for the ceilings that read.
	MySQLCPUus float64 `json:"mysql_cpu_us,omitempty"`
	// RedisInstr is Redis's instructions per entry and RedisDump the
	// callgrind dump they come from (Config.RedisCallgrind).
	RedisInstr float64 `json:"redis_instructions,omitempty"`
	RedisDump  string  `json:"redis_callgrind_dump,omitempty"`
	// CPUSecPerM is the CPU seconds (user+system) per million events of
	// the ceilings that read the binlog, go-mysql's own in this process:
	// the figure to hold the relay's CPU s/M ev against, which the moment
	// a rate was taken at does not move much. For the XADD ceilings it is
	// go-redis's side, the client's CPU to append the entries, which the
	// relay pays besides reading.
	CPUSecPerM float64 `json:"cpu_s_per_m_events,omitempty"`
}

// Result is one workload of the relay.
type Result struct {
	Workload     string  `json:"workload"`
	Mode         string  `json:"mode"`
	Rows         int64   `json:"rows"`
	EventsPerSec float64 `json:"events_per_sec"`
	// Ceiling names the figure Ratio divides by.
	Ceiling string `json:"ceiling,omitempty"`
	// ReadCeiling and AppendCeiling name the figures of go-mysql reading
	// the same binlog and of go-redis appending the same payloads, which
	// the CPU table sets beside the relay's (binlog catch-ups).
	ReadCeiling   string `json:"read_ceiling,omitempty"`
	AppendCeiling string `json:"append_ceiling,omitempty"`
	// readAt and appendAt are 1 + the index in Report.Ceilings of the
	// latest figures of those names when the workload ran (0: none), so
	// that each of --pairs is set beside the ceiling measured before it.
	readAt, appendAt int
	Ratio            float64 `json:"ratio,omitempty"`
	// Latencies from the return of the producer's COMMIT to the entry
	// being readable, in milliseconds (live workloads only); negative for
	// an entry readable before the producer heard back.
	P50ms  float64 `json:"p50_ms,omitempty"`
	P99ms  float64 `json:"p99_ms,omitempty"`
	P999ms float64 `json:"p999_ms,omitempty"`
	// CeilP50ms and CeilP99ms are the same latencies of the minimal relay
	// that ran beside the relay (live binlog workloads only); Ratio is then
	// P99ms/CeilP99ms and P99DiffMs their difference.
	CeilP50ms float64 `json:"ceiling_p50_ms,omitempty"`
	CeilP99ms float64 `json:"ceiling_p99_ms,omitempty"`
	P99DiffMs float64 `json:"p99_diff_ms,omitempty"`
	// PeakRSSMB is the relay process's VmHWM.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// CPUSecPerM is the relay's CPU seconds (user+system) per million events;
	// in binlog catch-ups, from its first entry seen to its last, so that
	// its start (StartCPUSec) is not spread over the events: over a few
	// dozen large rows it was most of the figure.
	CPUSecPerM float64 `json:"cpu_s_per_m_events"`
	// StartCPUSec is the relay's CPU seconds from its start to its first
	// entry seen (binlog catch-ups): the checks, connecting, and the
	// first batch.
	StartCPUSec float64 `json:"start_cpu_s,omitempty"`
	// RedisCPUus is Redis's CPU time (INFO cpu, user+system) per event
	// appended, in microseconds (catch-up workloads: live binlog ones
	// share Redis with the minimal relay).
	RedisCPUus float64 `json:"redis_cpu_us,omitempty"`
	// RedisInstr is Redis's instructions per entry over the catch-up, the
	// relay's start included, and RedisDump the callgrind dump they come
	// from (binlog catch-ups under Config.RedisCallgrind).
	RedisInstr float64 `json:"redis_instructions,omitempty"`
	RedisDump  string  `json:"redis_callgrind_dump,omitempty"`
	// MySQLCPUus is the MySQL server's CPU time per event in microseconds,
	// when it runs on this machine (its pid_file is readable).
	MySQLCPUus float64 `json:"mysql_cpu_us,omitempty"`
	// LagEnd is committed-but-not-appended events when the producers
	// stopped; LagMax the largest sampled during the run (live only).
	LagEnd int64 `json:"lag_end"`
	LagMax int64 `json:"lag_max"`
}

// run is the state of one benchmark run.
type run struct {
	cfg      Config
	log      *slog.Logger
	db       *sql.DB
	rdb      *redis.Client
	adminDSN *mysql.Config
	relayDSN string
	redisURL string
	flavor   string
	prefix   string
	rep      *Report
	ceil     map[string]float64
	// cg counts the private Redis's instructions (Config.RedisCallgrind),
	// nil when it does not run under callgrind.
	cg *callgrind
	// mysqlPid is the MySQL server's process when it runs on this
	// machine, 0 otherwise.
	mysqlPid int
	// lastSpan is the span of the last binlog catch-up.
	lastSpan span
}

const benchDatabase = "binlog_outbox_bench"

// Run runs every workload and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, log: cfg.Log, ceil: map[string]float64{},
		rep: &Report{Started: time.Now().UTC()}, prefix: fmt.Sprintf("bob:%d:", time.Now().UnixNano())}
	dsn, redisURL := cfg.MySQLDSN, cfg.RedisURL
	if dsn == "" || redisURL == "" {
		r.log.Info("starting private MariaDB and Redis")
		if cfg.RedisCallgrind != "" {
			if err := callgrindReady(cfg.RedisCallgrind); err != nil {
				return nil, err
			}
		}
		srv, err := startServers(ctx, cfg.RedisCallgrind)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		if cfg.RedisCallgrind != "" {
			r.cg = &callgrind{pid: srv.redis.Pid(), outFile: callgrindOut(cfg.RedisCallgrind)}
		}
		if dsn == "" {
			dsn = srv.mysqlDSN
		}
		if redisURL == "" {
			redisURL = srv.redisURL
		}
	}
	if err := r.connect(ctx, dsn, redisURL); err != nil {
		return nil, err
	}
	defer r.db.Close()
	defer r.rdb.Close()
	defer func() {
		_, _ = r.db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+benchDatabase+" /* binlog-outbox */")
	}()
	r.rep.Machine = r.machine(ctx)
	r.mysqlPid = r.findMySQLPid(ctx)
	loadAtStart := loadAverage()
	defer func() {
		r.rep.Load = fmt.Sprintf("load average %s at the start, %s at the end (%d cores)", loadAtStart, loadAverage(), runtime.NumCPU())
		r.rep.CPU = r.rep.cpuTable()
	}()
	if err := r.all(ctx); err != nil {
		return r.rep, err
	}
	r.rep.Duration = time.Since(r.rep.Started).Round(time.Second).String()
	return r.rep, nil
}

func (r *run) connect(ctx context.Context, dsn, redisURL string) error {
	my, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("parse --mysql-dsn: %w", err)
	}
	my.DBName = ""
	my.InterpolateParams = true
	my.ParseTime = true
	my.Loc = time.UTC
	admin, err := sql.Open("mysql", my.FormatDSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+benchDatabase+" /* binlog-outbox */"); err != nil {
		return fmt.Errorf("drop %s: %w", benchDatabase, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+benchDatabase+" /* binlog-outbox */"); err != nil {
		return fmt.Errorf("create %s: %w", benchDatabase, err)
	}
	my.DBName = benchDatabase
	r.adminDSN = my
	r.relayDSN = my.FormatDSN()
	if r.db, err = sql.Open("mysql", r.relayDSN); err != nil {
		return err
	}
	r.db.SetMaxOpenConns(4 * r.cfg.Conns)
	r.db.SetMaxIdleConns(4 * r.cfg.Conns)
	var version string
	if err := r.db.QueryRowContext(ctx, "SELECT VERSION() /* binlog-outbox */").Scan(&version); err != nil {
		return err
	}
	r.flavor = "mysql"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		r.flavor = "mariadb"
	}
	// The relay's own client settings: the bench measures what the relay does.
	if r.rdb, err = redisconn.NewClient(redisURL); err != nil {
		return err
	}
	r.redisURL = redisURL
	return r.rdb.Ping(ctx).Err()
}

func (r *run) machine(ctx context.Context) string {
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf("%.0f GiB RAM", kb/1024/1024)
		}
	}
	var version string
	_ = r.db.QueryRowContext(ctx, "SELECT VERSION() /* binlog-outbox */").Scan(&version)
	info, _ := r.rdb.Info(ctx, "server").Result()
	rv := ""
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "redis_version:"); ok {
			rv = strings.TrimSpace(v)
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s/%s, %s; MySQL %s, Redis %s, same machine; relay %s",
		runtime.NumCPU(), cpu, mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), version, rv, relayBuild(r.cfg.RelayBinary))
}

// relayBuild says how the relay executable at path was built, as far as
// its peak RSS depends on it: a cgo build maps the C library beside it,
// pages that the static build the Docker image ships (CGO_ENABLED=0) does
// not have.
func relayBuild(path string) string {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "build unknown"
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" {
			return "built with CGO_ENABLED=" + s.Value
		}
	}
	return "build unknown"
}

func (r *run) figure(name string, rate float64) {
	r.ceil[name] = rate
	r.rep.Ceilings = append(r.rep.Ceilings, Figure{Name: name, EventsPerSec: rate})
	r.log.Info("ceiling", "name", name, "events_per_sec", int(rate))
}

func (r *run) result(res Result) {
	if res.Ratio == 0 && res.Ceiling != "" && r.ceil[res.Ceiling] > 0 {
		res.Ratio = res.EventsPerSec / r.ceil[res.Ceiling]
	}
	r.rep.Results = append(r.rep.Results, res)
	r.log.Info("result", "workload", res.Workload, "events_per_sec", int(res.EventsPerSec), "ratio", res.Ratio, "peak_rss_mb", res.PeakRSSMB)
}

// backlog is a loaded table and where its rows are in the binlog.
type backlog struct {
	table   string
	from    binlogPos
	rows    int64
	payload int
}

// Ceiling names.
const (
	ceilProducersLoad = "producers, load settings"
	ceilProducers     = "producers, durable, 8 conns"
	ceilRedis         = "go-redis pipelined XADD"
	ceilNaive         = "naive polling relay"
	ceilMinimal       = "minimal relay p99, same run"
)

func ceilMySQL(b backlog) string { return "go-mysql read+decode " + b.table }

func ceilRedisOf(payloadBytes int) string {
	return fmt.Sprintf("%s %s", ceilRedis, sizeName(payloadBytes))
}

// catchUp is a catch-up workload in binlog mode.
type catchUp struct {
	work       string
	name       string
	b          *backlog
	partitions int
	ceiling    func() string
}

func (r *run) selected(work string) bool {
	if work == WorkOneTx && r.cfg.SkipBigTx {
		return false
	}
	return len(r.cfg.Workloads) == 0 || slices.Contains(r.cfg.Workloads, work)
}

// backlogs are the tables the catch-up workloads read.
type backlogs struct {
	single, tx100, large, huge, giant, onetx, app backlog
}

func (b *backlogs) all() []*backlog {
	return []*backlog{&b.single, &b.tx100, &b.large, &b.huge, &b.giant, &b.onetx, &b.app}
}

func (r *run) all(ctx context.Context) error {
	c := r.cfg
	bl := &backlogs{
		single: backlog{table: "single", rows: int64(c.Rows), payload: DefaultPayloadBytes},
		tx100:  backlog{table: "tx100", rows: int64(c.Rows), payload: DefaultPayloadBytes},
		large:  backlog{table: "large", rows: int64(c.LargeRows), payload: DefaultLargePayload},
		huge:   backlog{table: "huge", rows: int64(c.HugeRows), payload: DefaultHugePayload},
		giant:  backlog{table: "giant", rows: int64(c.GiantRows), payload: DefaultGiantPayload},
		onetx:  backlog{table: "onetx", rows: int64(c.Rows), payload: DefaultPayloadBytes},
		app:    backlog{table: "app", rows: int64(c.AppRows), payload: DefaultPayloadBytes},
	}
	single, tx100, large, huge, giant, onetx, app := &bl.single, &bl.tx100, &bl.large, &bl.huge, &bl.giant, &bl.onetx, &bl.app
	catchUps := []catchUp{
		{WorkSingle, "catch-up 1-row tx, 1 stream", single, 0, func() string { return ceilMySQL(*single) }},
		{WorkStreams, fmt.Sprintf("catch-up 1-row tx, %d streams", c.Streams), single, c.Streams, func() string { return ceilMySQL(*single) }},
		{WorkTx, fmt.Sprintf("catch-up %d-row tx", c.TxRows), tx100, 0, func() string { return ceilRedisOf(DefaultPayloadBytes) }},
		{WorkLarge, "catch-up 1-row tx, 16 KiB payload", large, 0, func() string { return ceilRedisOf(DefaultLargePayload) }},
		{WorkHuge, "catch-up 1-row tx, 512 KiB payload", huge, 0, func() string { return ceilRedisOf(DefaultHugePayload) }},
		{WorkOneTx, fmt.Sprintf("catch-up one %d-row tx", c.Rows), onetx, 0, func() string { return ceilRedisOf(DefaultPayloadBytes) }},
		{WorkApp, "catch-up app-shaped tx (2 wide UPDATEs + 1 outbox row)", app, 0, func() string { return ceilMySQL(*app) }},
		{WorkGiant, "catch-up 1-row tx, 16 MiB payload", giant, 0, func() string { return "" }},
	}
	// The backlogs the selected workloads read, and the one onetx copies.
	need := map[*backlog]bool{}
	for _, w := range catchUps {
		if r.selected(w.work) {
			need[w.b] = true
		}
	}
	if r.selected(WorkPoll) || need[onetx] {
		need[single] = true
	}
	for _, b := range bl.all() {
		if need[b] {
			if err := createTable(ctx, r.db, b.table); err != nil {
				return fmt.Errorf("create table %s: %w", b.table, err)
			}
		}
	}
	if need[app] {
		if err := createAppTables(ctx, r.db); err != nil {
			return fmt.Errorf("create the app workload's tables: %w", err)
		}
	}
	// The giant rows go into the binlog once every other catch-up is done:
	// a relay reads ahead of its last entry, and the one before them read
	// into their 16 MiB events and reported their peak RSS as its own.
	lateGiant := need[giant]
	delete(need, giant)
	if err := r.loadAll(ctx, need, bl); err != nil {
		return err
	}

	if err := r.ceilings(ctx, need, bl); err != nil {
		return err
	}

	for _, w := range catchUps {
		if !r.selected(w.work) {
			continue
		}
		pairs := 1
		if w.ceiling() == ceilMySQL(*w.b) {
			pairs = r.cfg.Pairs
		}
		if w.b == giant && lateGiant {
			if err := r.loadAll(ctx, map[*backlog]bool{giant: true}, bl); err != nil {
				return err
			}
		}
		for pair := range pairs {
			if pair > 0 {
				if err := r.mysqlCeiling(ctx, w.b, uint32(2100+pair)); err != nil {
					return err
				}
			}
			if err := r.catchUpBinlog(ctx, w.name, *w.b, w.partitions, w.ceiling()); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
	}
	if r.selected(WorkPoll) {
		if err := r.catchUpPoll(ctx, *single); err != nil {
			return fmt.Errorf("poll catch-up: %w", err)
		}
	}
	if err := r.liveAll(ctx); err != nil {
		return err
	}
	if r.selected(WorkTenants) {
		if err := r.tenants(ctx); err != nil {
			return fmt.Errorf("tenants: %w", err)
		}
	}
	return nil
}

// ceilings measures what the parts reach alone, for the backlogs in need:
// go-mysql reading and decoding each, and go-redis pipelining XADDs of each
// payload size.
func (r *run) ceilings(ctx context.Context, need map[*backlog]bool, bl *backlogs) error {
	c := r.cfg
	single, tx100, large, huge, onetx := &bl.single, &bl.tx100, &bl.large, &bl.huge, &bl.onetx
	for i, b := range bl.all() {
		// The giant rows are measured for memory: there is no rate to
		// compare.
		if !need[b] || b == &bl.giant || (b == single && !r.selected(WorkSingle) && !r.selected(WorkStreams)) {
			continue
		}
		if err := r.mysqlCeiling(ctx, b, uint32(2001+i)); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		rows, bytes int
		used        bool
	}{
		{c.Rows, DefaultPayloadBytes, need[tx100] || need[onetx] || need[&bl.app] || r.selected(WorkSingle) || r.selected(WorkStreams)},
		{c.LargeRows, DefaultLargePayload, need[large]},
		{c.HugeRows, DefaultHugePayload, need[huge]},
	} {
		if !p.used {
			continue
		}
		key := r.prefix + "ceiling"
		if err := r.cgZero(ctx); err != nil {
			return err
		}
		cpu := r.serverCPU(ctx)
		// The client's side of the same appends, which the relay pays
		// and go-mysql's ceiling does not.
		own := selfCPU()
		// At most 32 MiB per round trip: 2,000 entries of 512 KiB would be
		// a gigabyte in the harness.
		s, err := xaddCeiling(ctx, r.rdb, key, p.rows, min(DefaultBatch, max(1, (32<<20)/p.bytes)), p.bytes)
		if err != nil {
			return err
		}
		ownSec := selfCPU() - own
		instr, dump, err := r.cgDump(ctx, fmt.Sprintf("xadd-%d", len(r.rep.Ceilings)), s.total)
		if err != nil {
			return err
		}
		r.figure(ceilRedisOf(p.bytes), s.rate())
		r.rdb.Del(ctx, key)
		f := &r.rep.Ceilings[len(r.rep.Ceilings)-1]
		f.RedisCPUus, _ = cpu.perEvent(ctx, s.total)
		f.RedisInstr, f.RedisDump = instr, dump
		if s.total > 0 {
			f.CPUSecPerM = ownSec / float64(s.total) * 1e6
		}
	}
	return nil
}

// mysqlCeiling measures go-mysql reading and decoding backlog b alone, as a
// replica of server id serverID.
func (r *run) mysqlCeiling(ctx context.Context, b *backlog, serverID uint32) error {
	cpu := r.serverCPU(ctx)
	own := selfCPU()
	s, err := readDecodeCeiling(ctx, r.target(*b), serverID, r.flavor)
	if err != nil {
		return err
	}
	ownSec := selfCPU() - own
	r.figure(ceilMySQL(*b), s.rate())
	f := &r.rep.Ceilings[len(r.rep.Ceilings)-1]
	_, f.MySQLCPUus = cpu.perEvent(ctx, s.total)
	if s.total > 0 {
		f.CPUSecPerM = ownSec / float64(s.total) * 1e6
	}
	return nil
}

// loadAll loads the backlogs in need with relaxed durability.
func (r *run) loadAll(ctx context.Context, need map[*backlog]bool, bl *backlogs) (err error) {
	c := r.cfg
	single, onetx, app := &bl.single, &bl.onetx, &bl.app
	restore, err := durability(ctx, r.db, false)
	if err != nil {
		return err
	}
	defer restore()
	load := func(b *backlog, what string, fn func() (float64, error)) (float64, error) {
		if b.from, err = binlogEnd(ctx, r.db); err != nil {
			return 0, err
		}
		began := time.Now()
		rate, err := fn()
		r.log.Info("loaded backlog", "table", b.table, "rows", b.rows, "shape", what, "took", time.Since(began).Round(time.Millisecond))
		return rate, err
	}
	for _, l := range []struct {
		b      *backlog
		txRows int
		prefix string
	}{{single, 1, "S"}, {&bl.tx100, c.TxRows, "T"}, {&bl.large, 1, "L"}, {&bl.huge, 1, "H"}, {&bl.giant, 1, "G"}} {
		if !need[l.b] {
			continue
		}
		rate, err := load(l.b, fmt.Sprintf("%d-row tx", l.txRows), func() (float64, error) {
			return loadBacklog(ctx, r.db, l.b.table, int(l.b.rows), l.txRows, c.Conns, l.b.payload, l.prefix)
		})
		if err != nil {
			return err
		}
		if l.b == single {
			r.figure(ceilProducersLoad, rate)
		}
	}
	if need[onetx] {
		if _, err := load(onetx, "one transaction", func() (float64, error) {
			return 0, copyInOneTx(ctx, r.db, onetx.table, single.table)
		}); err != nil {
			return err
		}
	}
	if need[app] {
		if _, err := load(app, "2 wide UPDATEs + 1 outbox row per tx", func() (float64, error) {
			return loadApp(ctx, r.db, app.table, int(app.rows), c.Conns, app.payload, "P")
		}); err != nil {
			return err
		}
	}
	return nil
}

// liveAll runs the live workloads with durable settings.
func (r *run) liveAll(ctx context.Context) error {
	c := r.cfg
	lives := []liveRun{
		{work: WorkLiveRate, name: fmt.Sprintf("live, %.0f tx/s, durable", c.LiveRate), mode: "binlog", rate: c.LiveRate},
		{work: WorkLiveFlat, name: fmt.Sprintf("live, %d durable producers flat out", c.Conns), mode: "binlog"},
		{work: WorkLivePoll, name: fmt.Sprintf("live, %d durable producers flat out", c.Conns), mode: "poll"},
	}
	var todo []liveRun
	for _, l := range lives {
		if r.selected(l.work) {
			todo = append(todo, l)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	restore, err := durability(ctx, r.db, true)
	if err != nil {
		return err
	}
	defer restore()
	if r.selected(WorkLivePoll) {
		if err := createTable(ctx, r.db, "live_alone"); err != nil {
			return err
		}
		if err := r.producersAlone(ctx); err != nil {
			return err
		}
	}
	all := r.builds()
	defer func(bin string) { r.cfg.RelayBinary = bin }(r.cfg.RelayBinary)
	tables := 0
	for _, l := range todo {
		// Poll mode has no minimal relay to measure against: it runs
		// once, with this build.
		runs, builds := 1, all[len(all)-1:]
		if l.mode == "binlog" {
			runs, builds = r.cfg.Pairs, all
		}
		diffs := map[string][]float64{}
		for range runs {
			for _, bin := range builds {
				r.cfg.RelayBinary = bin
				run := l
				run.name = r.buildName(l.name, bin)
				run.table = fmt.Sprintf("live_%d", tables)
				tables++
				if err := createTable(ctx, r.db, run.table); err != nil {
					return err
				}
				if err := r.live(ctx, run); err != nil {
					return fmt.Errorf("%s (%s): %w", run.name, run.mode, err)
				}
				diffs[run.name] = append(diffs[run.name], r.rep.Results[len(r.rep.Results)-1].P99DiffMs)
			}
		}
		if runs > 1 || len(builds) > 1 {
			for _, bin := range builds {
				name := r.buildName(l.name, bin)
				r.rep.Latency = append(r.rep.Latency, latencyMedian(name, diffs[name]))
			}
		}
	}
	return nil
}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func (r *run) target(b backlog) binlogTarget {
	host, port, _ := strings.Cut(r.adminDSN.Addr, ":")
	p, _ := strconv.Atoi(port)
	if p == 0 {
		p = 3306
	}
	return binlogTarget{host: host, port: uint16(p), user: r.adminDSN.User, pwd: r.adminDSN.Passwd,
		database: benchDatabase, table: b.table, from: b.from, rows: b.rows}
}

// relayArgs are the command line of the relay child.
func (r *run) relayArgs(table, mode, keyPrefix string, partitions int, extra ...string) []string {
	// The streams under a prefix of their own: a template that could name
	// the position key is refused.
	stream := keyPrefix + "s:{aggregate_type}"
	if partitions > 0 {
		stream = keyPrefix + "{partition}"
	}
	args := []string{"--mysql-dsn", r.relayDSN, "--redis-url", r.redisURL, "--table", table,
		"--log-format", "json", "--log-level", "warn", "--server-id", "1001",
		"run", "--mode", mode, "--position-key", keyPrefix + "position",
		"--stream", stream, "--dead-letter-stream", keyPrefix + "dead"}
	if partitions > 0 {
		args = append(args, "--partitions", strconv.Itoa(partitions))
	}
	return append(args, extra...)
}

func streamKeys(keyPrefix string, partitions int) []string {
	if partitions == 0 {
		return []string{keyPrefix + "s:order"}
	}
	keys := make([]string, partitions)
	for i := range keys {
		keys[i] = keyPrefix + strconv.Itoa(i)
	}
	return keys
}

// cleanup deletes a workload's keys, and the mode the relay recorded for
// the bench's tables: the next workload may read the same table in the
// other mode, which the relay refuses as a switch not prepared.
func (r *run) cleanup(ctx context.Context, keyPrefix string) {
	for _, glob := range []string{keyPrefix + "*", redisstream.KeysFor(benchDatabase, "*", "").Mode + "*"} {
		iter := r.rdb.Scan(ctx, 0, glob, 1000).Iterator()
		for iter.Next(ctx) {
			r.rdb.Del(ctx, iter.Val())
		}
	}
}

func (r *run) catchUpBinlog(ctx context.Context, name string, b backlog, partitions int, ceiling string) error {
	kp := fmt.Sprintf("%s%d:", r.prefix, len(r.rep.Results))
	defer r.cleanup(ctx, kp)
	if err := r.cgZero(ctx); err != nil {
		return err
	}
	cpu := r.serverCPU(ctx)
	ch, err := startChild(r.cfg.RelayBinary, r.relayArgs(b.table, "binlog", kp, partitions, "--start-from", b.from.String()), nil)
	if err != nil {
		return err
	}
	defer ch.stop()
	s, err := r.progress(streamKeys(kp, partitions)).waitFor(ctx, ch, b.rows, 60*time.Second)
	if err != nil {
		return err
	}
	instr, dump, err := r.cgDump(ctx, fmt.Sprintf("relay-%d", len(r.rep.Results)), s.total)
	if err != nil {
		return err
	}
	u, err := ch.usage()
	if err != nil {
		return err
	}
	r.lastSpan = s
	relayCPU := s.windowCPU()
	if relayCPU == 0 && s.total > 0 {
		// Less than a tick of CPU time between the first entry and the
		// last (a tiny backlog): the whole process's is the figure there is.
		relayCPU = u.CPUSeconds / float64(s.total) * 1e6
	}
	res := Result{Workload: name, Mode: "binlog", Rows: s.total, EventsPerSec: s.rate(), Ceiling: ceiling,
		ReadCeiling: ceilMySQL(b), AppendCeiling: ceilRedisOf(b.payload),
		PeakRSSMB: u.PeakRSSMB, CPUSecPerM: relayCPU, StartCPUSec: s.cpuFirst, RedisInstr: instr, RedisDump: dump}
	for i, c := range r.rep.Ceilings {
		switch c.Name {
		case res.ReadCeiling:
			res.readAt = i + 1
		case res.AppendCeiling:
			res.appendAt = i + 1
		}
	}
	res.RedisCPUus, res.MySQLCPUus = cpu.perEvent(ctx, s.total)
	r.result(res)
	return nil
}

func (r *run) catchUpPoll(ctx context.Context, b backlog) error {
	kp := fmt.Sprintf("%s%d:", r.prefix, len(r.rep.Results))
	defer r.cleanup(ctx, kp)
	began, cpu := time.Now(), r.serverCPU(ctx)
	n, err := NaiveRelay(ctx, r.db, r.rdb, b.table, kp+"naive:", r.cfg.NaiveRows)
	if err != nil {
		return fmt.Errorf("naive relay: %w", err)
	}
	r.figure(ceilNaive, float64(n)/time.Since(began).Seconds())
	f := &r.rep.Ceilings[len(r.rep.Ceilings)-1]
	f.RedisCPUus, f.MySQLCPUus = cpu.perEvent(ctx, int64(n))
	cpu = r.serverCPU(ctx)
	ch, err := startChild(r.cfg.RelayBinary, r.relayArgs(b.table, "poll", kp, 0), nil)
	if err != nil {
		return err
	}
	defer ch.stop()
	s, err := r.progress(streamKeys(kp, 0)).waitFor(ctx, ch, b.rows-int64(n), 60*time.Second)
	if err != nil {
		return err
	}
	u, err := ch.usage()
	if err != nil {
		return err
	}
	res := Result{Workload: "catch-up 1-row tx, 1 stream", Mode: "poll", Rows: s.total, EventsPerSec: s.rate(),
		Ceiling: ceilNaive, PeakRSSMB: u.PeakRSSMB, CPUSecPerM: u.CPUSeconds / float64(s.total) * 1e6}
	res.RedisCPUus, res.MySQLCPUus = cpu.perEvent(ctx, s.total)
	r.result(res)
	return nil
}

func (r *run) producersAlone(ctx context.Context) error {
	p := newProducers()
	d := max(r.cfg.LiveDuration/3, time.Second)
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	began := time.Now()
	if err := p.run(pctx, r.db, "live_alone", r.cfg.Conns, DefaultPayloadBytes, 0, "A"); err != nil {
		return fmt.Errorf("producers: %w", err)
	}
	r.figure(ceilProducers, float64(p.committed.Load())/time.Since(began).Seconds())
	return nil
}

// liveRun is a live workload: producers commit while the relay runs.
type liveRun struct {
	work string
	name string
	mode string
	rate float64 // tx/s; 0: flat out
	// table is the outbox table the producers write.
	table string
}

// live runs one live workload. In binlog mode the minimal relay runs beside
// the relay, from the same binlog position into a stream of its own, and
// its latencies are the ceiling.
func (r *run) live(ctx context.Context, l liveRun) error {
	kp := fmt.Sprintf("%s%d:", r.prefix, len(r.rep.Results))
	defer r.cleanup(ctx, kp)
	var extra []string
	if l.mode == "binlog" {
		extra = []string{"--start-from", "now"}
	}
	ch, err := startChild(r.cfg.RelayBinary, r.relayArgs(l.table, l.mode, kp, 0, extra...), nil)
	if err != nil {
		return err
	}
	defer ch.stop()
	// Binlog mode stores its start position first: then it reads.
	if err := r.waitStarted(ctx, ch, l.mode, kp+"position"); err != nil {
		return err
	}
	keys := streamKeys(kp, 0)
	var minimal *minimalRelay
	if l.mode == "binlog" {
		t := r.target(backlog{table: l.table})
		if t.from, err = binlogEnd(ctx, r.db); err != nil {
			return err
		}
		if minimal, err = startMinimalRelay(ctx, t, 2100, r.flavor, r.rdb, kp+"minimal"); err != nil {
			return err
		}
		defer minimal.stop()
		keys = append(keys, kp+"minimal")
	}
	p := newProducers()
	a := newArrivals(len(keys))
	rctx, stopReader := context.WithCancel(ctx)
	readErr := make(chan error, 1)
	go func() { readErr <- a.read(rctx, r.rdb, keys) }()
	defer stopReader()

	pctx, stopProducers := context.WithTimeout(ctx, r.cfg.LiveDuration)
	defer stopProducers()
	prodErr := make(chan error, 1)
	began := time.Now()
	go func() {
		prodErr <- p.run(pctx, r.db, l.table, r.cfg.Conns, DefaultPayloadBytes, l.rate, strings.ToUpper(l.mode[:1]))
	}()
	var lagMax int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-prodErr:
			if err != nil {
				return fmt.Errorf("producers: %w", err)
			}
			break wait
		case <-tick.C:
			lagMax = max(lagMax, p.committed.Load()-a.count(0))
			if ch.done() {
				return ch.failure("exited during the live run")
			}
		}
	}
	produced := p.committed.Load()
	elapsed := time.Since(began)
	lagEnd := produced - a.count(0)
	if err := drain(ch, a, keys, produced); err != nil {
		return err
	}
	stopReader()
	if err := <-readErr; err != nil {
		return fmt.Errorf("reader: %w", err)
	}
	u, err := ch.usage()
	if err != nil {
		return err
	}
	lat := a.latencies(0, p)
	res := Result{Workload: l.name, Mode: l.mode, Rows: produced,
		EventsPerSec: float64(produced) / elapsed.Seconds(), Ceiling: ceilProducers,
		P50ms: percentile(lat, 0.50), P99ms: percentile(lat, 0.99), P999ms: percentile(lat, 0.999),
		PeakRSSMB: u.PeakRSSMB, CPUSecPerM: u.CPUSeconds / float64(produced) * 1e6, LagEnd: lagEnd, LagMax: lagMax}
	if minimal != nil {
		if err := minimal.stop(); err != nil {
			return err
		}
		ml := a.latencies(1, p)
		res.Ceiling = ceilMinimal
		res.CeilP50ms, res.CeilP99ms = percentile(ml, 0.50), percentile(ml, 0.99)
		res.P99DiffMs = res.P99ms - res.CeilP99ms
		if res.CeilP99ms > 0 {
			res.Ratio = res.P99ms / res.CeilP99ms
		}
	}
	r.result(res)
	return nil
}

// drain waits until every stream of keys holds the produced entries, or
// fails after 30 s or when the relay exits.
func drain(ch *child, a *arrivals, keys []string, produced int64) error {
	drainBy := time.Now().Add(30 * time.Second)
	for i := range keys {
		for a.count(i) < produced {
			if time.Now().After(drainBy) || ch.done() {
				return ch.failure(fmt.Sprintf("did not catch up: %d of %d entries in %s", a.count(i), produced, keys[i]))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

func (r *run) waitStarted(ctx context.Context, ch *child, mode, posKey string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if mode == "poll" {
			// The poller has no position: give it the time of its checks.
			time.Sleep(500 * time.Millisecond)
			if ch.done() {
				return ch.failure("exited at start")
			}
			return nil
		}
		n, err := r.rdb.Exists(ctx, posKey).Result()
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		if ch.done() || time.Now().After(deadline) {
			return ch.failure("did not store its start position")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// progress polls keys; under callgrind every 100 ms, lest the polls count
// in Redis's instructions beside the relay's appends.
func (r *run) progress(keys []string) progress {
	p := progress{rdb: r.rdb, keys: keys}
	if r.cg != nil {
		p.every = 100 * time.Millisecond
	}
	return p
}

// cgZero zeroes Redis's instruction counters when it runs under callgrind.
func (r *run) cgZero(ctx context.Context) error {
	if r.cg == nil {
		return nil
	}
	return r.cg.zero(ctx)
}

// cgDump dumps Redis's instruction counters when it runs under callgrind and
// returns the instructions per entry of entries, and the dump's file.
func (r *run) cgDump(ctx context.Context, label string, entries int64) (perEntry float64, file string, err error) {
	if r.cg == nil || entries <= 0 {
		return 0, "", nil
	}
	n, file, err := r.cg.dump(ctx, label)
	return float64(n) / float64(entries), file, err
}

// cpuMark is the servers' CPU time at a moment, to take what a stretch of
// work cost them.
type cpuMark struct {
	r            *run
	redis, mysql float64 // seconds; negative when unknown
}

func (r *run) serverCPU(ctx context.Context) cpuMark {
	m := cpuMark{r: r, redis: -1, mysql: -1}
	// Under callgrind Redis's CPU time is valgrind's: its instructions
	// stand in for it.
	if r.cg == nil {
		m.redis = r.redisCPUSeconds(ctx)
	}
	if r.mysqlPid > 0 {
		if s, err := procCPU(r.mysqlPid); err == nil {
			m.mysql = s
		}
	}
	return m
}

// perEvent is the CPU each server used since the mark, in microseconds per
// event (0 when unknown).
func (m cpuMark) perEvent(ctx context.Context, events int64) (redisUs, mysqlUs float64) {
	now := m.r.serverCPU(ctx)
	per := func(was, is float64) float64 {
		if was < 0 || is < 0 || events <= 0 {
			return 0
		}
		return (is - was) / float64(events) * 1e6
	}
	return per(m.redis, now.redis), per(m.mysql, now.mysql)
}

// findMySQLPid finds the MySQL server's process when it runs on this
// machine: its pid file names it, and the process's command is mysqld or
// mariadbd.
func (r *run) findMySQLPid(ctx context.Context) int {
	var file string
	if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.pid_file /* binlog-outbox */").Scan(&file); err != nil {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return 0
	}
	name := strings.TrimSpace(string(comm))
	if name != "mysqld" && name != "mariadbd" {
		return 0
	}
	return pid
}

// redisCPUSeconds is used_cpu_user plus used_cpu_sys of INFO cpu.
func (r *run) redisCPUSeconds(ctx context.Context) float64 {
	info, err := r.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return -1
	}
	var total float64
	found := 0
	for _, l := range strings.Split(info, "\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return -1
				}
				total += f
				found++
			}
		}
	}
	if found != 2 {
		return -1
	}
	return total
}

var discardLogger = slog.New(slog.DiscardHandler)
