package canal

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The conformance cases wait on their servers and faults far more than on
// the CPU: more of them run at a time than the machine has cores.
func TestMain(m *testing.M) { testsvc.MainParallel(m, 4) }

// testLogger shows the relay's logs with -v, and its last lines when the
// test fails (relaytest.TestLogger).
func testLogger(t testing.TB) *slog.Logger { return relaytest.TestLogger(t) }

func flavorOf(t testing.TB, db *sql.DB) string {
	var v string
	if err := db.QueryRow("SELECT @@version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return position.FlavorMariaDB
	}
	return position.FlavorMySQL
}

// newReader builds a reader for env with overrides applied to its config.
func newReader(t testing.TB, env *relaytest.Env, tweak func(*Config)) (*Reader, *redisstream.Sink) {
	t.Helper()
	return newReaderLogging(t, env, tweak, testLogger(t))
}

// newReaderLogging is newReader with the reader's logs going to logger.
func newReaderLogging(t testing.TB, env *relaytest.Env, tweak func(*Config), logger *slog.Logger) (*Reader, *redisstream.Sink) {
	t.Helper()
	return newReaderSink(t, env, redisstream.Config{}, tweak, logger)
}

// newReaderSink is newReaderLogging with the sink configured as sc says
// (its position key is the reader's).
func newReaderSink(t testing.TB, env *relaytest.Env, sc redisstream.Config, tweak func(*Config), logger *slog.Logger) (*Reader, *redisstream.Sink) {
	t.Helper()
	client := topologyClient(t, env)
	key := "binlog-outbox:position:" + env.Database + "." + env.Table
	host, port := env.MySQLHostPort(t)
	cfg := Config{
		Host: host, Port: port, User: env.MariaDB.User(), Password: env.MariaDB.Password(),
		Flavor: flavorOf(t, env.DB), Database: env.Database, Table: env.Table, PositionKey: key,
		Mapping: env.Mapping, Extra: env.Extra,
		// Every reader of a test binary on the shared server needs its own id.
		ServerID:        uint32(2000 + serverIDs.next()),
		HeartbeatPeriod: 200 * time.Millisecond,
		MaxBackoff:      500 * time.Millisecond,
	}
	cluster := env.Topology.Redis == relaytest.Cluster
	if env.Topology.Lease {
		lease, err := redisstream.NewLease(client, redisstream.LeaseConfig{Key: redisstream.KeysFor(env.Database, env.Table, "").Lease, Cluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Lease = lease
	}
	if tweak != nil {
		tweak(&cfg)
	}
	// The sink checks the lease the reader waits for, as run sets them up.
	lease, _ := cfg.Lease.(*redisstream.Lease)
	sc.PositionKey, sc.Lease, sc.Cluster = key, lease, sc.Cluster || cluster
	if sc.Stream == "" && env.Prefix != relaytest.DefaultPrefix {
		sc.Stream, sc.DeadLetterStream = env.Prefix+"{aggregate_type}", env.Prefix+"dead-letter"
	}
	sink, err := redisstream.New(client, sc)
	if err != nil {
		t.Fatal(err)
	}
	if cluster && cfg.Cuts == nil {
		cfg.Cuts = sink
	}
	r, err := New(env.RelayDB(t), sink, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return r, sink
}

// topologyClient returns a client of the Redis env.RedisURL names, as run
// builds it for env.Topology (a cluster client on a Cluster), closed at the
// end of the test.
func topologyClient(t testing.TB, env *relaytest.Env) redis.UniversalClient {
	t.Helper()
	var client redis.UniversalClient
	if env.Topology.Redis == relaytest.Cluster {
		o, err := redis.ParseClusterURL(env.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		client = redisconn.NewClusterClientFromOptions(o)
	} else {
		c, err := redisconn.NewClient(env.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		client = c
	}
	t.Cleanup(func() { client.Close() })
	return client
}

var serverIDs = &counter{}

// counter is safe for the suite's parallel cases.
type counter struct{ n atomic.Uint32 }

func (c *counter) next() uint32 { return c.n.Add(1) }

// startReader runs r in the background; stop cancels it and returns Run's error.
func startReader(r *Reader) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// startedReader starts a reader (newReader with tweak) and waits until it
// stored its start position; stop ends it.
func startedReader(t testing.TB, env *relaytest.Env, tweak func(*Config)) (*Reader, *redisstream.Sink, func() error) {
	t.Helper()
	r, sink := newReader(t, env, tweak)
	stop := startReader(r)
	waitStarted(t, r)
	return r, sink, stop
}

// resumeChecked starts a new reader where the last one stopped, waits until
// it delivered every event rec holds, stops it and checks the streams with
// stopChecked.
func resumeChecked(ctx context.Context, t testing.TB, env *relaytest.Env, rec *relaytest.Produced) {
	t.Helper()
	r, _ := newReader(t, env, nil)
	stop := startReader(r)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopChecked(ctx, t, env, rec, stop)
}

// produceDelivered commits transactions of two producers into the outbox
// and waits until the reader delivered every event rec holds.
func produceDelivered(ctx context.Context, t testing.TB, env *relaytest.Env, rec *relaytest.Produced, transactions int) {
	t.Helper()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: transactions}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
}

// stopChecked stops the reader, which must stop without error, and checks
// that the streams hold each committed event of rec exactly once.
func stopChecked(ctx context.Context, t testing.TB, env *relaytest.Env, rec *relaytest.Produced, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestReader_Conformance runs the suite on every topology: a standalone
// Redis, Sentinel and a Cluster, each without and with a lease.
func TestReader_Conformance(t *testing.T) {
	// Every case has its own database, Redis database or stream prefix,
	// and proxies (relaytest.RunSuiteOn).
	t.Parallel()
	for _, tp := range relaytest.Topologies() {
		t.Run(tp.String(), func(t *testing.T) {
			t.Parallel()
			relaytest.RunSuiteOn(t, tp, func(t *testing.T, env *relaytest.Env) func() error {
				_, _, stop := startedReader(t, env, func(c *Config) { c.MaxBackoff = 100 * time.Millisecond })
				return stop
			}, relaytest.Features{ExactlyOnce: true, PerAggregateOrder: true, PromptStopOnDeadMySQLLink: true})
		})
	}
}

// waitStarted waits until the reader stored its start position, so that rows
// written afterwards are certainly after it. It asks the reader (Stats), not
// its sink: a cluster sink's Position keeps per-slot state that only the
// reader's goroutine may touch.
func waitStarted(t testing.TB, r *Reader) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the reader to store its start position", func() bool {
		s := r.Stats()
		return s.Stored.File != "" || !s.Stored.GTIDSet.IsZero()
	})
}

func TestReader_FencedBySecondRelay(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r1, _ := newReader(t, env, nil)
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	done1 := make(chan error, 1)
	go func() { done1 <- r1.Run(ctx1) }()
	waitStarted(t, r1)
	// A second relay started by mistake on the same position key.
	r2, _ := newReader(t, env, nil)
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	done2 := make(chan error, 1)
	go func() { done2 <- r2.Run(ctx2) }()

	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 40, RollbackRatio: 0.01}, rec)

	// One of the two must stop, fenced; the survivor delivers everything once.
	var fencedErr error
	var stopSurvivor func() error
	select {
	case fencedErr = <-done2:
		stopSurvivor = func() error { cancel1(); return <-done1 }
	case fencedErr = <-done1:
		stopSurvivor = func() error { cancel2(); return <-done2 }
	case <-time.After(30 * time.Second):
		t.Fatal("neither relay was fenced within 30s")
	}
	if !errors.Is(fencedErr, outbox.ErrFenced) || outbox.HintOf(fencedErr) == "" {
		t.Fatalf("fenced relay returned %v, want ErrFenced with a hint", fencedErr)
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stopSurvivor(); err != nil {
		t.Fatalf("surviving relay: %v", err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// A reader configured with a name that matches no table (names are
// case-sensitive with lower_case_table_names=0) stops at once rather than
// skip every row.
func TestReader_TableNameMatchingNoTableStops(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	r, _ := newReader(t, env, func(c *Config) { c.Table = "Outbox" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, outbox.ErrConfig) || !errors.Is(err, schema.ErrTableNotFound) {
		t.Fatalf("Run with table Outbox: got %v, want ErrConfig and ErrTableNotFound", err)
	}
}
