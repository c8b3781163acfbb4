package canal

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/replication"
)

// errQueueClosed ends go-mysql's reading goroutine when the session is over.
var errQueueClosed = errors.New("binlog session ended")

// eventQueue carries events from go-mysql's reading goroutine to the reader,
// bounded by bytes as well as by count. go-mysql's own channel bounds only
// the count (EventCacheCount): 256 events of 4 MiB rows are a gigabyte, an
// OOM-kill loop under a container limit while the relay catches up.
//
// The queue is go-mysql's SynchronousEventHandler, so HandleEvent runs on the
// goroutine that reads the socket: blocking there is back-pressure on the
// connection, and the server waits (net_write_timeout is raised for that).
// Every event is counted, not only row events: MariaDB's annotate events
// carry the statement text, as large as the row when values are literals.
//
// No deadlock is possible: an event larger than the whole budget passes when
// the queue is empty; the reader releases what it took before it waits for
// more; close unblocks the reading goroutine at the end of the session.
type eventQueue struct {
	ch    chan queued
	errc  chan error // the stream's end, from go-mysql
	limit int64

	used    atomic.Int64 // bytes of events handed over and not released
	waiting atomic.Bool  // HandleEvent waits for room
	wake    chan struct{}
	high    *atomic.Int64 // high-water mark of used, kept across sessions

	stop     chan struct{}
	stopOnce sync.Once
}

// queued is an event and the bytes it holds in the budget.
type queued struct {
	ev   *replication.BinlogEvent
	size int64
}

func newEventQueue(count int, limit int64, high *atomic.Int64) *eventQueue {
	return &eventQueue{
		ch: make(chan queued, count), errc: make(chan error, 1), limit: limit,
		wake: make(chan struct{}, 1), high: high, stop: make(chan struct{}),
	}
}

var _ replication.EventHandler = (*eventQueue)(nil)

// HandleEvent implements replication.EventHandler: it waits for room in the
// budget, then queues e. Only go-mysql's reading goroutine calls it.
func (q *eventQueue) HandleEvent(e *replication.BinlogEvent) error {
	n := binlogEventSize(e)
	if err := q.acquire(n); err != nil {
		return err
	}
	select {
	case q.ch <- queued{ev: e, size: n}:
		return nil
	case <-q.stop:
		return errQueueClosed
	}
}

// binlogEventSize is what an event holds: its raw bytes, which the decoded values
// alias, and for a compressed transaction the decompressed events too.
func binlogEventSize(e *replication.BinlogEvent) int64 {
	n := int64(len(e.RawData))
	if p, ok := e.Event.(*replication.TransactionPayloadEvent); ok {
		for _, in := range p.Events {
			n += int64(len(in.RawData))
		}
	}
	return n
}

// acquire takes n bytes of the budget, waiting while they do not fit. The
// only caller adds to used, so a fit seen stays a fit.
func (q *eventQueue) acquire(n int64) error {
	for {
		u := q.used.Load()
		if u == 0 || u+n <= q.limit {
			u = q.used.Add(n)
			if u > q.high.Load() {
				q.high.Store(u) // one writer at a time: sessions do not overlap
			}
			return nil
		}
		// Announce the wait, then look again: either release sees the flag
		// and wakes us, or we see what it released.
		q.waiting.Store(true)
		if q.used.Load() != u {
			q.waiting.Store(false)
			continue
		}
		select {
		case <-q.wake:
		case <-q.stop:
			return errQueueClosed
		}
		q.waiting.Store(false)
	}
}

// release returns the bytes of an event the reader has handled.
func (q *eventQueue) release(n int64) {
	q.used.Add(-n)
	if q.waiting.Load() {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// watch forwards the end of go-mysql's stream: with a SynchronousEventHandler
// its GetEvent returns only errors.
func (q *eventQueue) watch(ctx context.Context, s *replication.BinlogStreamer) {
	_, err := s.GetEvent(ctx)
	q.errc <- err
}

// next returns the next event, or the stream's error once the queued events
// are taken.
func (q *eventQueue) next(ctx context.Context) (queued, error) { return q.nextOrWake(ctx, nil) }

// nextOrWake is next that returns errHandOff once wake is closed (a nil wake
// never is), unless an event is already queued.
func (q *eventQueue) nextOrWake(ctx context.Context, wake <-chan struct{}) (queued, error) {
	select {
	case e := <-q.ch:
		return e, nil
	default:
	}
	select {
	case e := <-q.ch:
		return e, nil
	case err := <-q.errc:
		select {
		case e := <-q.ch:
			q.errc <- err // the stream ended after this event: report it next
			return e, nil
		default:
		}
		return queued{}, err
	case <-wake:
		return queued{}, errHandOff
	case <-ctx.Done():
		return queued{}, ctx.Err()
	}
}

// close unblocks HandleEvent for good; the session is over.
func (q *eventQueue) close() { q.stopOnce.Do(func() { close(q.stop) }) }
