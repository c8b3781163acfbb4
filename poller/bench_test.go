package poller

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/bench"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// benchRows is the backlog of the comparison: BINLOG_OUTBOX_BENCH_ROWS or
// 20,000.
func benchRows(b testing.TB) int {
	if s := os.Getenv("BINLOG_OUTBOX_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("BINLOG_OUTBOX_BENCH_ROWS=%q is not a positive number", s)
		}
		return n
	}
	return 20000
}

// benchBatch is the poller's batch size in the comparison:
// BINLOG_OUTBOX_BENCH_BATCH or DefaultBatchSize.
func benchBatch(b testing.TB) int {
	if s := os.Getenv("BINLOG_OUTBOX_BENCH_BATCH"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("BINLOG_OUTBOX_BENCH_BATCH=%q is not a positive number", s)
		}
		return n
	}
	return DefaultBatchSize
}

// BenchmarkPoller_VsNaive drains the same backlog (interleaved aggregates)
// with the naive relay and with one Poller, in the same run, and reports the
// events/s of both and their ratio.
func BenchmarkPoller_VsNaive(b *testing.B) {
	n := benchRows(b)
	ctx := context.Background()
	var naiveRate, pollRate float64
	for b.Loop() {
		b.StopTimer()
		envN := newEnv(b)
		insertBacklog(b, envN.DB, envN.Table, n, 97, relaytest.NewProduced())
		envP := newEnv(b)
		insertBacklog(b, envP.DB, envP.Table, n, 97, relaytest.NewProduced())
		b.StartTimer()

		began := time.Now()
		got, err := bench.NaiveRelay(ctx, envN.DB, envN.RDB, envN.Table, "outbox:", 0)
		if err != nil || got != n {
			b.Fatalf("naive relay: %d rows, %v; want %d", got, err, n)
		}
		naiveRate = float64(n) / time.Since(began).Seconds()

		p := newPoller(b, envP, func(c *Config) { c.BatchSize = benchBatch(b) })
		began = time.Now()
		total := 0
		for total < n {
			k, err := p.Step(ctx)
			if err != nil {
				b.Fatal(err)
			}
			total += k
		}
		pollRate = float64(n) / time.Since(began).Seconds()
		if total != n {
			b.Fatalf("poller relayed %d rows, want %d", total, n)
		}
	}
	b.ReportMetric(naiveRate, "naive-events/s")
	b.ReportMetric(pollRate, "poller-events/s")
	b.ReportMetric(pollRate/naiveRate, "x")
	fmt.Printf("\n%-28s %12s\n%-28s %12.0f\n%-28s %12.0f\n%-28s %12.1fx\n", fmt.Sprintf("relay (%d-row backlog)", n), "events/s",
		"naive (100 rows, 1 XADD+1 UPDATE/row)", naiveRate, fmt.Sprintf("poller (batch %d, 1 script)", benchBatch(b)), pollRate, "ratio", pollRate/naiveRate)
}
