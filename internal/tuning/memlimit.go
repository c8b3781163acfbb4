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
// event at the same peak RSS (binlog-outbox-bench prints both).
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
// buffers): the default, or enough for the heap to grow past its live part
// by as much again, up to followHeadroom. The collector's goal under a
// limit is the limit less that overhead, so a limit near overhead+live
// makes it run back to back, as it did for a poll relay of 1,000 idle
// tables holding 10 MiB, which then spent half a core collecting. Past
// followHeadroom the garbage a collection waits for costs more memory than
// the collections it saves cost CPU: a relay reading 16 MiB rows holds 50
// to 80 MiB live at moments, and twice that was its peak RSS.
func memoryLimitFor(live, overhead uint64) int64 {
	return max(defaultMemoryLimit, int64(overhead+live+min(live, followHeadroom)))
}

// followHeadroom bounds how far above its live part memoryLimitFor lets
// the heap grow.
const followHeadroom = 16 << 20

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

// followWindow is how many looks in a row must find a live heap before the
// limit rises for it. A heap that stays (1,000 idle pollers' 10 MiB) is
// followed after that many looks; the heap of one huge row is gone by
// then, and raising the limit for it let the garbage of the rows that came
// next pile up to twice its size: six 16 MiB rows peaked at 197 MB of RSS
// with the limit following each look, against 100-130 MB under the
// default limit alone (binlog-outbox-bench --workloads giant).
const followWindow = 5

// liveWindow holds the live heap of the last followWindow looks.
type liveWindow struct {
	live [followWindow]uint64
	n    int // looks so far
}

// add records a look and returns the least live heap of the window: the
// heap that persisted through all of it.
func (w *liveWindow) add(live uint64) uint64 {
	w.live[w.n%followWindow] = live
	w.n++
	least := live
	for _, v := range w.live[:min(w.n, followWindow)] {
		least = min(least, v)
	}
	return least
}

// followLiveHeap keeps the soft limit at memoryLimitFor the live heap that
// persisted over the last followWindow looks, looking every interval until
// ctx is done, and logs each change at debug level: it tells an operator
// why the RSS grew past the default.
func followLiveHeap(ctx context.Context, log *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	sample := memorySamples()
	var w liveWindow
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if from, to := adjustMemoryLimit(sample, &w); from != to {
			log.Debug("memory limit follows the live heap", "from_mib", from>>20, "to_mib", to>>20)
		}
	}
}

// adjustMemoryLimit sets the limit for what sample reads, the live heap
// being the least of window w, unless it is within an eighth of the
// current one (no churn for small moves), and returns the limit before and
// after.
func adjustMemoryLimit(sample []metrics.Sample, w *liveWindow) (from, to int64) {
	metrics.Read(sample)
	var v [6]uint64
	for i := range v {
		if sample[i].Value.Kind() != metrics.KindUint64 {
			current := debug.SetMemoryLimit(-1)
			return current, current
		}
		v[i] = sample[i].Value.Uint64()
	}
	live, total, released, heap := w.add(v[0]), v[1], v[2], v[3]+v[4]+v[5]
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
