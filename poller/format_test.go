package poller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// sizedSink is the Redis sink, recording the sizes of the batches it is
// given.
type sizedSink struct {
	*redisstream.Sink
	mu      sync.Mutex
	batches []int // total Event.Size of each batch
	dead    int
}

func (s *sizedSink) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	total := 0
	s.mu.Lock()
	for i := range events {
		total += events[i].Size()
		if events[i].Invalid != "" {
			s.dead++
		}
	}
	s.batches = append(s.batches, total)
	s.mu.Unlock()
	return s.Sink.Publish(ctx, events)
}

// TestPoller_MessengerEnvelopesCount: in the symfony-messenger format the
// envelope, which holds the payload once more, counts for MaxBatchBytes, and
// an event type without a class is a dead letter that the poller counts.
func TestPoller_MessengerEnvelopesCount(t *testing.T) {
	env := newEnv(t)
	const (
		rows     = 12
		rowBytes = 8 << 10
		budget   = 40 << 10
	)
	pad := strings.Repeat("x", rowBytes)
	for i := range rows {
		typ := "order.changed"
		if i == 5 {
			typ = "order.refunded"
		}
		if _, err := env.DB.Exec("INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES (?, 'order', 'o-1', ?, ?, UTC_TIMESTAMP(6))",
			relaytest.MessageID(), typ, fmt.Sprintf(`{"seq":%d,"pad":%q}`, i, pad)); err != nil {
			t.Fatal(err)
		}
	}
	sink := &sizedSink{Sink: newPublisher(t, env.RedisURL, redisstream.Config{
		Stream: "messages",
		Format: entry.Format{Name: entry.FormatMessenger, Classes: map[string]string{"order.changed": `App\Message\OrderChanged`}},
	})}
	p, err := New(env.RelayDB(t), sink, Config{Database: env.Database, Table: env.Table, MaxBatchBytes: budget, PollInterval: 50 * time.Millisecond}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(p)
	relaytest.WaitFor(t, 60*time.Second, "every row relayed", func() bool { return countUnsent(t, env) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i, n := range sink.batches {
		if n > budget {
			t.Errorf("batch %d holds %d bytes, more than MaxBatchBytes %d", i, n, budget)
		}
	}
	if got := env.RDB.XLen(context.Background(), "messages").Val(); got != rows-1 {
		t.Errorf("messages has %d entries, want %d", got, rows-1)
	}
	if st := p.Stats(); st.DeadLetters != 1 || sink.dead != 1 {
		t.Errorf("DeadLetters %d, %d dead letters published; want the unmapped event counted once", st.DeadLetters, sink.dead)
	}
	t.Logf("%d rows of %d KiB in %d batches of at most %d KiB", rows, rowBytes>>10, len(sink.batches), budget>>10)
}
