package poller

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The conformance cases wait on their servers and faults far more than on
// the CPU: more of them run at a time than the machine has cores.
func TestMain(m *testing.M) { testsvc.MainParallel(m, 6) }

// testLogger shows the relay's logs with -v, and its last lines when the
// test fails (relaytest.TestLogger).
func testLogger(t testing.TB) *slog.Logger { return relaytest.TestLogger(t) }

func newEnv(t testing.TB) *relaytest.Env {
	return relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
}

// newPoller builds a poller for env with overrides applied to its config.
func newPoller(t testing.TB, env *relaytest.Env, tweak func(*Config)) *Poller {
	t.Helper()
	return newPollerWindow(t, env, 0, tweak)
}

// newPollerWindow builds a poller for env whose publisher has the dedupe
// window (0: none), as `run` builds it for the table.
func newPollerWindow(t testing.TB, env *relaytest.Env, window time.Duration, tweak func(*Config)) *Poller {
	t.Helper()
	cfg := Config{Database: env.Database, Table: env.Table, Mapping: env.Mapping, Extra: env.Extra,
		MaxBackoff: 200 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	m := cfg.Mapping
	if m == nil {
		m = schema.DefaultMapping()
	}
	sc := redisstream.Config{
		NoAggregateType: !m.Has(schema.ColAggregateType), NoHeaders: !m.Has(schema.ColHeaders),
		Dedupe: redisstream.Dedupe{Window: window, KeyPrefix: redisstream.KeysFor(env.Database, env.Table, "").DedupePrefix},
	}
	if env.Prefix != relaytest.DefaultPrefix {
		sc.Stream, sc.DeadLetterStream = env.Prefix+"{aggregate_type}", env.Prefix+"dead-letter"
	}
	var pub *redisstream.Sink
	if env.Topology.Redis == relaytest.Cluster {
		o, err := redis.ParseClusterURL(env.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		client := redisconn.NewClusterClientFromOptions(o)
		t.Cleanup(func() { client.Close() })
		sc.Cluster = true
		if pub, err = redisstream.New(client, sc); err != nil {
			t.Fatal(err)
		}
	} else {
		pub = newPublisher(t, env.RedisURL, sc)
	}
	p, err := New(env.RelayDB(t), pub, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newPublisher returns the Redis sink at url as a poll-mode publisher.
func newPublisher(t testing.TB, url string, cfg redisstream.Config) *redisstream.Sink {
	t.Helper()
	client, err := redisconn.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sink, err := redisstream.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

// start runs p in the background; stop cancels it and returns Run's error.
func start(p *Poller) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func TestPoller_Conformance(t *testing.T) {
	// Every case has its own database, Redis database or stream prefix,
	// and proxies (relaytest.RunSuiteOn).
	t.Parallel()
	features := relaytest.Features{PerAggregateOrder: true, DeadLettersInvalidJSON: true, PromptStopOnDeadMySQLLink: true}
	dedupe := features
	dedupe.AtLeastOnceWithDedupe = true
	standalone := relaytest.Topology{Redis: relaytest.Standalone}
	sentinel := relaytest.Topology{Redis: relaytest.Sentinel}
	cluster := relaytest.Topology{Redis: relaytest.Cluster}
	// Poll mode has no lease: a second poller shares the work (SKIP
	// LOCKED) instead of standing by.
	for _, tt := range []struct {
		name     string
		window   time.Duration
		tweak    func(*Config)
		features relaytest.Features
		on       []relaytest.Topology
	}{
		{"AtLeastOnce", 0, nil, features, []relaytest.Topology{standalone, sentinel, cluster}},
		{"DedupeWindow", time.Hour, nil, dedupe, []relaytest.Topology{standalone, sentinel, cluster}},
		{"DeleteMode", 0, func(c *Config) { c.OnSent = OnSentDelete }, features, []relaytest.Topology{standalone}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, tp := range tt.on {
				t.Run(tp.String(), func(t *testing.T) {
					t.Parallel()
					relaytest.RunSuiteOn(t, tp, func(t *testing.T, env *relaytest.Env) func() error {
						return start(newPollerWindow(t, env, tt.window, tt.tweak))
					}, tt.features)
				})
			}
		})
	}
}

// backlogRows is the size of the concurrency test's backlog: 100,000 by
// default, 20,000 under -race (which slows the relay about tenfold), or
// BINLOG_OUTBOX_TEST_BACKLOG.
func backlogRows(t testing.TB) int {
	if s := os.Getenv("BINLOG_OUTBOX_TEST_BACKLOG"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BINLOG_OUTBOX_TEST_BACKLOG=%q is not a positive number", s)
		}
		return n
	}
	if raceEnabled || testing.Short() {
		return 20000
	}
	return 100000
}

// insertBacklog writes n committed rows with multi-row INSERTs: aggregates
// interleave (row i belongs to aggregate i mod aggregates), and each
// aggregate's seq grows with its ids. The rows are recorded in rec in the
// shape relaytest.Produce writes, so that relaytest.Check verifies them.
func insertBacklog(t testing.TB, db *sql.DB, table string, n, aggregates int, rec *relaytest.Produced) {
	t.Helper()
	const perInsert = 1000
	seqs := make([]int, aggregates)
	var b strings.Builder
	for done := 0; done < n; {
		b.Reset()
		b.WriteString("INSERT INTO `" + table + "` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for j := 0; j < perInsert && done < n; j, done = j+1, done+1 {
			a := done % aggregates
			typ := [2]string{"order", "invoice"}[a%2]
			agg := fmt.Sprintf("backlog-%d", a)
			seqs[a]++
			id := relaytest.MessageID()
			payload, _ := json.Marshal(map[string]any{"seq": seqs[a], "agg": agg, "text": "héllo \"quoted\" 🙂"})
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s','%s','%s','%s.changed','%s','{}',UTC_TIMESTAMP(6))", id, typ, agg, typ,
				strings.ReplaceAll(strings.ReplaceAll(string(payload), `\`, `\\`), `'`, `\'`))
			rec.Committed[id] = relaytest.Sent{AggregateType: typ, AggregateID: agg, EventType: typ + ".changed", Seq: seqs[a]}
		}
		if _, err := db.Exec(b.String()); err != nil {
			t.Fatalf("insert backlog: %v", err)
		}
	}
}

// TestPoller_ConcurrentRelaysKeepAggregateOrder runs three relays on a
// backlog of interleaved aggregates while producers keep writing: every row
// relayed once (dedupe window on), none lost, each aggregate in order.
func TestPoller_ConcurrentRelaysKeepAggregateOrder(t *testing.T) {
	// Its database and Redis database are its own.
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	n := backlogRows(t)
	rec := relaytest.NewProduced()
	began := time.Now()
	insertBacklog(t, env.DB, env.Table, n, 97, rec)
	t.Logf("inserted %d rows in %s", n, time.Since(began).Round(time.Millisecond))

	began = time.Now()
	var pollers []*Poller
	var stops []func() error
	for i := 0; i < 3; i++ {
		p := newPollerWindow(t, env, time.Hour, nil)
		pollers = append(pollers, p)
		stops = append(stops, start(p))
	}
	// More rows while the backlog drains, from producers that own their
	// aggregates and roll some transactions back.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 40}, rec)
	want := len(rec.Committed)
	relaytest.WaitFor(t, 120*time.Second, "all rows relayed", func() bool {
		var unsent int
		err := env.DB.QueryRow("SELECT COUNT(*) FROM `" + env.Table + "` WHERE sent_at IS NULL").Scan(&unsent)
		return err == nil && unsent == 0
	})
	elapsed := time.Since(began)
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatalf("relay returned %v after a clean stop", err)
		}
	}
	got := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	if got != want {
		t.Errorf("streams hold %d entries, want %d", got, want)
	}
	var events, deferred, dups uint64
	for i, p := range pollers {
		s := p.Stats()
		t.Logf("relay %d: %+v", i, s)
		events += s.Events
		deferred += s.Deferred
		dups += s.Duplicates
	}
	if events != uint64(want) || dups != 0 {
		t.Errorf("relays relayed %d rows with %d duplicates, want %d and 0", events, dups, want)
	}
	t.Logf("3 relays: %d rows in %s (%.0f rows/s), %d deferrals for order", want, elapsed.Round(time.Millisecond),
		float64(want)/elapsed.Seconds(), deferred)
}

// TestPoller_DefersBehindForeignLock shows the ordering rule on its own: while
// another transaction holds an aggregate's first unsent row, the aggregate's
// later rows wait; other aggregates do not.
func TestPoller_DefersBehindForeignLock(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	for i, agg := range []string{"a", "a", "b", "a"} {
		insertRow(t, env.DB, env.Table, fmt.Sprintf("m%d", i+1), "order", agg, `{"n":`+strconv.Itoa(i+1)+`}`)
	}
	// Another relay's transaction holds row 1 (aggregate a).
	other, err := env.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	var id int
	if err := other.QueryRow("SELECT id FROM `" + env.Table + "` WHERE id = 1 FOR UPDATE").Scan(&id); err != nil {
		t.Fatal(err)
	}
	p := newPoller(t, env, nil)
	n, err := p.Step(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Step() with row 1 locked = %d, %v; want 1 (only aggregate b), nil", n, err)
	}
	if s := p.Stats(); s.Deferred != 2 {
		t.Errorf("Stats().Deferred = %d, want 2 (rows 2 and 4 of aggregate a)", s.Deferred)
	}
	if got := messageIDs(t, env.RDB, "outbox:order"); strings.Join(got, ",") != "m3" {
		t.Errorf("stream holds %v, want [m3]", got)
	}
	other.Rollback()
	n, err = p.Step(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Step() after the lock is gone = %d, %v; want 3, nil", n, err)
	}
	if got := messageIDs(t, env.RDB, "outbox:order"); strings.Join(got, ",") != "m3,m1,m2,m4" {
		t.Errorf("stream holds %v, want [m3 m1 m2 m4]", got)
	}
}

func insertRow(t testing.TB, db *sql.DB, table, messageID, typ, agg, payload string) {
	t.Helper()
	_, err := db.Exec("INSERT INTO `"+table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, ?, ?, ?, ?, NULL, UTC_TIMESTAMP(6))",
		messageID, typ, agg, typ+".changed", payload)
	if err != nil {
		t.Fatal(err)
	}
}

func messageIDs(t testing.TB, rdb *redis.Client, stream string) []string {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, m := range msgs {
		ids = append(ids, fmt.Sprint(m.Values["message_id"]))
	}
	return ids
}

// TestPoller_CrashBetweenAppendAndCommit kills the relay's database
// connection after the append and before the COMMIT: the rows stay unsent and
// the next round appends them again, unless the dedupe window remembers them.
func TestPoller_CrashBetweenAppendAndCommit(t *testing.T) {
	for _, tt := range []struct {
		name        string
		window      time.Duration
		wantEntries int
	}{
		{"AtLeastOnce", 0, 20},
		{"DedupeWindow", time.Hour, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			ctx := context.Background()
			for i := 1; i <= 10; i++ {
				insertRow(t, env.DB, env.Table, fmt.Sprintf("m%02d", i), "order", "a"+strconv.Itoa(i%3), `{"n":1}`)
			}
			p := newPollerWindow(t, env, tt.window, nil)
			p.afterPublish = func(ctx context.Context, tx *sql.Tx) error {
				var conn int64
				if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
					return err
				}
				_, err := env.DB.Exec("KILL " + strconv.FormatInt(conn, 10))
				return err
			}
			if n, err := p.Step(ctx); err == nil {
				t.Fatalf("Step() with the connection killed = %d, nil; want an error", n)
			}
			var unsent int
			if err := env.DB.QueryRow("SELECT COUNT(*) FROM `" + env.Table + "` WHERE sent_at IS NULL").Scan(&unsent); err != nil || unsent != 10 {
				t.Fatalf("after the crash %d rows unsent (err %v), want 10", unsent, err)
			}
			p.afterPublish = nil
			// The killed session's rollback may still hold the row locks
			// for a moment; SKIP LOCKED then finds nothing yet.
			n, err := p.Step(ctx)
			for deadline := time.Now().Add(5 * time.Second); err == nil && n == 0 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				n, err = p.Step(ctx)
			}
			if err != nil || n != 10 {
				t.Fatalf("Step() after the crash = %d, %v; want 10, nil", n, err)
			}
			if got := relaytest.CountEntries(ctx, env.RDB, "outbox:"); got != tt.wantEntries {
				t.Errorf("streams hold %d entries, want %d", got, tt.wantEntries)
			}
			if got, want := p.Stats().Duplicates, uint64(20-tt.wantEntries); got != want {
				t.Errorf("Stats().Duplicates = %d, want %d", got, want)
			}
			// The re-appended stream still has every aggregate in order.
			last := map[string]int{}
			seen := map[string]bool{}
			for _, m := range env.RDB.XRange(ctx, "outbox:order", "-", "+").Val() {
				id := fmt.Sprint(m.Values["message_id"])
				if seen[id] {
					continue
				}
				seen[id] = true
				agg := fmt.Sprint(m.Values["aggregate_id"])
				n, _ := strconv.Atoi(id[1:])
				if n < last[agg] {
					t.Errorf("aggregate %s: %s after m%02d", agg, id, last[agg])
				}
				last[agg] = n
			}
		})
	}
}

// TestPoller_DeadLetters: rows with a NULL in a required column, a payload
// that is not JSON or too large go to the dead-letter stream with the reason,
// are marked, and do not hold back the rows behind them.
func TestPoller_DeadLetters(t *testing.T) {
	for _, onSent := range []string{OnSentMark, OnSentDelete} {
		t.Run(onSent, func(t *testing.T) {
			env := newEnv(t)
			ctx := context.Background()
			// A table whose constraints let bad rows in, as old ones do.
			if _, err := env.DB.Exec("ALTER TABLE `" + env.Table + "` MODIFY event_type VARCHAR(255) NULL, MODIFY payload LONGTEXT NULL"); err != nil {
				t.Fatal(err)
			}
			insertRow(t, env.DB, env.Table, "good1", "order", "a", `{"n":1}`)
			if _, err := env.DB.Exec("INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('nulltype', 'order', 'a', NULL, '{}')"); err != nil {
				t.Fatal(err)
			}
			insertRow(t, env.DB, env.Table, "notjson", "order", "b", `{"n":`)
			insertRow(t, env.DB, env.Table, "big", "order", "a", `{"s":"`+strings.Repeat("x", 300)+`"}`)
			if _, err := env.DB.Exec("INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('nullpayload', 'order', 'c', 'order.changed', NULL)"); err != nil {
				t.Fatal(err)
			}
			insertRow(t, env.DB, env.Table, "good2", "order", "a", `{"n":2}`)

			p := newPoller(t, env, func(c *Config) { c.PayloadJSON = true; c.MaxPayloadBytes = 200; c.OnSent = onSent })
			if n, err := p.Step(ctx); err != nil || n != 6 {
				t.Fatalf("Step() = %d, %v; want 6, nil", n, err)
			}
			if got := messageIDs(t, env.RDB, "outbox:order"); strings.Join(got, ",") != "good1,good2" {
				t.Errorf("outbox:order holds %v, want [good1 good2]", got)
			}
			wantReasons := map[string]string{
				"nulltype":    "event_type is NULL",
				"notjson":     "payload is not valid JSON",
				"big":         "more than the limit of 200",
				"nullpayload": "payload is NULL",
			}
			dead := env.RDB.XRange(ctx, redisstream.DefaultDeadLetterStream, "-", "+").Val()
			if len(dead) != len(wantReasons) {
				t.Fatalf("dead-letter stream holds %d entries, want %d: %v", len(dead), len(wantReasons), dead)
			}
			for _, m := range dead {
				id := fmt.Sprint(m.Values["message_id"])
				reason := fmt.Sprint(m.Values["reason"])
				if !strings.Contains(reason, wantReasons[id]) {
					t.Errorf("dead letter %s: reason %q, want it to contain %q", id, reason, wantReasons[id])
				}
				if id == "big" {
					payload := fmt.Sprint(m.Values["payload"])
					if keep := onSent == OnSentDelete; keep != (len(payload) > 200) {
						t.Errorf("oversize dead letter with --on-sent %s carries %d payload bytes", onSent, len(payload))
					}
				}
			}
			s := p.Stats()
			if s.DeadLetters != 4 || s.Oversize != 1 || s.Events != 6 {
				t.Errorf("Stats() = %+v, want 6 events, 4 dead letters, 1 oversize", s)
			}
			var left int
			q := "SELECT COUNT(*) FROM `" + env.Table + "` WHERE sent_at IS NULL"
			if err := env.DB.QueryRow(q).Scan(&left); err != nil || left != 0 {
				t.Errorf("%d rows left unsent (err %v), want 0", left, err)
			}
		})
	}
}

// TestPoller_MinimalTable relays a table without the optional columns:
// message_id is the id, aggregate_type and headers are left out of the
// entries, and rows are deleted.
func TestPoller_MinimalTable(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	database := srv.NewDatabase(t)
	db := srv.Open(t, database)
	m := schema.DefaultMapping()
	m[schema.ColMessageID], m[schema.ColAggregateType], m[schema.ColHeaders], m[schema.ColSentAt] = "", "", "", ""
	m[schema.ColPayload] = "body"
	ctx := context.Background()
	if err := schema.Apply(ctx, db, "events", m); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO events (aggregate_id, event_type, body, occurred_at) VALUES ('o-1', 'order.placed', '{\"a\":1}', '2026-11-29 10:00:00.123456')"); err != nil {
		t.Fatal(err)
	}
	rs := testsvc.SharedRedis(t)
	url := rs.NewDB(t)
	rdb := rs.Client(t, url)
	pub := newPublisher(t, url, redisstream.Config{Stream: "outbox:{event_type}", NoAggregateType: true, NoHeaders: true})
	_, err := New(db, pub, Config{Table: "events", Mapping: m}, nil)
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("New() with --on-sent mark and no sent_at = %v, want a config error", err)
	}
	p, err := New(db, pub, Config{Table: "events", Mapping: m, OnSent: OnSentDelete}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Step(ctx); err != nil || n != 1 {
		t.Fatalf("Step() = %d, %v; want 1, nil", n, err)
	}
	msgs := rdb.XRange(ctx, "outbox:order.placed", "-", "+").Val()
	if len(msgs) != 1 {
		t.Fatalf("stream holds %d entries, want 1", len(msgs))
	}
	want := map[string]any{"message_id": "1", "aggregate_id": "o-1", "event_type": "order.placed", "payload": `{"a":1}`,
		"occurred_at": "2026-11-29T10:00:00.123456Z", "outbox_id": "1"}
	if fmt.Sprint(msgs[0].Values) != fmt.Sprint(want) {
		t.Errorf("entry = %v, want %v", msgs[0].Values, want)
	}
	var left int
	if err := db.QueryRow("SELECT COUNT(*) FROM events").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left (err %v), want 0 (deleted)", left, err)
	}
}

// TestPoller_RunStopsOnUnfitTable: configuration problems are returned, not
// retried for ever.
func TestPoller_RunStopsOnUnfitTable(t *testing.T) {
	env := newEnv(t)
	p := newPoller(t, env, func(c *Config) { c.Table = "no_such_table" })
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, schema.ErrTableUnfit) && !errors.Is(err, schema.ErrTableNotFound) {
			t.Fatalf("Run() = %v, want an unfit-table error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run() kept retrying a missing table")
	}
}

// TestPoller_RedisOutOfMemoryLogsOnce holds Redis at maxmemory (noeviction)
// under a poller retrying every 100ms: the failure is logged once with its
// hint, the rows stay unsent, and they arrive once memory is freed.
func TestPoller_RedisOutOfMemoryLogsOnce(t *testing.T) {
	// Its Redis and database are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedis(t, testsvc.RedisOptions{}))
	ctx := context.Background()
	logs := &relaytest.Logs{}
	p := newPoller(t, env, func(c *Config) { c.MaxBackoff = 100 * time.Millisecond })
	p.log = logs.Logger().With("component", "poller")
	relaytest.FillRedis(ctx, t, env)
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	stop := start(p)
	// Ten failed rounds, however long a loaded machine takes for them,
	// within the 30s after which a repeated error is logged again.
	relaytest.WaitFor(t, 25*time.Second, "10 failed rounds", func() bool { return p.Stats().Errors >= 10 })
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Fatalf("%d entries appended at maxmemory", n)
	}
	if n := len(logs.Lines("ERROR")); n != 1 {
		t.Errorf("%d ERROR lines in %d failed rounds of Redis OOM, want 1:\n%s", n, p.Stats().Errors, logs.String())
	}
	if n := strings.Count(logs.String(), "Redis reached maxmemory"); n != 1 {
		t.Errorf("the OOM hint appears %d times in the log, want once:\n%s", n, logs.String())
	}
	env.RDB.ConfigSet(ctx, "maxmemory", "0")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	// The entries are readable before the round that appended them has
	// committed and said so.
	relaytest.WaitFor(t, 30*time.Second, "a line saying the poller recovered", func() bool {
		return strings.Contains(logs.String(), `"msg":"recovered"`)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{})
}
