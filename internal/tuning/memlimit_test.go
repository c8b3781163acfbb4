package tuning

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestMemoryLimitFor(t *testing.T) {
	for _, c := range []struct {
		live, overhead uint64
		want           int64
	}{
		{0, 0, defaultMemoryLimit},
		{4 << 20, 10 << 20, defaultMemoryLimit},
		{5 << 20, 10 << 20, defaultMemoryLimit},
		{10 << 20, 10 << 20, 30 << 20},
		{16 << 20, 8 << 20, 40 << 20},
		{30 << 20, 8 << 20, 54 << 20}, // the headroom stops at followHeadroom
		{80 << 20, 8 << 20, 104 << 20},
	} {
		if got := memoryLimitFor(c.live, c.overhead); got != c.want {
			t.Errorf("memoryLimitFor(%d, %d) = %d, want %d", c.live, c.overhead, got, c.want)
		}
	}
}

func TestLiveWindow_Add(t *testing.T) {
	var w liveWindow
	for i, c := range []struct{ live, want uint64 }{
		{10, 10}, {50, 10}, {50, 10}, {50, 10}, {50, 10}, // 10 still in the window
		{50, 50}, // five looks of 50
		{5, 5},   // down at once
		{60, 5},
	} {
		if got := w.add(c.live); got != c.want {
			t.Errorf("look %d: add(%d) = %d, want %d", i, c.live, got, c.want)
		}
	}
}

// TestAdjustMemoryLimit_FollowsLiveHeap holds a live heap above the default
// limit and checks that the limit moves above it by followHeadroom once the heap
// stayed for followWindow looks, not at the first (the heap of one huge
// row is gone by then), then back to the default once the heap is garbage.
func TestAdjustMemoryLimit_FollowsLiveHeap(t *testing.T) {
	old := debug.SetMemoryLimit(defaultMemoryLimit)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	sample := memorySamples()
	var w liveWindow
	runtime.GC()
	adjustMemoryLimit(sample, &w) // a look at the small heap

	held := make([][]byte, 32)
	for i := range held {
		held[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	for look := 1; look < followWindow; look++ {
		if from, to := adjustMemoryLimit(sample, &w); from != to || to != defaultMemoryLimit {
			t.Fatalf("look %d at 32 MiB live: %d -> %d MiB, want the default %d MiB kept", look, from>>20, to>>20, defaultMemoryLimit>>20)
		}
	}
	if from, to := adjustMemoryLimit(sample, &w); from != defaultMemoryLimit || to < 48<<20 {
		t.Errorf("adjustMemoryLimit reports %d -> %d MiB, want %d MiB -> at least 48", from>>20, to>>20, defaultMemoryLimit>>20)
	}
	if got := debug.SetMemoryLimit(-1); got < 48<<20 {
		t.Fatalf("limit with 32 MiB live = %d MiB, want at least 48 MiB", got>>20)
	}
	runtime.KeepAlive(held)

	held = nil
	runtime.GC()
	adjustMemoryLimit(sample, &w)
	if got := debug.SetMemoryLimit(-1); got != defaultMemoryLimit {
		t.Fatalf("limit after the heap is garbage = %d MiB, want the default %d MiB", got>>20, defaultMemoryLimit>>20)
	}
}

// A GOMEMLIMIT of the user's wins: the relay sets no limit and follows no
// heap.
func TestSetMemoryLimit_LeavesTheUsersLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "64MiB")
	old := debug.SetMemoryLimit(64 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	if restore := setMemoryLimit(); restore != nil {
		restore()
		t.Fatal("setMemoryLimit took over the limit although GOMEMLIMIT is set")
	}
	if got := debug.SetMemoryLimit(-1); got != 64<<20 {
		t.Fatalf("limit = %d MiB after setMemoryLimit, want the user's 64 MiB", got>>20)
	}
}

// An in-process Run must leave the process's limit and GOGC as it found
// them: a test binary or an embedding program that ran a relay would
// otherwise collect under the relay's 20 MiB from then on.
func TestOwnMemoryLimit_PutsTheProcessLimitBack(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	oldLimit := debug.SetMemoryLimit(1 << 40)
	oldPercent := debug.SetGCPercent(150)
	t.Cleanup(func() {
		debug.SetMemoryLimit(oldLimit)
		debug.SetGCPercent(oldPercent)
	})
	release := OwnMemoryLimit(context.Background(), slog.New(slog.DiscardHandler))
	if got := debug.SetMemoryLimit(-1); got != defaultMemoryLimit {
		t.Fatalf("limit while the relay runs = %d MiB, want %d MiB", got>>20, defaultMemoryLimit>>20)
	}
	release()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after the relay = %d, want the process's %d", got, int64(1<<40))
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GOGC after the relay = %d, want the process's 150", got)
	}
}
