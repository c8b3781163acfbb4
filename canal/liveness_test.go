package canal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// insertLargeRow commits one outbox row whose payload is about size bytes.
// The payload is built by the server, so that the statement text in the
// binlog (MariaDB's annotate event) stays small.
func insertLargeRow(t testing.TB, env *relaytest.Env, messageID string, size int) {
	t.Helper()
	if _, err := env.DB.Exec("INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) "+
		"VALUES (?, 'large', ?, 'large.created', CONCAT('{\"pad\":\"', REPEAT('x', ?), '\"}'))", messageID, messageID, size); err != nil {
		t.Fatal(err)
	}
}

// TestReader_GTIDMode starts from a GTID set, so the stored position
// is a GTID set too, and resumes by it after a restart.
func TestReader_GTIDMode(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	var gtid string
	q := "SELECT @@GLOBAL.gtid_binlog_pos"
	if flavorOf(t, env.DB) == position.FlavorMySQL {
		q = "SELECT @@GLOBAL.gtid_executed"
	}
	if err := env.DB.QueryRow(q).Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	if gtid == "" {
		t.Fatalf("%s is empty: GTID mode needs gtid_mode=ON on MySQL (docker-compose.yml sets it)", q)
	}
	start, err := position.ParseStart(gtid)
	if err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewProduced()
	r, sink := newReader(t, env, func(c *Config) { c.Start = start })
	stop := startReader(r)
	waitStarted(t, r)
	produceDelivered(ctx, t, env, rec, 20)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	raw, _ := sink.Position(ctx)
	b, err := position.Decode(raw)
	if err != nil || !b.GTIDMode() {
		t.Fatalf("stored position %s (%v): want a GTID set", raw, err)
	}
	// Written while stopped; the next reader resumes by the stored GTID set.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	r2, _ := newReader(t, env, nil)
	stop = startReader(r2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	raw, _ = sink.Position(ctx)
	t.Logf("final position %s", raw)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestReader_PositionFollowsOtherTraffic: transactions on other tables move
// the stored position (throttled), so a restart does not re-read them and a
// binlog purge does not overtake an idle outbox.
func TestReader_PositionFollowsOtherTraffic(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, sink := newReader(t, env, func(c *Config) { c.IdleCheckpoint = 100 * time.Millisecond })
	stop := startReader(r)
	defer func() { _ = stop() }()
	waitStarted(t, r)
	before, _ := sink.Position(ctx)
	env.MariaDB.Exec(t, "CREATE TABLE `"+env.Database+"`.other (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB")
	relaytest.WaitFor(t, 30*time.Second, "the position to move without outbox rows", func() bool {
		if _, err := env.DB.Exec("INSERT INTO other (v) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		after, _ := sink.Position(ctx)
		a, errA := position.Decode(after)
		b, errB := position.Decode(before)
		return errA == nil && errB == nil && a.Pos > b.Pos
	})
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Fatalf("%d entries from another table's rows", n)
	}
}

// TestReader_EventCacheBoundedByBytes: catching up large rows while Redis is
// slow, the events read ahead of the reader stay within EventCacheBytes.
// go-mysql's channel bounds only their count: 256 events of 4 MiB rows were a
// gigabyte.
func TestReader_EventCacheBoundedByBytes(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, _, stop := startedReader(t, env, nil)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	const rows, rowSize, budget = 16, 512 << 10, 2 << 20
	// Appends held back: the binlog arrives while the reader cannot get rid
	// of it, so what is read ahead piles up to the budget, however busy the
	// machine (a throttle alone left the reader ahead on a loaded one).
	proxy := testsvc.StartProxy(t, env.Redis.Addr())
	u, err := url.Parse(env.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	slow := *env
	slow.RedisURL = u.String()
	r, _ = newReader(t, &slow, func(c *Config) {
		c.EventCacheBytes = budget
		// The tests' short timeouts would let a loaded machine close the
		// link before the rows come, and a new session waits on Redis.
		c.HeartbeatPeriod, c.ReadTimeout = time.Second, 30*time.Second
	})
	stop = startReader(r)
	defer func() { _ = stop() }()
	waitStarted(t, r)
	proxy.Stall()
	for i := range rows {
		insertLargeRow(t, env, fmt.Sprintf("large-%d", i), rowSize)
	}
	relaytest.WaitFor(t, 90*time.Second, "the reader to read ahead while its appends are held back", func() bool {
		return r.Stats().EventBytesHigh >= budget/2
	})
	proxy.Resume()
	relaytest.WaitFor(t, 20*time.Second, "the large rows", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:") == rows
	})
	high := r.Stats().EventBytesHigh
	t.Logf("at most %d bytes of events read ahead (budget %d)", high, budget)
	if high > budget {
		t.Errorf("%d bytes of events read ahead, want at most the budget of %d", high, budget)
	}
	if s := r.Stats(); s.Sessions != 1 {
		t.Errorf("%d sessions, want 1: the watchdog closed the connection while the reader was busy", s.Sessions)
	}
}

// An idle reader whose binlog connection broke is ready again once it
// reconnected and the server's heartbeats say it is caught up, not only at
// the next append: otherwise a quiet outbox keeps /readyz failing (and the
// not-ready alert firing) for as long as nobody writes.
func TestReader_IdleReconnectIsNoLongerRetrying(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	proxy := testsvc.StartProxy(t, srv.Addr())
	env.MySQLAddr = proxy.Addr()
	ctx := context.Background()
	r, _, stop := startedReader(t, env, nil)
	rec := relaytest.NewProduced()
	produceDelivered(ctx, t, env, rec, 5)
	sessions := r.Stats().Sessions
	proxy.Cut()
	relaytest.WaitFor(t, 30*time.Second, "the cut to be retried", func() bool {
		return r.Stats().Retrying != "" || r.Stats().Sessions > sessions
	})
	relaytest.WaitFor(t, 30*time.Second, "the reader to reconnect and stop retrying with no new event", func() bool {
		s := r.Stats()
		return s.Sessions > sessions && s.Retrying == ""
	})
	if got := r.Stats().Events; got != uint64(len(rec.Committed)) {
		t.Errorf("%d events appended, want %d: the check must not need an append", got, len(rec.Committed))
	}
	stopChecked(ctx, t, env, rec, stop)
}

// TestReader_RowOverOnePacket relays a row of 17 MiB, whose event the server
// sends as two MySQL packets, between two small ones: each payload arrives
// whole and unchanged. The payloads are the events' own bytes (no copy), so
// a row that shared or overran another's would show here.
func TestReader_RowOverOnePacket(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	const big = 17 << 20
	// REPEAT and the INSERT need room for the row; raising the limit is
	// harmless to the other tests of the server.
	env.MariaDB.Exec(t, "SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")
	// A connection of its own: the session takes the limit when it connects.
	db, err := sql.Open("mysql", env.MariaDB.DSN(env.Database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The race detector makes parsing the event take longer than the
	// tests' short read timeout: the connection is not silent, only busy.
	_, _, stop := startedReader(t, env, func(c *Config) { c.ReadTimeout = time.Minute })
	defer func() { _ = stop() }()
	// Two large rows in a row: the second is read only once the first is
	// appended (resumeAfterLarge), which must not stall the stream.
	sizes := map[string]int{"before": 10, "large": big, "huge": big, "after": 20}
	for _, id := range []string{"before", "large", "huge", "after"} {
		if _, err := db.Exec("INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) "+
			"VALUES (?, 'large', ?, 'large.created', CONCAT('{\"pad\":\"', REPEAT(?, ?), '\"}'))", id, id, id[:1], sizes[id]); err != nil {
			t.Fatalf("insert %s: %v", id, err)
		}
	}
	relaytest.WaitFor(t, 3*time.Minute, "the three rows", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, env.Prefix) == len(sizes)
	})
	for _, e := range relaytest.ReadAll(ctx, t, env.RDB, env.Prefix) {
		id, _ := e.Values["message_id"].(string)
		want := `{"pad":"` + strings.Repeat(id[:1], sizes[id]) + `"}`
		if got, _ := e.Values["payload"].(string); got != want {
			t.Errorf("%s: payload of %d bytes, want %d bytes of %q", id, len(got), len(want), id[:1])
		}
	}
}

// TestLink_DeadlineAfterKill: a read deadline set on a connection the
// watchdog killed succeeds, so that go-mysql's Close waits for its reading
// goroutine before it closes the packet connection under it.
func TestLink_DeadlineAfterKill(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	l := &link{}
	c, err := l.dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	l.kill()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after kill: got %v, want a closed connection", err)
	}
	if err := c.(*countingConn).Conn.SetReadDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the closed TCP connection's own deadline: got %v, want net.ErrClosed", err)
	}
	if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Errorf("deadline after kill: got %v, want nil", err)
	}
	if _, err := l.dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, errLinkDead) {
		t.Errorf("dial after kill: got %v, want errLinkDead", err)
	}
}
