package canal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// faultySink wraps the real Redis sink and fails some appends, before or after
// the real append ran: the second kind is what a connection loss after Redis
// applied the script looks like to the relay.
type faultySink struct {
	outbox.Sink
	mu        sync.Mutex
	rng       *rand.Rand
	failRatio float64
	failures  atomic.Int64
	// failAfter, when > 0, fails only the failAfter-th append (after running it).
	failAfter int64
	// minFaults appends that carry events fail (before and after the real
	// append, in turn) before the random ones: so many faults are
	// injected however few batches a loaded machine makes of the rows.
	minFaults int64
	calls     atomic.Int64
}

var errInjected = errors.New("injected fault")

func (s *faultySink) Append(ctx context.Context, events []outbox.Event, prev, next []byte) error {
	n := s.calls.Add(1)
	if s.failAfter > 0 {
		if n == s.failAfter {
			if err := s.Sink.Append(ctx, events, prev, next); err != nil {
				return err
			}
			s.failures.Add(1)
			return errInjected
		}
		return s.Sink.Append(ctx, events, prev, next)
	}
	s.mu.Lock()
	roll, after := s.rng.Float64(), s.rng.IntN(2) == 0
	s.mu.Unlock()
	if f := s.failures.Load(); len(events) > 0 && f < s.minFaults {
		roll, after = 0, f%2 == 1
	}
	if roll >= s.failRatio {
		return s.Sink.Append(ctx, events, prev, next)
	}
	s.failures.Add(1)
	if after {
		if err := s.Sink.Append(ctx, events, prev, next); err != nil {
			return err
		}
	}
	return errInjected
}

func TestReader_ExactlyOnceUnderAppendFaults(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, sink := newReader(t, env, func(c *Config) { c.MaxBackoff = 20 * time.Millisecond })
	// On a loaded machine the relay falls behind and appends in a few
	// large batches, so random faults would be few: the first five batches'
	// appends fail whatever the dice say.
	fs := &faultySink{Sink: sink, rng: rand.New(rand.NewPCG(1, 2)), failRatio: 0.3, minFaults: 5}
	r.sink = fs
	stop := startReader(r)
	waitStarted(t, r)
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 80, Pause: time.Millisecond}, rec)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(200 * time.Millisecond) // a duplicate would show up now
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fs.failures.Load() < 5 {
		t.Fatalf("only %d faults injected; the test proves nothing", fs.failures.Load())
	}
	t.Logf("%d faults injected, %d sessions", fs.failures.Load(), r.Stats().Sessions)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

func TestReader_LargeTransactionInChunks(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, sink := newReader(t, env, func(c *Config) {
		c.MaxTxBytes = 64 << 10
		c.MaxBatchEvents = 100
		c.MaxBackoff = 20 * time.Millisecond
		// Less read ahead than the transaction: the first read walks
		// what it parses after the overflow.
		c.EventCacheBytes = 64 << 10
	})
	// The 5th append (a chunk in the middle of the big transaction) fails
	// after it happened: the resume must skip the rows it already appended.
	fs := &faultySink{Sink: sink, failAfter: 5}
	r.sink = fs
	stop := startReader(r)
	waitStarted(t, r)

	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 3, RollbackRatio: 0.0001}, rec)
	const rows = 3000
	insertBigTx(t, env, rows, rec)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 3, RollbackRatio: 0.0001}, rec)

	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(200 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fs.failures.Load() != 1 {
		t.Fatalf("injected %d faults, want 1", fs.failures.Load())
	}
	if s := r.Stats(); s.Batches < rows/100 {
		t.Errorf("%d batches for a %d-row transaction with 100-event batches: not chunked", s.Batches, rows)
	}
	if s := r.Stats(); s.RowsWalked == 0 || s.RowsWalked >= rows {
		t.Errorf("%d rows walked by the first read of a %d-row transaction over --max-tx-bytes; want most of them", s.RowsWalked, rows)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// insertBigTx inserts n rows of one aggregate in one transaction.
func insertBigTx(t testing.TB, env *relaytest.Env, n int, rec *relaytest.Produced) {
	t.Helper()
	tx, err := env.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	agg := fmt.Sprintf("big-%d", time.Now().UnixNano())
	const chunk = 500
	for i := 0; i < n; i += chunk {
		var sb strings.Builder
		args := []any{}
		sb.WriteString("INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for j := i; j < min(n, i+chunk); j++ {
			if j > i {
				sb.WriteString(",")
			}
			sb.WriteString("(?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6))")
			id := relaytest.MessageID()
			args = append(args, id, agg, fmt.Sprintf(`{"seq":%d,"agg":%q,"text":"héllo \"quoted\" 🙂"}`, j+1, agg))
			rec.Committed[id] = relaytest.Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: j + 1}
		}
		if _, err := tx.Exec(sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestReader_AlterTableMidStream(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	_, _, stop := startedReader(t, env, nil)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	// While running: a column appears in front of the payload.
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox ADD COLUMN tenant VARCHAR(20) NOT NULL DEFAULT 't1' AFTER event_type")
	produceDelivered(ctx, t, env, rec, 10)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// While stopped: rows written before and after two more ALTERs are read
	// by a relay that starts with the final table.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox DROP COLUMN tenant, ADD COLUMN region CHAR(2) NULL FIRST, MODIFY aggregate_id VARCHAR(300) NOT NULL")
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	resumeChecked(ctx, t, env, rec)
}

func TestReader_StatementFormatInsertIsReported(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, _ := newReader(t, env, nil)
	stop := startReader(r)
	defer stop()
	waitStarted(t, r)
	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"SET SESSION binlog_format = 'STATEMENT'",
		"INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-1', 'order', 'o1', 'order.lost', '{}')",
		"SET SESSION binlog_format = 'ROW'",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5, RollbackRatio: 0.0001}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if got := r.Stats().StatementDML; got != 1 {
		t.Fatalf("StatementDML = %d, want 1", got)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

func TestReader_PurgedBinlogRefusesToStart(t *testing.T) {
	// Its MariaDB is its own.
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	_, _, stop := startedReader(t, env, nil)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 3}, rec)
	// MariaDB keeps a binlog until InnoDB has made its commits durable (the
	// binlog checkpoint), so purging may need a few tries.
	relaytest.WaitFor(t, 30*time.Second, "PURGE BINARY LOGS to remove the relay's file", func() bool {
		srv.Exec(t, "FLUSH BINARY LOGS")
		var names []string
		rows, err := env.DB.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			var size any
			if err := rows.Scan(&name, &size); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		rows.Close()
		if names[0] != "mysql-bin.000001" {
			return true
		}
		srv.Exec(t, "PURGE BINARY LOGS TO '"+names[len(names)-1]+"'")
		return false
	})

	r2, _ := newReader(t, env, nil)
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := r2.Run(ctx2)
	if !errors.Is(err, outbox.ErrPositionGone) {
		t.Fatalf("Run after purge returned %v, want ErrPositionGone", err)
	}
	hint := outbox.HintOf(err)
	for _, want := range []string{"--start-from earliest", "--start-from now", "binlog_expire_logs_seconds"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not mention %s", hint, want)
		}
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Errorf("%d entries appended after a purge, want 0 (never skip silently)", n)
	}
}

// TestReader_RedisOutOfMemoryLosesNothing holds Redis at maxmemory
// (noeviction) under a relay retrying every 100ms for 20 sessions: nothing
// is appended, the position stays, the log holds a bounded number of ERROR
// lines with the hint once, and everything arrives, once, when memory is
// freed.
func TestReader_RedisOutOfMemoryLosesNothing(t *testing.T) {
	rs := testsvc.StartRedis(t, testsvc.RedisOptions{})
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), rs)
	ctx := context.Background()
	logs := &relaytest.Logs{}
	r, _ := newReaderLogging(t, env, func(c *Config) { c.MaxBackoff = 100 * time.Millisecond }, logs.Logger())
	stop := startReader(r)
	waitStarted(t, r)

	// Fill Redis to maxmemory with other data, then produce.
	relaytest.FillRedis(ctx, t, env)
	posBefore, _ := r.sink.Position(ctx)
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	// Twenty sessions, however long a loaded machine takes for them,
	// within the 30s after which a repeated error is logged again.
	relaytest.WaitFor(t, 25*time.Second, "20 sessions refused by Redis", func() bool { return r.Stats().Sessions >= 20 })
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Fatalf("%d entries appended at maxmemory", n)
	}
	if posAfter, _ := r.sink.Position(ctx); string(posAfter) != string(posBefore) {
		t.Fatalf("position moved while Redis refused the appends:\n%s\n%s", posBefore, posAfter)
	}
	// The first failed attempt is logged, the repeats are counted until
	// the next line RepeatEvery later.
	errLines := logs.Lines("ERROR")
	if len(errLines) == 0 || len(errLines) > 2 {
		t.Errorf("%d ERROR lines in %d sessions refused by Redis OOM, want 1 or 2:\n%s", len(errLines), r.Stats().Sessions, logs.String())
	}
	const hint = "Redis reached maxmemory"
	if n := strings.Count(logs.String(), hint); n != 1 {
		t.Errorf("the OOM hint appears %d times in the log, want once:\n%s", n, logs.String())
	}
	// Memory freed: everything arrives, once, and the log says so.
	env.RDB.ConfigSet(ctx, "maxmemory", "0")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopChecked(ctx, t, env, rec, stop)
	if !strings.Contains(logs.String(), `"msg":"recovered"`) {
		t.Errorf("no line says the reader recovered:\n%s", logs.String())
	}
}

func TestReader_PositionOfAnotherServerRefused(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	_, sink, stop := startedReader(t, env, nil)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	raw, _ := sink.Position(ctx)
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	// A file position, as a server without GTIDs has, written against the
	// old primary before a failover.
	b.GTIDSet, b.EmptyGTIDSet, b.LastGTID = "", false, ""
	b.ServerID += 1000
	if err := sink.SetPosition(ctx, b.Encode()); err != nil {
		t.Fatal(err)
	}
	r2, _ := newReader(t, env, nil)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = r2.Run(rctx)
	if !errors.Is(err, outbox.ErrPositionGone) || !strings.Contains(err.Error(), "server-local") || outbox.HintOf(err) == "" {
		t.Fatalf("Run with another server's position returned %v, want ErrPositionGone explaining it, with a hint", err)
	}
}

func TestReader_ServerIDClashIsAClearError(t *testing.T) {
	// Its database and Redis database are its own, its server id too.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	id := uint32(2900 + serverIDs.next())
	r1, _ := newReader(t, env, func(c *Config) { c.ServerID = id; c.ServerIDClashGrace = time.Second })
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	done1 := make(chan error, 1)
	go func() { done1 <- r1.Run(ctx1) }()
	waitStarted(t, r1)
	time.Sleep(200 * time.Millisecond)
	// Another relay (another table, another position key) with the same id.
	env2 := relaytest.NewEnv(t, env.MariaDB, testsvc.SharedRedis(t))
	r2, _ := newReader(t, env2, func(c *Config) { c.ServerID = id; c.ServerIDClashGrace = time.Second })
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done2 := make(chan error, 1)
	go func() { done2 <- r2.Run(ctx2) }()
	// The server drops the older connection with "same server_id".
	var err error
	select {
	case err = <-done1:
	case err = <-done2:
	case <-time.After(30 * time.Second):
		t.Fatal("neither relay reported the server id clash within 30s")
	}
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), "--server-id") {
		t.Fatalf("clash error %v (hint %q), want ErrConfig with a --server-id hint", err, outbox.HintOf(err))
	}
}
