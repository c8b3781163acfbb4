package admin

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// testLogger shows the relay's logs with -v, and its last lines when the
// test fails (relaytest.TestLogger).
func testLogger(t testing.TB) *slog.Logger { return relaytest.TestLogger(t) }

// newEnv is a private database and Redis database on the shared servers:
// a test that uses only them may run in parallel.
func newEnv(t *testing.T) *relaytest.Env {
	t.Helper()
	return relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
}

// keys are the relay's keys for env's table, as `run` names them.
func keys(env *relaytest.Env) redisstream.Keys {
	return redisstream.KeysFor(env.Database, env.Table, "")
}

// streams are the streams of the default template and dead-letter stream.
func streams(t testing.TB) Streams {
	t.Helper()
	tmpl, err := entry.ParseTemplate(entry.DefaultStream, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	return Streams{Glob: tmpl.Glob(), DeadLetter: redisstream.DefaultDeadLetterStream}
}

// table is env's outbox table resolved as the commands resolve it.
func table(t testing.TB, env *relaytest.Env) outboxsql.Table {
	t.Helper()
	m := env.Mapping
	if m == nil {
		m = schema.DefaultMapping()
	}
	res, err := schema.Resolve(context.Background(), env.DB, env.Database, env.Table, m, nil, env.Extra)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.ProblemsError(env.Table, res.Problems); err != nil {
		t.Fatal(err)
	}
	return outboxsql.Table{Database: env.Database, Name: env.Table, Mapping: res.Mapping, Info: res.Table}
}

var serverIDs atomic.Uint32

// newReader builds a binlog reader of env's table whose sink stores the
// position under the key `run` uses, on env's Redis Cluster when it has
// one; with, when given, changes the configs.
func newReader(t testing.TB, env *relaytest.Env, with ...func(*canal.Config, *redisstream.Config)) (*canal.Reader, *redisstream.Sink) {
	t.Helper()
	var client redis.UniversalClient = env.Cluster
	if env.Cluster == nil {
		c, err := redisconn.NewClient(env.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		client = c
	}
	key := keys(env).Position
	host, port := env.MySQLHostPort(t)
	srv, err := mysqlserver.Detect(context.Background(), env.DB)
	if err != nil {
		t.Fatal(err)
	}
	cfg := canal.Config{
		Host: host, Port: port, User: env.MariaDB.User(), Password: env.MariaDB.Password(),
		Flavor: srv.Flavor, Database: env.Database, Table: env.Table, PositionKey: key,
		Mapping: env.Mapping, Extra: env.Extra,
		// Every reader of the test binary needs its own id on the server.
		ServerID:        5000 + serverIDs.Add(1),
		HeartbeatPeriod: 200 * time.Millisecond,
		MaxBackoff:      500 * time.Millisecond,
	}
	sc := redisstream.Config{PositionKey: key, Cluster: env.Cluster != nil}
	for _, f := range with {
		f(&cfg, &sc)
	}
	sink, err := redisstream.New(client, sc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := canal.New(env.RelayDB(t), sink, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return r, sink
}

// startRelay runs a relay of env's table in mode, in-process, as `run`
// does: it records the mode and, in binlog mode, returns once the start
// position is stored. stop ends it, failing the test on an error. with
// changes a binlog reader's configs (newReader).
func startRelay(t *testing.T, env *relaytest.Env, m string, with ...func(*canal.Config, *redisstream.Config)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := redisstream.NewModeStore(env.RDB, keys(env).Mode).Save(ctx, m); err != nil {
		t.Fatal(err)
	}
	var run func(context.Context) error
	if m == mode.Binlog {
		r, _ := newReader(t, env, with...)
		run = r.Run
	} else {
		sink, err := redisstream.New(env.RDB, redisstream.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := poller.New(env.RelayDB(t), sink, poller.Config{Database: env.Database, Table: env.Table, Mapping: env.Mapping,
			MaxBackoff: 200 * time.Millisecond, PollInterval: 50 * time.Millisecond}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		run = p.Run
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the %s relay stopped with %v", m, err)
		}
	}
	t.Cleanup(stop)
	if m == mode.Binlog {
		relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
			return env.RDB.Exists(context.Background(), keys(env).Position).Val() == 1
		})
	}
	return stop
}

// xadd appends an entry with the fields values to stream.
func xadd(t testing.TB, rdb redis.UniversalClient, stream string, values any) string {
	t.Helper()
	id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
