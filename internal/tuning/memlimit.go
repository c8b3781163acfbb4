// Package tuning fits the Go runtime to the relay process, which runs
// beside a busy database on few cores: a soft memory limit that follows the
// live heap (memlimit.go), one processor while the binlog reader is caught
// up (procs.go), and the executable's start-up pages given back
// (exepages_linux.go). Each file's comments give the measurement that
// justifies it; bench takes those measurements again. The relay's wiring
// (package relay) calls it at start and around the binlog reader.
package tuning

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// defaultMemoryLimit is the relay's soft memory limit while its live heap
// is small (GOMEMLIMIT overrides); followLiveHeap raises it with the heap.
const defaultMemoryLimit = 20 << 20

// defaultGCPercent is the relay's GOGC under that limit (GOGC overrides):
// with GOGC's 100 the collector ran whenever the heap doubled its live
// part, far below the limit, which a catch-up's small live heap makes
// often; at 400 the limit decides in most cycles, which spends less CPU per
// event at the same peak RSS (bench measures both; BENCHMARKS.md).
const defaultGCPercent = 400

// setMemoryLimit sets the relay's soft memory limit and GOGC, unless the
// environment sets them, and returns what puts the old ones back; nil when
// the limit is the user's. The relay's live data is bounded
// (--event-cache-bytes, --max-tx-bytes, the batches); a soft limit keeps
// the garbage collector from letting the heap double past it.
func setMemoryLimit() (restore func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	oldLimit := debug.SetMemoryLimit(defaultMemoryLimit)
	ownGC := os.Getenv("GOGC") == ""
	var oldPercent int
	if ownGC {
		oldPercent = debug.SetGCPercent(defaultGCPercent)
	}
	return func() {
		debug.SetMemoryLimit(oldLimit)
		if ownGC {
			debug.SetGCPercent(oldPercent)
		}
	}
}

// OwnMemoryLimit sets the relay's memory limit and follows the live heap
// with it until the returned func is called, which puts the process's
// limit back: a caller that runs the relay in-process (the tests, a
// program embedding it) keeps its own limit once Run returns.
func OwnMemoryLimit(ctx context.Context, log *slog.Logger) (release func()) {
	restore := setMemoryLimit()
	if restore == nil {
		return func() {}
	}
	ctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		followLiveHeap(ctx, log, time.Second)
	}()
	return func() {
		stop()
		<-followed // no adjustment after the restore
		restore()
	}
}

// memoryLimitFor is the soft limit for a live heap of live bytes beside
// overhead bytes the runtime holds outside the heap (stacks, metadata,
// buffers): the default, or enough for the heap to reach twice its live
// part. The collector's goal under a limit is the limit less that
// overhead, so a limit near overhead+live makes it run back to back, as it
// did for a poll relay of many idle tables (BENCHMARKS.md).
func memoryLimitFor(live, overhead uint64) int64 {
	return max(defaultMemoryLimit, int64(overhead+2*live))
}

// The metrics adjustMemoryLimit reads: the heap the last collection found
// live, and what the memory limit counts (total less released) split into
// heap and the rest.
var memoryMetrics = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

// memorySamples returns the samples of memoryMetrics for adjustMemoryLimit.
func memorySamples() []metrics.Sample {
	s := make([]metrics.Sample, len(memoryMetrics))
	for i, name := range memoryMetrics {
		s[i].Name = name
	}
	return s
}

// followLiveHeap keeps the soft limit at memoryLimitFor the live heap,
// checking every interval until ctx is done, and logs each change at debug
// level: it tells an operator why the RSS grew past the default.
func followLiveHeap(ctx context.Context, log *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	sample := memorySamples()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if from, to := adjustMemoryLimit(sample); from != to {
			log.Debug("memory limit follows the live heap", "from_mib", from>>20, "to_mib", to>>20)
		}
	}
}

// adjustMemoryLimit sets the limit for what sample reads, unless it is
// within an eighth of the current one (no churn for small moves), and
// returns the limit before and after.
func adjustMemoryLimit(sample []metrics.Sample) (from, to int64) {
	metrics.Read(sample)
	var v [6]uint64
	for i := range v {
		if sample[i].Value.Kind() != metrics.KindUint64 {
			current := debug.SetMemoryLimit(-1)
			return current, current
		}
		v[i] = sample[i].Value.Uint64()
	}
	live, total, released, heap := v[0], v[1], v[2], v[3]+v[4]+v[5]
	var overhead uint64
	if total > released+heap {
		overhead = total - released - heap
	}
	want := memoryLimitFor(live, overhead)
	current := debug.SetMemoryLimit(-1)
	if d := want - current; d > current/8 || -d > current/8 {
		debug.SetMemoryLimit(want)
		return current, want
	}
	return current, current
}
