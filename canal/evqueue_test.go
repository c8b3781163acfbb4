package canal

import (
	"context"
	"errors"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

func sizedEvent(size int) *replication.BinlogEvent {
	return &replication.BinlogEvent{RawData: make([]byte, size), Event: &replication.GenericEvent{}}
}

// handle runs HandleEvent as go-mysql's reading goroutine would, followed
// by its next read from the connection.
func handle(q *eventQueue, e *replication.BinlogEvent) error {
	if err := q.HandleEvent(e); err != nil {
		return err
	}
	return q.handOverHeld()
}

// handleAsync runs handle on a goroutine of its own.
func handleAsync(q *eventQueue, e *replication.BinlogEvent) <-chan error {
	done := make(chan error, 1)
	go func() { done <- handle(q, e) }()
	return done
}

func blocked(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("HandleEvent returned %v, want it to wait for room", err)
	case <-time.After(50 * time.Millisecond):
	}
}

func returned(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("HandleEvent still waits")
		return nil
	}
}

func TestEventQueue_WaitsForRoomAndPassesLargeEventsAlone(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 100, &high)
	ctx := context.Background()
	if err := handle(q, sizedEvent(60)); err != nil {
		t.Fatal(err)
	}
	// 60 + 60 > 100: waits until the reader releases the first.
	done := handleAsync(q, sizedEvent(60))
	blocked(t, done)
	first, err := q.next(ctx)
	if err != nil || first.size != 60 {
		t.Fatalf("next: %+v, %v", first, err)
	}
	blocked(t, done) // taken is not handled: still held
	q.release(first.size)
	if err := returned(t, done); err != nil {
		t.Fatal(err)
	}
	// An event larger than the whole budget waits for an empty queue, then
	// passes alone.
	done = handleAsync(q, sizedEvent(250))
	blocked(t, done)
	second, _ := q.next(ctx)
	q.release(second.size)
	if err := returned(t, done); err != nil {
		t.Fatal(err)
	}
	third, _ := q.next(ctx)
	if third.size != 250 {
		t.Fatalf("third event holds %d bytes, want 250", third.size)
	}
	q.release(third.size)
	if got := high.Load(); got != 250 {
		t.Errorf("high-water mark %d, want 250", got)
	}
	if got := q.used.Load(); got != 0 {
		t.Errorf("%d bytes held after every release, want 0", got)
	}
}

func TestEventQueue_CloseUnblocks(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 100, &high)
	if err := handle(q, sizedEvent(100)); err != nil {
		t.Fatal(err)
	}
	done := handleAsync(q, sizedEvent(1))
	blocked(t, done)
	q.close()
	if err := returned(t, done); !errors.Is(err, errQueueClosed) {
		t.Fatalf("HandleEvent after close: %v, want errQueueClosed", err)
	}
}

func TestEventQueue_EventsBeforeTheStreamsEnd(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 100, &high)
	if err := handle(q, sizedEvent(10)); err != nil {
		t.Fatal(err)
	}
	end := errors.New("connection reset")
	q.errc <- end
	ctx := context.Background()
	if e, err := q.next(ctx); err != nil || e.size != 10 {
		t.Fatalf("first next: %+v, %v; want the queued event", e, err)
	}
	if _, err := q.next(ctx); !errors.Is(err, end) {
		t.Fatalf("second next: %v, want %v", err, end)
	}
}

// Events wait on the reading goroutine until it reads from the connection
// again, and then reach the reader together, in order; never more than
// maxHeld of them.
func TestEventQueue_HandsOverAtTheNextRead(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(256, 1<<20, &high)
	var sent []*replication.BinlogEvent
	for range 5 {
		e := sizedEvent(10)
		sent = append(sent, e)
		if err := q.HandleEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if e, err := q.next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next before go-mysql reads again: %+v, %v; want nothing yet", e, err)
	}
	if err := q.handOverHeld(); err != nil {
		t.Fatal(err)
	}
	for i := range sent {
		e, err := q.next(context.Background())
		if err != nil || e.ev != sent[i] {
			t.Fatalf("event %d: %p, %v; want %p", i, e.ev, err, sent[i])
		}
		q.release(e.size)
	}
	for range maxHeld {
		if err := q.HandleEvent(sizedEvent(10)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxHeld {
		e, err := q.next(context.Background())
		if err != nil {
			t.Fatalf("event %d of %d held: %v", i, maxHeld, err)
		}
		q.release(e.size)
	}
	if u, c := q.used.Load(), q.count.Load(); u != 0 || c != 0 {
		t.Errorf("%d bytes and %d events held after every release, want none", u, c)
	}
}

// Events held back count in the budget; waiting for room hands them over
// first, or the reader could never release them.
func TestEventQueue_HandsOverHeldEventsBeforeWaiting(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(3, 100, &high)
	for range 3 {
		if err := q.HandleEvent(sizedEvent(10)); err != nil {
			t.Fatal(err)
		}
	}
	// A fourth event exceeds the count: the three go to the reader, and
	// the fourth waits until it released one.
	done := handleAsync(q, sizedEvent(10))
	blocked(t, done)
	first, err := q.next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q.release(first.size)
	if err := returned(t, done); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e, err := q.next(context.Background())
		if err != nil {
			t.Fatalf("event %d after the wait: %v", i+2, err)
		}
		q.release(e.size)
	}
}

// The events parsed before the stream ended reach the reader before its
// end: a parse error ends it without another read.
func TestEventQueue_HandsOverHeldEventsAtTheEnd(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 100, &high)
	if err := q.HandleEvent(sizedEvent(10)); err != nil {
		t.Fatal(err)
	}
	s := replication.NewBinlogStreamer()
	end := errors.New("invalid event")
	s.AddErrorToStreamer(end)
	ctx := context.Background()
	go q.watch(ctx, s)
	if e, err := q.next(ctx); err != nil || e.size != 10 {
		t.Fatalf("first next: %+v, %v; want the held event", e, err)
	}
	if _, err := q.next(ctx); !errors.Is(err, end) {
		t.Fatalf("second next: %v, want %v", err, end)
	}
}

// readAsync runs beforeRead, go-mysql's step before each read of the
// connection, on a goroutine of its own.
func readAsync(q *eventQueue) <-chan error {
	done := make(chan error, 1)
	go func() { q.beforeRead(); done <- nil }()
	return done
}

// An event larger than the whole budget pauses go-mysql's reads: it reads
// an event whole before HandleEvent sees it, so only not reading keeps a
// second such event out of memory. Reads go on once the reader says so, or
// when the session ends; a small event pauses nothing.
func TestEventQueue_PausesReadsAfterALargeEvent(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 100, &high)
	ctx := context.Background()
	if err := q.HandleEvent(sizedEvent(10)); err != nil {
		t.Fatal(err)
	}
	if err := returned(t, readAsync(q)); err != nil {
		t.Fatal(err)
	}
	small, _ := q.next(ctx)
	q.release(small.size)

	if err := q.HandleEvent(sizedEvent(250)); err != nil {
		t.Fatal(err)
	}
	done := readAsync(q)
	// The read hands the large event over, then waits.
	large, err := q.next(ctx)
	if err != nil || large.size != 250 {
		t.Fatalf("next: %+v, %v; want the 250-byte event", large, err)
	}
	blocked(t, done)
	q.release(large.size)
	blocked(t, done) // released is not resumed: its rows may be held
	q.resumeReads()
	if err := returned(t, done); err != nil {
		t.Fatal(err)
	}

	if err := q.HandleEvent(sizedEvent(250)); err != nil {
		t.Fatal(err)
	}
	done = readAsync(q)
	blocked(t, done)
	q.close()
	if err := returned(t, done); err != nil {
		t.Fatal(err)
	}
}

// The parser walks rows of the group the reader gave up keeping, and of
// no other: a group ends at the first event that could end a transaction.
func TestEventQueue_WalksOnlyTheGroupGivenUp(t *testing.T) {
	q := newEventQueue(100, 1<<20, new(atomic.Int64))
	of := func(e replication.Event) *replication.BinlogEvent {
		return &replication.BinlogEvent{RawData: make([]byte, 10), Event: e}
	}
	steps := []struct {
		ev      *replication.BinlogEvent
		group   uint64
		walkAt  bool // walkRest of this event's group after it
		walking bool // the parser walks the rows that come next
	}{
		{of(&replication.MariadbGTIDEvent{}), 1, false, false},
		{of(&replication.TableMapEvent{}), 1, false, false},
		{of(&replication.RowsEvent{}), 1, true, true},
		{of(&replication.MariadbAnnotateRowsEvent{}), 1, false, true},
		{of(&replication.TableMapEvent{}), 1, false, true},
		{of(&replication.RowsEvent{}), 1, false, true},
		{of(&replication.XIDEvent{}), 2, false, false},
		{of(&replication.TableMapEvent{}), 2, false, false},
		{of(&replication.RowsEvent{}), 2, false, false},
	}
	for i, s := range steps {
		if err := handle(q, s.ev); err != nil {
			t.Fatal(err)
		}
		got, err := q.next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		q.release(got.size)
		if got.group != s.group {
			t.Errorf("event %d (%T): group %d, want %d", i, s.ev.Event, got.group, s.group)
		}
		if s.walkAt {
			q.walkRest(got.group)
		}
		if w := q.walking(); w != s.walking {
			t.Errorf("after event %d (%T): walking %v, want %v", i, s.ev.Event, w, s.walking)
		}
	}
}

// An event of collectBefore bytes or more is followed by a collection
// before go-mysql reads on: it read such an event into a buffer that
// doubled, and allocates the next event's buffer before its next read of
// the connection, beside that garbage unless it is collected (six 16 MiB
// rows peaked 16 MiB higher without it).
func TestEventQueue_CollectsAfterALargeEvent(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(16, 1<<20, &high)
	forced := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(forced)
	before := forced[0].Value.Uint64()
	if err := q.HandleEvent(sizedEvent(collectBefore)); err != nil {
		t.Fatal(err)
	}
	metrics.Read(forced)
	if got := forced[0].Value.Uint64(); got <= before {
		t.Errorf("forced collections %d after HandleEvent of a %d-byte event, want more than %d", got, collectBefore, before)
	}
	q.close()
}
