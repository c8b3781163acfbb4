package tuning

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"time"
)

// The relay runs its Go code on one processor while the binlog reader is
// caught up, and on the runtime's default number (GOMAXPROCS) while it
// catches up.
//
// Caught up, every transaction crosses the reader's goroutines one after
// the other (go-mysql's parser, the reader, the flusher), and on more than
// one processor each hand-off wakes another OS thread. Where the cores are
// busy with the producers, the database and Redis, that thread waits for
// the kernel to run it: flat out on 2 cores the relay's p99 was about 1 ms
// (up to 3.4 ms) over the minimal relay's on the default, and within half
// a millisecond in most runs on one processor, which serves thousands of
// transactions a second (binlog-outbox-bench --workloads live-flat). A
// catch-up on one processor is
// 12-20% slower, because parsing and relaying then share a core; hence the
// switch back.
const (
	caughtUpProcs = 1
	// behindAge is the age of its newest transaction at which a batch
	// shows a catch-up: binlog timestamps are whole seconds, so a batch
	// of transactions under a second old shows less than 2s.
	behindAge = 2 * time.Second
	// procsTick is how often the reader's state is looked at (a lock
	// and a few loads); it is caught up again after two looks in a row
	// that say so.
	procsTick = 100 * time.Millisecond
)

// CatchUp is what FollowCatchUp learns from the reader at each look.
type CatchUp struct {
	// LastAppend is when the reader last appended a batch, LastCommit
	// the commit time (from the binlog) of its newest transaction.
	LastAppend, LastCommit time.Time
	// Checkpoint is how often the reader stores its position while it
	// reads only other tables' rows (canal's IdleCheckpoint): over such
	// traffic it is still catching up though it appends nothing.
	Checkpoint time.Duration
}

// appendedRecently is how long after its last batch a reader may still be
// catching up: it stores its position about every Checkpoint, not at each
// look.
func (c CatchUp) appendedRecently() time.Duration { return c.Checkpoint + 5*procsTick }

// behind reports a reader that appended, within appendedRecently, a batch
// (or stored its position) whose newest transaction was behindAge old or
// more. The age compares the server's clock with the relay's, as the lag
// metric does: a server clock far behind keeps the default, one far ahead
// the single processor.
func (c CatchUp) behind(now time.Time) bool {
	return now.Sub(c.LastAppend) <= c.appendedRecently() && c.LastAppend.Sub(c.LastCommit) >= behindAge
}

// procsPolicy decides GOMAXPROCS from the looks at the reader.
type procsPolicy struct {
	one  bool // the process runs on caughtUpProcs
	calm int  // looks in a row that showed no catch-up
}

// next takes one look and returns the processors to run on: caughtUpProcs,
// 0 for the default, -1 for no change. The zero procsPolicy is on the
// default.
func (p *procsPolicy) next(behind bool) int {
	if behind {
		p.calm = 0
		if p.one {
			p.one = false
			return 0
		}
		return -1
	}
	if p.calm++; !p.one && p.calm >= 2 {
		p.one = true
		return caughtUpProcs
	}
	return -1
}

// FollowCatchUp sets the process's GOMAXPROCS as procsPolicy says until ctx
// ends, then puts the runtime's default back. It does nothing where the
// environment sets GOMAXPROCS or the default is one processor already.
func FollowCatchUp(ctx context.Context, log *slog.Logger, look func() CatchUp) {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) <= caughtUpProcs {
		return
	}
	// It starts on one processor: a live relay has it at once, and a
	// catch-up gets the default back at the first look at its batches.
	p := procsPolicy{one: true}
	runtime.GOMAXPROCS(caughtUpProcs)
	log.Debug("caught up: running on one processor")
	t := time.NewTicker(procsTick)
	defer t.Stop()
	defer func() {
		if p.one {
			runtime.SetDefaultGOMAXPROCS()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			switch n := p.next(look().behind(now)); n {
			case caughtUpProcs:
				runtime.GOMAXPROCS(n)
				log.Debug("caught up: running on one processor")
			case 0:
				runtime.SetDefaultGOMAXPROCS()
				log.Debug("catching up: running on every processor", "gomaxprocs", runtime.GOMAXPROCS(0))
			}
		}
	}
}
