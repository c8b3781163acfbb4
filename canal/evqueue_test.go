package canal

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

func sizedEvent(size int) *replication.BinlogEvent {
	return &replication.BinlogEvent{RawData: make([]byte, size), Event: &replication.GenericEvent{}}
}

// handleAsync runs HandleEvent as go-mysql's reading goroutine would.
func handleAsync(q *eventQueue, e *replication.BinlogEvent) <-chan error {
	done := make(chan error, 1)
	go func() { done <- q.HandleEvent(e) }()
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
	if err := q.HandleEvent(sizedEvent(60)); err != nil {
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
	if err := q.HandleEvent(sizedEvent(100)); err != nil {
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
	if err := q.HandleEvent(sizedEvent(10)); err != nil {
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

func eventOf(e replication.Event, size int) *replication.BinlogEvent {
	return &replication.BinlogEvent{RawData: make([]byte, size), Header: &replication.EventHeader{}, Event: e}
}

// A transaction's events reach the reader together, at the event that may
// end it; a long one in groups of maxHeld.
func TestEventQueue_HandsOverGroups(t *testing.T) {
	var high atomic.Int64
	q := newEventQueue(256, 1<<20, &high)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	inside := []*replication.BinlogEvent{
		eventOf(&replication.MariadbGTIDEvent{}, 10), eventOf(&replication.MariadbAnnotateRowsEvent{}, 10),
		eventOf(&replication.TableMapEvent{}, 10), eventOf(&replication.RowsEvent{}, 10),
	}
	for _, e := range inside {
		if err := q.HandleEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	if e, err := q.next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next before the transaction's end: %+v, %v; want nothing yet", e, err)
	}
	if err := q.HandleEvent(eventOf(&replication.XIDEvent{}, 10)); err != nil {
		t.Fatal(err)
	}
	for i := range len(inside) + 1 {
		e, err := q.next(context.Background())
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if i < len(inside) && e.ev != inside[i] {
			t.Fatalf("event %d is %T, want %T", i, e.ev.Event, inside[i].Event)
		}
		q.release(e.size)
	}
	for range maxHeld {
		if err := q.HandleEvent(eventOf(&replication.RowsEvent{}, 10)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxHeld {
		e, err := q.next(context.Background())
		if err != nil {
			t.Fatalf("row event %d of a long transaction: %v", i, err)
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
		if err := q.HandleEvent(eventOf(&replication.RowsEvent{}, 10)); err != nil {
			t.Fatal(err)
		}
	}
	// A fourth event exceeds the count: the three go to the reader, and
	// the fourth waits until it released one.
	done := handleAsync(q, eventOf(&replication.XIDEvent{}, 10))
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
