package poller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// TestPoller_ReadsAtMostMaxBatchBytesPerRound relays 160 rows of 256 KiB
// (40 MiB) with a byte budget of 1 MiB and the default batch of 1000 rows:
// no round may read more payload and header bytes from the database than the
// budget (before, a round read every locked row whole, here all 40 MiB, and
// cut the batch only afterwards). Every row is still delivered once, each
// aggregate in order.
func TestPoller_ReadsAtMostMaxBatchBytesPerRound(t *testing.T) {
	// Its database and Redis database are its own.
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	const (
		rows       = 160
		rowBytes   = 256 << 10
		budget     = 1 << 20
		aggregates = 4
	)
	rec := relaytest.NewProduced()
	pad := strings.Repeat("x", rowBytes)
	seqs := make([]int, aggregates)
	for i := 0; i < rows; i += 8 {
		var b strings.Builder
		var args []any
		b.WriteString("INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for j := i; j < min(rows, i+8); j++ {
			a := j % aggregates
			seqs[a]++
			id := relaytest.MessageID()
			agg := fmt.Sprintf("big-%d", a)
			payload, _ := json.Marshal(map[string]any{"seq": seqs[a], "agg": agg, "text": "héllo \"quoted\" 🙂", "pad": pad})
			if j > i {
				b.WriteByte(',')
			}
			b.WriteString("(?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6))")
			args = append(args, id, agg, string(payload))
			rec.Committed[id] = relaytest.Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: seqs[a]}
		}
		if _, err := env.DB.Exec(b.String(), args...); err != nil {
			t.Fatal(err)
		}
	}

	t.Logf("inserted %d rows of %d KiB", rows, rowBytes>>10)
	p := newPoller(t, env, func(c *Config) { c.MaxBatchBytes = budget })
	var mu sync.Mutex
	peak, rounds := 0, 0
	p.onFetch = func(n int) {
		mu.Lock()
		defer mu.Unlock()
		peak = max(peak, n)
		rounds++
	}
	over := func() int {
		mu.Lock()
		defer mu.Unlock()
		if peak > budget {
			return peak
		}
		return 0
	}
	began := time.Now()
	stop := start(p)
	// 40 rounds of 1 MiB; a loaded machine took over a minute.
	relaytest.WaitFor(t, 3*time.Minute, "every row relayed", func() bool { return over() > 0 || countUnsent(t, env) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := over(); n > 0 {
		t.Fatalf("a round read %d payload and header bytes, more than MaxBatchBytes %d", n, budget)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d rows of %d KiB in %d rounds and %s; at most %d KiB read in one round (budget %d KiB)",
		rows, rowBytes>>10, rounds, time.Since(began).Round(time.Millisecond), peak>>10, budget>>10)
}
