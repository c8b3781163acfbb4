package canal

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// batchSizes wraps the real Redis sink and records the events of each
// append.
type batchSizes struct {
	outbox.Sink
	mu    sync.Mutex
	sizes []int
}

func (s *batchSizes) Append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(events))
	s.mu.Unlock()
	return s.Sink.Append(ctx, events, prev, next)
}

// Transactions received together (a group commit of several producers
// arrives in one read) go in one batch while the flusher is idle: handing
// the first over alone kept the others waiting for its whole append, which
// made the relay's p99 flat out the time of two appends where the minimal
// relay's was one (binlog-outbox-bench --workloads live-flat).
func TestRelayLoop_TransactionsReceivedTogetherShareABatch(t *testing.T) {
	client, err := redisconn.NewClient(testsvc.SharedRedis(t).NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	real, err := redisstream.New(client, redisstream.Config{PositionKey: "binlog-outbox:position:app.outbox"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &batchSizes{Sink: real}
	r := &Reader{
		cfg:   Config{Flavor: position.FlavorMariaDB, MaxBatchEvents: DefaultMaxBatchEvents, MaxBatchBytes: DefaultMaxBatchBytes, IdleCheckpoint: time.Hour},
		sink:  sink,
		log:   testLogger(t),
		retry: retry.New(testLogger(t), retry.Config{}),
	}

	// Three single-row transactions, handed to the reader as go-mysql's
	// reading goroutine hands over what one read of the connection held.
	var high atomic.Int64
	q := newEventQueue(DefaultEventCacheCount, DefaultEventCacheBytes, &high)
	tm := binlogtest.OutboxTableMap(true)
	for i := range 3 {
		pos := uint32(1000 * (i + 1))
		for _, e := range []*replication.BinlogEvent{
			ev(pos, mariaGTID(uint64(10+i))), ev(pos+100, tm),
			ev(pos+200, insert(t, tm, binlogtest.OutboxRow(int64(i+1), "p"))), ev(pos+300, xid(nil)),
		} {
			if err := q.HandleEvent(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.handOverHeld(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFlusher(sink, nil, r.encode, r.recordBatch, cancel)
	m := newHarness(t, nil).m
	m.prepare = sink.Prepare
	start := m.pending.at
	m.pending = f.take()
	m.pending.at = start
	m.flushTo(f)
	st := &stream{q: q, wd: &watchdog{bytes: &atomic.Uint64{}}, cancel: cancel}
	l := &relayLoop{r: r, st: st, f: f, m: m, lastFlush: time.Now()}
	var wg sync.WaitGroup
	wg.Go(func() { f.loop(ctx) })
	wg.Go(func() { _ = l.run(ctx) })

	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().Events < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if got := r.Stats().Events; got != 3 {
		t.Fatalf("got %d events appended, want 3", got)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if want := []int{3}; !slices.Equal(sink.sizes, want) {
		t.Errorf("got appends of %v events, want %v: the transactions were received together", sink.sizes, want)
	}
}
