package canal

import (
	"context"
	"errors"
	"sync"
)

// errHandOff tells the reader loop that the flusher became idle while a
// non-empty batch waited: hand it over now rather than at the next event.
var errHandOff = errors.New("flusher idle")

// flusher appends batches on its own goroutine, so that the reader decodes the
// next transactions while Redis works on the previous ones: the batches grow
// with the load by themselves, and an idle relay appends every transaction
// the moment it is read.
type flusher struct {
	r     *Reader
	prev  []byte // last position stored; only the flusher goroutine touches it
	in    chan *batch
	free  chan *batch
	idle  chan struct{}
	abort context.CancelFunc

	// sent and done count batches handed over and finished: the flusher is
	// busy while sent > done. Counters, unlike a flag, cannot be left stale
	// when the flusher finishes a batch before its sender records the send.
	mu       sync.Mutex
	sent     uint64
	done     uint64
	failure  error
	wakeCtx  context.Context
	wake     context.CancelFunc
	appended uint64 // events; read after the flusher goroutine ended
}

func newFlusher(r *Reader, prev []byte, abort context.CancelFunc) *flusher {
	f := &flusher{
		r: r, prev: prev, abort: abort,
		in:   make(chan *batch),
		free: make(chan *batch, 2),
		idle: make(chan struct{}, 1),
	}
	f.free <- &batch{}
	f.free <- &batch{}
	return f
}

// take returns an empty batch for the reader to fill.
func (f *flusher) take() *batch { return <-f.free }

func (f *flusher) loop(ctx context.Context) {
	for {
		var b *batch
		select {
		case <-ctx.Done():
			return
		case b = <-f.in:
		}
		err := f.appendBatch(ctx, b)
		b.reset()
		f.free <- b
		f.mu.Lock()
		f.done++
		if err != nil {
			f.failure = err
		}
		if f.wake != nil {
			f.wake()
			f.wake, f.wakeCtx = nil, nil
		}
		f.mu.Unlock()
		select {
		case f.idle <- struct{}{}:
		default:
		}
		if err != nil {
			// Stop the session: the reader may be waiting for binlog
			// events and must learn of the failure now.
			f.abort()
			return
		}
	}
}

func (f *flusher) appendBatch(ctx context.Context, b *batch) error {
	next := f.r.encode(b.at)
	if err := f.r.sink.Append(ctx, b.events, f.prev, next); err != nil {
		return err
	}
	f.prev = next
	f.appended += uint64(len(b.events))
	f.r.recordBatch(b, f.r.positionString(b.at))
	return nil
}

// err returns the flusher's failure, if any.
func (f *flusher) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failure
}

// tryHandOff gives b to the flusher if it is idle and returns an empty batch
// in exchange, or nil when the flusher is busy.
func (f *flusher) tryHandOff(b *batch) (*batch, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	select {
	case f.in <- b:
	default:
		return nil, nil
	}
	f.recordSent()
	return <-f.free, nil
}

// handOff gives b to the flusher, waiting for it to be idle. A failing
// flusher cancels ctx, which ends the wait.
func (f *flusher) handOff(ctx context.Context, b *batch) (*batch, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	select {
	case f.in <- b:
	case <-ctx.Done():
		if err := f.err(); err != nil {
			return nil, err
		}
		return nil, ctx.Err()
	}
	f.recordSent()
	return <-f.free, nil
}

func (f *flusher) recordSent() {
	f.mu.Lock()
	f.sent++
	f.mu.Unlock()
}

// drain hands off b if it moved the position and waits until the flusher
// appended everything.
func (f *flusher) drain(ctx context.Context, b *batch) error {
	if b.dirty || len(b.events) > 0 {
		if _, err := f.handOff(ctx, b); err != nil {
			return err
		}
	}
	for {
		f.mu.Lock()
		busy, failure := f.sent > f.done, f.failure
		f.mu.Unlock()
		if failure != nil {
			return failure
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.idle:
		}
	}
}

// nextEvent reads the next binlog event. When waiting is set (a batch waits
// for a busy flusher), it returns errHandOff as soon as the flusher is idle,
// instead of holding the batch back until the next event arrives.
func (f *flusher) nextEvent(ctx context.Context, q *eventQueue, waiting bool) (queued, error) {
	if !waiting {
		return q.next(ctx)
	}
	f.mu.Lock()
	if f.failure != nil {
		f.mu.Unlock()
		return queued{}, f.failure
	}
	if f.sent == f.done {
		f.mu.Unlock()
		return queued{}, errHandOff
	}
	if f.wake == nil {
		f.wakeCtx, f.wake = context.WithCancel(ctx)
	}
	wctx := f.wakeCtx
	f.mu.Unlock()
	ev, err := q.next(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return queued{}, errHandOff
	}
	return ev, err
}
