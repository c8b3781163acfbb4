package canal

import (
	"context"
	"errors"
	"sync"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// errHandOff tells the reader loop that the flusher became idle while a
// non-empty batch waited: hand it over now rather than at the next event.
var errHandOff = errors.New("flusher idle")

// flusher appends batches on its own goroutine, so that the reader decodes the
// next transactions while Redis works on the previous ones: the batches grow
// with the load by themselves, and an idle relay appends every transaction
// the moment it is read, with those received with it.
//
// It knows nothing of the Reader: it gets the sink, the position it last
// stored, how to encode the next one (encode stamps it with the writer), what
// to do once a batch is appended (done, on the flusher goroutine), and how to
// stop the session when an append fails (abort).
type flusher struct {
	sink   outbox.Sink
	encode func(position.Point) []byte
	done   func(*batch)
	abort  context.CancelFunc
	prev   []byte // last position stored; only the flusher goroutine touches it
	in     chan *batch
	free   chan *batch
	idle   chan struct{}

	// sent and finished count batches handed over and finished: the flusher
	// is busy while sent > finished. Counters, unlike a flag, cannot be left
	// stale when the flusher finishes a batch before its sender records the
	// send.
	mu       sync.Mutex
	sent     uint64
	finished uint64
	failure  error
	// wake, while the reader waits for an event with a batch the busy
	// flusher could not take, is closed when the flusher finishes one.
	wake     chan struct{}
	appended uint64 // events; read after the flusher goroutine ended
}

func newFlusher(sink outbox.Sink, prev []byte, encode func(position.Point) []byte, done func(*batch), abort context.CancelFunc) *flusher {
	f := &flusher{
		sink: sink, encode: encode, done: done, abort: abort, prev: prev,
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
		f.finished++
		if err != nil {
			f.failure = err
		}
		if f.wake != nil {
			close(f.wake)
			f.wake = nil
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
	next := f.encode(b.at)
	if err := f.sink.Append(ctx, b.events, f.prev, next); err != nil {
		return err
	}
	f.prev = next
	f.appended += uint64(len(b.events))
	f.done(b)
	return nil
}

// caughtUp reports whether every batch handed over is appended, without a
// failure.
func (f *flusher) caughtUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent == f.finished && f.failure == nil
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
		busy, failure := f.sent > f.finished, f.failure
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
	if f.sent == f.finished {
		f.mu.Unlock()
		return queued{}, errHandOff
	}
	if f.wake == nil {
		f.wake = make(chan struct{})
	}
	wake := f.wake
	f.mu.Unlock()
	return q.nextOrWake(ctx, wake)
}
