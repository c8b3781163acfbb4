package canal

import (
	"context"
	"errors"
	"runtime"
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
// Events are handed over in groups: the reading goroutine holds them back
// until go-mysql reads from the connection again (handOverHeld, called by
// the link before every read; go-mysql's 64 KiB buffered reader reads only
// once it has parsed all it holds), or until maxHeld of them. Handed over
// one by one, each event woke the reader, which is faster than go-mysql's
// parsing and so waited again after every event: two goroutine switches per
// event, a tenth of the relay's CPU in a catch-up of single-row
// transactions. Before a read nothing more is parsed until bytes arrive, so
// holding back adds no latency: what arrived together goes on together.
//
// No deadlock is possible: an event larger than the whole budget passes when
// the queue is empty; the events held back are handed over before
// HandleEvent waits for room; the reader releases what it took before it
// waits for more; close unblocks the reading goroutine at the end of the
// session.
type eventQueue struct {
	ch     chan []queued
	errc   chan error // the stream's end, from go-mysql
	limit  int64      // bytes
	limitN int64      // events

	used    atomic.Int64 // bytes of events taken in and not released
	count   atomic.Int64 // events taken in and not released
	waiting atomic.Bool  // HandleEvent waits for room
	wake    chan struct{}
	high    *atomic.Int64 // high-water mark of used, kept across sessions

	// held are the events not handed over yet. The reading goroutine
	// adds to it; the link's reads and the stream's end hand it over.
	mu   sync.Mutex
	held []queued
	// cur is the rest of the group the reader took last; only the
	// reader touches it.
	cur []queued
	// paused, while not nil, holds go-mysql's reads of the connection
	// until it is closed (pauseReads, resumeReads).
	paused chan struct{}

	stop     chan struct{}
	stopOnce sync.Once

	// group numbers the runs of events that can hold no transaction's
	// end: it grows at every event but a rows event, a table map and a
	// statement's annotation. Only go-mysql's reading goroutine touches
	// it. walkGroup is the group whose rows the reader does not keep
	// (walkRest); 0 for none.
	group     uint64
	walkGroup atomic.Uint64
}

// queued is an event, the bytes it holds in the budget, and its group
// (eventQueue.group).
type queued struct {
	ev    *replication.BinlogEvent
	size  int64
	group uint64
}

// maxHeld bounds the events held back: a catch-up's reads of 64 KiB
// bring a hundred small events, or a few large ones.
const maxHeld = 64

// newEventQueue returns a queue of at most count events (at least one) and
// limit bytes (one larger event passes alone).
func newEventQueue(count int, limit int64, high *atomic.Int64) *eventQueue {
	count = max(count, 1)
	return &eventQueue{
		// A group has at least one event: count groups always fit.
		ch: make(chan []queued, count), errc: make(chan error, 1), limit: limit, limitN: int64(count),
		wake: make(chan struct{}, 1), high: high, stop: make(chan struct{}),
	}
}

var _ replication.EventHandler = (*eventQueue)(nil)

// HandleEvent implements replication.EventHandler: it waits for room in the
// budget, then queues e. Only go-mysql's reading goroutine calls it.
func (q *eventQueue) HandleEvent(e *replication.BinlogEvent) error {
	switch e.Event.(type) {
	case *replication.RowsEvent, *replication.TableMapEvent, *replication.MariadbAnnotateRowsEvent, *replication.RowsQueryEvent:
	default:
		q.group++
	}
	n := binlogEventSize(e)
	if err := q.acquire(n); err != nil {
		return err
	}
	if n >= collectBefore {
		// go-mysql read e into a buffer that doubled past 16 MiB; the
		// first half is garbage now, and go-mysql allocates the next
		// event's buffer before its next read of the connection, which
		// pausing cannot hold back (the header is in its 64 KiB buffer).
		// Collected here, that buffer takes the garbage's place.
		runtime.GC()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n > q.limit && q.paused == nil {
		// Nothing more is read until the reader has seen this one
		// (pauseReads).
		q.paused = make(chan struct{})
	}
	q.held = append(q.held, queued{ev: e, size: n, group: q.group})
	if len(q.held) < maxHeld {
		return nil
	}
	return q.handOverLocked()
}

// walkRest tells the parser that the reader keeps no rows of group: the
// rest of a transaction too large to keep, whose end the reader reads on
// to. The parser walks their images instead of decoding them (walking);
// what it parsed already stays decoded. The group ends before any event
// that could end the transaction, so no other transaction's rows are
// walked, however far the parser reads ahead. Only the reader calls it.
func (q *eventQueue) walkRest(group uint64) { q.walkGroup.Store(group) }

// walking reports whether the rows the parser is about to decode are
// those of the group the reader keeps no rows of (walkRest): a rows event
// belongs to the group of the events before it. Only go-mysql's reading
// goroutine calls it.
func (q *eventQueue) walking() bool {
	g := q.walkGroup.Load()
	return g != 0 && g == q.group
}

// handOverHeld gives the events held back to the reader: go-mysql is about
// to read from the connection, or the stream ended. Safe from any goroutine.
func (q *eventQueue) handOverHeld() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.held) == 0 {
		return nil
	}
	return q.handOverLocked()
}

// handOverLocked sends the held events. The send does not wait: each
// group holds at least one of the events the budget counts, and the channel
// has room for as many groups as the budget has events.
func (q *eventQueue) handOverLocked() error {
	g := q.held
	q.held = make([]queued, 0, 16)
	select {
	case q.ch <- g:
		return nil
	case <-q.stop:
		return errQueueClosed
	}
}

// pauseReads makes go-mysql wait before its next read of the connection
// until resumeReads. Reads pause after an event larger than the whole
// budget (HandleEvent pauses them) until the reader has handled it and the
// rows it holds are appended: the budget cannot hold the next such event
// back, because go-mysql reads an event whole, into a buffer that doubles
// past 16 MiB, before HandleEvent sees it; only not reading does. Only the
// reader calls it.
func (q *eventQueue) pauseReads() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.paused == nil {
		q.paused = make(chan struct{})
	}
}

// readsPaused reports whether go-mysql's reads are paused.
func (q *eventQueue) readsPaused() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.paused != nil
}

// resumeReads lets go-mysql read again. Only the reader calls it.
func (q *eventQueue) resumeReads() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.paused != nil {
		close(q.paused)
		q.paused = nil
	}
}

// beforeRead runs before every read of the session's connections: it
// hands over the events held back, then waits while reads are paused or
// until the session ends. Safe from any goroutine.
func (q *eventQueue) beforeRead() {
	if err := q.handOverHeld(); err != nil {
		return // the session is over
	}
	q.mu.Lock()
	paused := q.paused
	q.mu.Unlock()
	if paused == nil {
		return
	}
	select {
	case <-paused:
	case <-q.stop:
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

// acquire takes n bytes and one event of the budget, waiting while they do
// not fit. The only caller adds to used and count, so a fit seen stays a
// fit.
func (q *eventQueue) acquire(n int64) error {
	for {
		u, c := q.used.Load(), q.count.Load()
		if c == 0 || (u+n <= q.limit && c < q.limitN) {
			u = q.used.Add(n)
			q.count.Add(1)
			if u > q.high.Load() {
				q.high.Store(u) // one writer at a time: sessions do not overlap
			}
			return nil
		}
		q.mu.Lock()
		held := len(q.held)
		q.mu.Unlock()
		if held > 0 {
			// Only the reader makes room, and it cannot release what it
			// has not got.
			if err := q.handOverHeld(); err != nil {
				return err
			}
			continue
		}
		// Announce the wait, then look again: either release sees the flag
		// and wakes us, or we see what it released.
		q.waiting.Store(true)
		if q.used.Load() != u || q.count.Load() != c {
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
	q.count.Add(-1)
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
	// The events parsed before the end (a parse error ends the stream
	// without another read) come first.
	_ = q.handOverHeld()
	q.errc <- err
}

// next returns the next event, or the stream's error once the queued events
// are taken.
func (q *eventQueue) next(ctx context.Context) (queued, error) { return q.nextOrWake(ctx, nil) }

// nextOrWake is next that returns errHandOff once wake is closed (a nil wake
// never is), unless an event is already queued.
func (q *eventQueue) nextOrWake(ctx context.Context, wake <-chan struct{}) (queued, error) {
	if len(q.cur) > 0 {
		return q.pop(), nil
	}
	select {
	case q.cur = <-q.ch:
		return q.pop(), nil
	default:
	}
	select {
	case q.cur = <-q.ch:
		return q.pop(), nil
	case err := <-q.errc:
		select {
		case q.cur = <-q.ch:
			q.errc <- err // the stream ended after these events: report it next
			return q.pop(), nil
		default:
		}
		return queued{}, err
	case <-wake:
		return queued{}, errHandOff
	case <-ctx.Done():
		return queued{}, ctx.Err()
	}
}

// ready reports whether an event is received and waiting for the reader,
// which next then returns without waiting. Only the reader calls it.
func (q *eventQueue) ready() bool { return len(q.cur) > 0 || len(q.ch) > 0 }

// pop takes the next event of the current group.
func (q *eventQueue) pop() queued {
	e := q.cur[0]
	q.cur[0] = queued{} // the group's array must not keep the event alive
	q.cur = q.cur[1:]
	return e
}

// close unblocks HandleEvent for good; the session is over.
func (q *eventQueue) close() { q.stopOnce.Do(func() { close(q.stop) }) }
