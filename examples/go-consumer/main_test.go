package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

func newClient(t *testing.T, e *exampletest.Env) *redis.Client {
	return e.Redis.Client(t, e.RedisURL)
}

// TestConsumer_EndToEnd runs the relay, the example producer and this
// consumer: every committed event processed once, none rolled back, a
// crashed consumer's entries claimed, a duplicate skipped, a poison message
// dead-lettered.
func TestConsumer_EndToEnd(t *testing.T) {
	ctx := context.Background()
	e := exampletest.NewEnv(t)
	exampletest.StartRelay(t, e)
	rdb := newClient(t, e)

	out, err := exec.Command(exampletest.Build(t, "./examples/go-producer"), "--mysql-dsn", e.DSN, "--orders", "20", "--rollback-every", "3").Output()
	if err != nil {
		t.Fatalf("go-producer: %v\n%s", err, out)
	}
	produced := exampletest.ParseProducerOutput(t, string(out))
	relaytest.WaitFor(t, 30*time.Second, "the relay to append the committed events", func() bool {
		return rdb.XLen(ctx, DefaultStream).Val() >= int64(len(produced.Committed))
	})

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	cfg := Config{Group: "billing", Consumer: "survivor", MaxDeliveries: 3, MinIdle: 300 * time.Millisecond}
	c := NewConsumer(e.DB, rdb, cfg, handleOrderEvent, logger)
	if err := c.EnsureGroup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureGroup(ctx); err != nil {
		t.Fatalf("EnsureGroup on an existing group (BUSYGROUP must be ignored): %v", err)
	}

	// A consumer reads three entries and crashes before it processes them:
	// they stay pending under its name.
	crashed, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "crashed", Streams: []string{DefaultStream, ">"}, Count: 3, Block: -1}).Result()
	if err != nil || len(crashed) != 1 || len(crashed[0].Messages) != 3 {
		t.Fatalf("XREADGROUP as the crashing consumer: %v %v", crashed, err)
	}

	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := c.Run(runCtx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Claimed != 3 || st.Processed != len(produced.Committed) || st.Duplicates != 0 || st.Failed != 0 {
		t.Errorf("first run: %+v, want 3 claimed, %d processed, no duplicates, no failures", st, len(produced.Committed))
	}
	processed := exampletest.ProcessedIDs(t, e.DB, "billing")
	exampletest.CheckExactlyOnce(t, processed, produced)
	for _, m := range crashed[0].Messages {
		if got := processed[m.Values["message_id"].(string)]; got != "survivor" {
			t.Errorf("entry %s of the crashed consumer processed by %q, want it claimed by survivor", m.ID, got)
		}
	}

	// A second delivery of a processed event (what a relay in poll mode
	// without a dedupe window, or a consumer crash after COMMIT, produces),
	// and a poison message whose processing always fails.
	first := rdb.XRangeN(ctx, DefaultStream, "-", "+", 1).Val()[0]
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: DefaultStream, Values: first.Values})
	poison := map[string]any{}
	for k, v := range first.Values {
		poison[k] = v
	}
	poison["message_id"] = "01POISON000000000000000000"
	poison["payload"] = "{not json"
	poisonID := rdb.XAdd(ctx, &redis.XAddArgs{Stream: DefaultStream, Values: poison}).Val()

	st, err = c.Run(runCtx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processed != 0 || st.Duplicates != 1 || st.DeadLettered != 1 || st.Failed != 3 {
		t.Errorf("second run: %+v, want 1 duplicate skipped, the poison message failing 3 times and dead-lettered", st)
	}
	if n := len(exampletest.ProcessedIDs(t, e.DB, "billing")); n != len(produced.Committed) {
		t.Errorf("inbox has %d rows after the duplicate, want %d", n, len(produced.Committed))
	}
	dead := rdb.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["source_entry_id"] != poisonID || !strings.Contains(dead[0].Values["reason"].(string), "failed 3 times") ||
		dead[0].Values["message_id"] != "01POISON000000000000000000" {
		t.Errorf("dead-letter stream: %v, want the poison entry %s with a reason", dead, poisonID)
	}
	if n, err := c.Pending(ctx); err != nil || n != 0 {
		t.Errorf("pending after the runs: %d (%v), want 0", n, err)
	}
}

// TestConsumer_Binary runs the command as users do, with --drain.
func TestConsumer_Binary(t *testing.T) {
	e := exampletest.NewEnv(t)
	exampletest.StartRelay(t, e)
	rdb := newClient(t, e)
	out, err := exec.Command(exampletest.Build(t, "./examples/go-producer"), "--mysql-dsn", e.DSN, "--orders", "4").Output()
	if err != nil {
		t.Fatalf("go-producer: %v", err)
	}
	produced := exampletest.ParseProducerOutput(t, string(out))
	relaytest.WaitFor(t, 30*time.Second, "delivery", func() bool {
		return rdb.XLen(context.Background(), DefaultStream).Val() >= int64(len(produced.Committed))
	})
	cmd := exec.Command(exampletest.Build(t, "./examples/go-consumer"), "--mysql-dsn", e.DSN, "--redis-url", e.RedisURL, "--group", "cli", "--drain")
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go-consumer: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), fmt.Sprintf("processed=%d ", len(produced.Committed))) {
		t.Errorf("go-consumer output %q, want processed=%d", got, len(produced.Committed))
	}
	exampletest.CheckExactlyOnce(t, exampletest.ProcessedIDs(t, e.DB, "cli"), produced)
}

func TestHandleOrderEvent(t *testing.T) {
	for _, tc := range []struct {
		payload string
		wantErr bool
	}{
		{`{"order_id":1}`, false},
		{`{not json`, true},
		{`[1,2]`, true},
	} {
		err := handleOrderEvent(context.Background(), (*sql.Tx)(nil), Event{Payload: tc.payload})
		if (err != nil) != tc.wantErr {
			t.Errorf("handleOrderEvent(%q) = %v, want error %v", tc.payload, err, tc.wantErr)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
