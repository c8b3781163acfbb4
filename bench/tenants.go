package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// DefaultTenants is the tenant count of the tenants workload.
const DefaultTenants = 1000

// tenantDatabase is the database of tenant i (from 1) of the tenants
// workload; tenantPattern follows them all.
func tenantDatabase(i int) string { return fmt.Sprintf("%s_t%04d", benchDatabase, i) }

const tenantPattern = benchDatabase + "_t*.outbox"

// idleWindow is how long the tenants workload counts the statements of an
// idle poll relay.
const idleWindow = 10 * time.Second

// tenants runs the tenants workload: Config.Tenants databases with an outbox
// table each behind one --table pattern. It measures the statements per
// second a poll relay of them costs the server while they are idle (SHOW
// GLOBAL STATUS Questions), and the binlog catch-up of Config.Rows
// single-row transactions spread over the tenants beside the same rows in
// one table, with their ratio.
func (r *run) tenants(ctx context.Context) (err error) {
	n := r.cfg.Tenants
	defer func() {
		for i := 1; i <= n; i++ {
			_, _ = r.db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+tenantDatabase(i)+" /* binlog-outbox */")
		}
	}()
	const one, trailer = "tenants_one", "tenants_trailer"
	if err := createTable(ctx, r.db, one); err != nil {
		return fmt.Errorf("create table %s: %w", one, err)
	}
	for i := 1; i <= n; i++ {
		for _, q := range []string{
			"DROP DATABASE IF EXISTS " + tenantDatabase(i),
			"CREATE DATABASE " + tenantDatabase(i),
			"CREATE TABLE " + tenantDatabase(i) + ".outbox LIKE " + benchDatabase + "." + one,
		} {
			if _, err := r.db.ExecContext(ctx, q+" /* binlog-outbox */"); err != nil {
				return fmt.Errorf("create tenant %d: %w", i, err)
			}
		}
	}
	if err := r.pollIdle(ctx, n); err != nil {
		return fmt.Errorf("poll idle over %d tenants: %w", n, err)
	}

	restore, err := durability(ctx, r.db, false)
	if err != nil {
		return err
	}
	oneFrom, err := binlogEnd(ctx, r.db)
	if err != nil {
		restore()
		return err
	}
	if _, err := loadBacklog(ctx, r.db, one, r.cfg.Rows, 1, r.cfg.Conns, DefaultPayloadBytes, "tone"); err != nil {
		restore()
		return err
	}
	spreadFrom, err := binlogEnd(ctx, r.db)
	if err != nil {
		restore()
		return err
	}
	err = loadSpread(ctx, r.db, n, r.cfg.Rows, r.cfg.Conns, "tspread")
	if err == nil {
		// The one table's catch-up is followed by the spread rows, which its
		// reader reads (and skips) while its last batches are appended, in
		// its CPU's window: the spread rows get as many rows of a table
		// neither relay follows after them, or the ratio would favour the
		// tenants.
		if err = createTable(ctx, r.db, trailer); err == nil {
			_, err = loadBacklog(ctx, r.db, trailer, r.cfg.Rows, 1, r.cfg.Conns, DefaultPayloadBytes, "ttrail")
		}
	}
	restore()
	if err != nil {
		return err
	}
	builds := r.builds()
	defer func(bin string) { r.cfg.RelayBinary = bin }(r.cfg.RelayBinary)
	oneName := fmt.Sprintf("catch-up 1-row tx, %d rows in 1 table", r.cfg.Rows)
	spreadName := fmt.Sprintf("catch-up 1-row tx, the same rows over %d tenants", n)
	base, baseCPU := map[string]float64{}, map[string]float64{}
	for _, bin := range builds {
		r.cfg.RelayBinary = bin
		if err := r.catchUpBinlogOf(ctx, oneName, one, backlog{table: one, from: oneFrom, rows: int64(r.cfg.Rows)}, ""); err != nil {
			return fmt.Errorf("%s: %w", oneName, err)
		}
		// The one table is the figure the tenants' rate is divided by: a
		// ceiling of this workload, not a workload of its own.
		last := len(r.rep.Results) - 1
		base[bin] = r.rep.Results[last].EventsPerSec
		r.figure(r.buildName(oneName, bin), base[bin])
		r.tenantFigure(r.buildName("1 table", bin), r.rep.Results[last], 0, 0)
		baseCPU[bin] = r.rep.Tenants[len(r.rep.Tenants)-1].CPUSecPerM
		r.rep.Results = r.rep.Results[:last]
	}
	for _, bin := range builds {
		r.cfg.RelayBinary = bin
		name := r.buildName(spreadName, bin)
		if err := r.catchUpBinlogOf(ctx, name, tenantPattern, backlog{table: tenantPattern, from: spreadFrom, rows: int64(r.cfg.Rows)}, r.buildName(oneName, bin)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.tenantFigure(r.buildName(fmt.Sprintf("%d tenants", n), bin), r.rep.Results[len(r.rep.Results)-1], base[bin], baseCPU[bin])
	}
	return nil
}

// builds are the relay builds a workload compares: Config.BaselineBinary
// first when it is set, then Config.RelayBinary.
func (r *run) builds() []string {
	if r.cfg.BaselineBinary != "" {
		return []string{r.cfg.BaselineBinary, r.cfg.RelayBinary}
	}
	return []string{r.cfg.RelayBinary}
}

// buildName is name, marked as the baseline's when bin is
// Config.BaselineBinary.
func (r *run) buildName(name, bin string) string {
	if r.cfg.BaselineBinary != "" && bin == r.cfg.BaselineBinary {
		return name + " (baseline)"
	}
	return name
}

// TenantFigure is one binlog catch-up of the tenants workload, its CPU
// taken over the catch-up alone: the start's checks of every table are
// in ReadySec, not in the CPU per event.
type TenantFigure struct {
	Name         string  `json:"name"`
	EventsPerSec float64 `json:"events_per_sec"`
	// Ratio is EventsPerSec over the one table's (0 for that one).
	Ratio float64 `json:"ratio,omitempty"`
	// ReadySec is from the relay's start to its first entry.
	ReadySec float64 `json:"ready_s"`
	// CPUSecPerM is the relay's CPU seconds per million events from its
	// first entry to its last.
	CPUSecPerM float64 `json:"cpu_s_per_m_events"`
	// CPURatio is CPUSecPerM over the one table's (0 for that one).
	CPURatio  float64 `json:"cpu_ratio,omitempty"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// tenantFigure records res, the catch-up just run (r.lastSpan), divided
// by base when base is not 0.
func (r *run) tenantFigure(name string, res Result, base, baseCPU float64) {
	f := TenantFigure{Name: name, EventsPerSec: res.EventsPerSec, ReadySec: r.lastSpan.ready().Seconds(),
		CPUSecPerM: r.lastSpan.windowCPU(), PeakRSSMB: res.PeakRSSMB}
	if base > 0 {
		f.Ratio = res.EventsPerSec / base
	}
	if baseCPU > 0 {
		f.CPURatio = f.CPUSecPerM / baseCPU
	}
	r.rep.Tenants = append(r.rep.Tenants, f)
}

// writeTenants prints the tenants workload's catch-ups side by side.
func writeTenants(w io.Writer, ts []TenantFigure) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-44s %9s %6s %8s %22s %6s %12s\n", "binlog catch-up, one pattern", "events/s", "ratio", "ready s", "CPU s/M ev (catch-up)", "ratio", "peak RSS MB")
	for _, f := range ts {
		fmt.Fprintf(w, "%-44s %9.0f %6s %8.1f %22.1f %6s %12.1f\n", f.Name, f.EventsPerSec, times(f.Ratio), f.ReadySec, f.CPUSecPerM, times(f.CPURatio), f.PeakRSSMB)
	}
}

// catchUpBinlogOf is catchUpBinlog of --table table.
func (r *run) catchUpBinlogOf(ctx context.Context, name, table string, b backlog, ceiling string) error {
	b.table = table
	return r.catchUpBinlog(ctx, name, b, 0, ceiling)
}

// pollIdle starts a poll relay of the n idle tenant tables, lets every
// poller run its first rounds, and records the statements per second the
// server receives over idleWindow.
func (r *run) pollIdle(ctx context.Context, n int) error {
	kp := fmt.Sprintf("%s%d:", r.prefix, len(r.rep.Results))
	defer r.cleanup(ctx, kp)
	// The tables' mode keys say poll: the catch-up's binlog relay would
	// refuse a switch not prepared.
	defer r.cleanup(ctx, redisstream.KeysFor(benchDatabase+"_t*", "*", "").Mode)
	ch, err := startChild(r.cfg.RelayBinary, r.relayArgs(tenantPattern, "poll", kp, 0), nil)
	if err != nil {
		return err
	}
	defer ch.stop()
	// The checks of n tables at start, then every poller's first rounds.
	time.Sleep(5*time.Second + time.Duration(n)*5*time.Millisecond)
	if ch.done() {
		return ch.failure("exited at start")
	}
	before, err := questions(ctx, r.db)
	if err != nil {
		return err
	}
	cpu0, err := procCPU(ch.cmd.Process.Pid)
	if err != nil {
		return err
	}
	began := time.Now()
	time.Sleep(idleWindow)
	after, err := questions(ctx, r.db)
	if err != nil {
		return err
	}
	cpu1, err := procCPU(ch.cmd.Process.Pid)
	if err != nil {
		return err
	}
	secs := time.Since(began).Seconds()
	rate := float64(after-before) / secs
	r.rep.Idle = append(r.rep.Idle, IdleFigure{Name: fmt.Sprintf("poll mode, %d idle tenant tables", n), StatementsPerSec: rate,
		RelayCPUPercent: 100 * (cpu1 - cpu0) / secs})
	r.log.Info("idle", "tenants", n, "statements_per_sec", int(rate))
	return nil
}

// questions reads the server's count of statements received.
func questions(ctx context.Context, db *sql.DB) (int64, error) {
	var name string
	var v int64
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
		return 0, fmt.Errorf("read Questions: %w", err)
	}
	return v, nil
}

// loadSpread inserts rows single-row transactions, row i into tenant i mod
// n, from conns connections.
func loadSpread(ctx context.Context, db *sql.DB, n, rows, conns int, prefix string) error {
	pay := payload(DefaultPayloadBytes)
	var next atomic.Int64
	return parallel(ctx, db, conns, func(ctx context.Context, conn *sql.Conn) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= rows {
				return nil
			}
			ins := fmt.Sprintf(insertCols, tenantDatabase(i%n+1)+".outbox")
			q := ins + "(?, 'order', ?, 'order.created', ?)"
			if _, err := conn.ExecContext(ctx, q, messageID(prefix, i), fmt.Sprintf("agg-%d", i%1000), pay); err != nil {
				return fmt.Errorf("load tenant %d: %w", i%n+1, err)
			}
		}
	})
}

// IdleFigure is what an idle relay costs the server.
type IdleFigure struct {
	Name             string  `json:"name"`
	StatementsPerSec float64 `json:"statements_per_sec"`
	RelayCPUPercent  float64 `json:"relay_cpu_percent"`
}

// writeIdle prints the idle figures.
func writeIdle(w io.Writer, idle []IdleFigure) {
	if len(idle) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-44s %14s %12s\n", "idle (SHOW GLOBAL STATUS Questions)", "statements/s", "relay CPU %")
	for _, f := range idle {
		fmt.Fprintf(w, "%-44s %14.0f %12.1f\n", f.Name, f.StatementsPerSec, f.RelayCPUPercent)
	}
}
