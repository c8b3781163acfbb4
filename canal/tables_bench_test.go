package canal

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// catchUpTables are the numbers of tables the catch-up benchmark spreads the
// same backlog over; the first is the baseline.
var catchUpTables = []int{1, 20, 100}

// catchUpRows is the backlog: BINLOG_OUTBOX_BENCH_ROWS or 20,000.
func catchUpRows(b testing.TB) int {
	if s := os.Getenv("BINLOG_OUTBOX_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("BINLOG_OUTBOX_BENCH_ROWS=%q is not a positive number", s)
		}
		return n
	}
	return 20000
}

// catchUpStreams are the stream templates of the benchmark: one stream for
// every table, and a stream per tenant database.
var catchUpStreams = []string{"outbox:{aggregate_type}", "outbox:{database}:{aggregate_type}"}

// BenchmarkReader_CatchUpByTables catches up on the same backlog, n rows in
// transactions of 100, spread over 1, 20 and 100 tenant tables followed by
// one pattern, in the same run, and reports the events/s of each and their
// ratio to one table: the binlog is read once whatever the number of
// tables, so the cost follows the binlog, not the tables. It does so with
// one stream for all, and with a stream per tenant, whose Redis side grows
// with the streams a batch touches.
func BenchmarkReader_CatchUpByTables(b *testing.B) {
	n := catchUpRows(b)
	srv := testsvc.SharedMariaDB(b)
	// seconds of each case, summed over the iterations: rates are of
	// the sums, so that one slow moment of a loaded machine weighs less.
	secs := make([]float64, len(catchUpTables)*len(catchUpStreams))
	// CPU seconds of this process (the reader, its flusher, the Redis
	// client) per case: what a loaded machine's wall clock blurs.
	cpus := make([]float64, len(secs))
	iterations := 0
	for b.Loop() {
		iterations++
		for i := range secs {
			k, stream := catchUpTables[i%len(catchUpTables)], catchUpStreams[i/len(catchUpTables)]
			b.StopTimer()
			env := relaytest.NewEnv(b, srv, testsvc.SharedRedis(b))
			prefix := relaytest.TenantPrefix(b)
			tenants := relaytest.NewTenants(b, srv, prefix, k)
			file, pos := binlogPos(b, env)
			insertSpread(b, tenants, n)
			for _, tn := range tenants {
				// Hundreds of tenants' idle connections would exhaust the
				// server's max_connections over the iterations.
				tn.DB.SetMaxIdleConns(0)
			}
			start, err := position.ParseStart(fmt.Sprintf("%s:%d", file, pos))
			if err != nil {
				b.Fatal(err)
			}
			r, _ := newReaderSink(b, env, redisstream.Config{Stream: stream}, func(c *Config) {
				c.Sources = []Source{{Pattern: schema.Pattern{Database: prefix + "_tenant_*", Table: "outbox"}}}
				c.Start = start
			}, testLogger(b))
			b.StartTimer()

			began, cpu := time.Now(), processCPU(b)
			stop := startReader(r)
			relaytest.WaitFor(b, 5*time.Minute, "the catch-up", func() bool { return r.Stats().Events >= uint64(n) })
			secs[i] += time.Since(began).Seconds()
			cpus[i] += processCPU(b) - cpu
			b.StopTimer()
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			if got := r.Stats().Events; got != uint64(n) {
				b.Fatalf("%d tables: %d events appended, want %d", k, got, n)
			}
			b.StartTimer()
		}
	}
	rates := make([]float64, len(secs))
	for i, sec := range secs {
		rates[i] = float64(n*iterations) / sec
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-56s %9s %6s %13s %6s\n", fmt.Sprintf("catch-up (%d rows, one pattern)", n), "events/s", "ratio", "CPU µs/event", "ratio")
	for i, rate := range rates {
		k, s := catchUpTables[i%len(catchUpTables)], i/len(catchUpTables)
		base := s * len(catchUpTables)
		us := cpus[i] / float64(n*iterations) * 1e6
		baseUS := cpus[base] / float64(n*iterations) * 1e6
		b.ReportMetric(rate, fmt.Sprintf("events/s-%dt-s%d", k, s+1))
		b.ReportMetric(us/baseUS, fmt.Sprintf("cpu-x-%dt/1t-s%d", k, s+1))
		fmt.Fprintf(&out, "%-56s %9.0f %5.2fx %13.1f %5.2fx\n", fmt.Sprintf("%d tables, --stream %s", k, catchUpStreams[s]), rate, rate/rates[base], us, us/baseUS)
	}
	fmt.Print(out.String())
}

// processCPU returns the CPU seconds this process used so far.
func processCPU(b testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// insertSpread commits n outbox rows in transactions of 100 rows, each
// transaction into the next tenant's table in turn.
func insertSpread(b testing.TB, tenants []*relaytest.Tenant, n int) {
	b.Helper()
	const perTx = 100
	for done, tx := 0, 0; done < n; tx++ {
		rows := min(perTx, n-done)
		q := "INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, 'order', ?, 'order.created', ?, UTC_TIMESTAMP(6)),", rows), ",")
		args := make([]any, 0, 3*rows)
		for j := 0; j < rows; j++ {
			args = append(args, relaytest.MessageID(), "o-"+strconv.Itoa(done+j), `{"total":4200,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)
		}
		if _, err := tenants[tx%len(tenants)].DB.Exec(q, args...); err != nil {
			b.Fatalf("insert backlog: %v", err)
		}
		done += rows
	}
}
