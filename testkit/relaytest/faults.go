package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The suite's fault cases: servers killed, Redis full, and the network
// faults of testsvc.Proxy, each while producers write. Loads are small and
// the relays' timeouts short, so that every case takes seconds.

// minUnderLoad is how many events a case under load commits at least.
const minUnderLoad = 20

// underLoad runs producers in the background, pausing between
// transactions, until fault returns and a little after; it returns the
// record once the producers are done.
func underLoad(t *testing.T, env *Env, fault func()) *Produced {
	t.Helper()
	rec := NewProduced()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 3, Transactions: 1000, Pause: 5 * time.Millisecond}, rec)
	}()
	// Enough commits before the fault for the case to prove something,
	// however loaded the machine: a fixed pause let fewer than 20 through
	// when many suites ran at once.
	time.Sleep(300 * time.Millisecond)
	WaitFor(t, deliveryTimeout, fmt.Sprintf("%d commits before the fault", minUnderLoad), func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.Committed) >= minUnderLoad
	})
	fault()
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	rec.mu.Lock()
	n := len(rec.Committed)
	rec.mu.Unlock()
	if n < minUnderLoad {
		t.Fatalf("only %d events committed around the fault; the case proves little", n)
	}
	return rec
}

// finish waits for every committed event, stops the relay and checks the
// streams.
func (s *suite) finish(t *testing.T, env *faultEnv, stop func() error, rec *Produced, faulty bool) {
	t.Helper()
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	// A duplicate would show up now.
	time.Sleep(200 * time.Millisecond)
	stopClean(t, stop)
	s.check(t, env.Env, rec, faulty, nil)
}

func (s *suite) mysqlRestart(t *testing.T) {
	env := s.newEnv(t, envOptions{privateMySQL: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		for i := 0; i < 2; i++ {
			env.MariaDB.Kill(t)
			env.MariaDB.Restart(t)
			time.Sleep(300 * time.Millisecond)
		}
	})
	// Commits whose reply was lost in a kill may or may not have happened:
	// Produce recorded them as unknown, and Check accepts either.
	s.finish(t, env, stop, rec, true)
}

func (s *suite) redisRestart(t *testing.T) {
	env := s.newEnv(t, envOptions{privateRedis: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		for i := 0; i < 3; i++ {
			env.Redis.Kill(t)
			time.Sleep(100 * time.Millisecond)
			env.Redis.Restart(t)
			time.Sleep(150 * time.Millisecond)
		}
	})
	s.finish(t, env, stop, rec, true)
}

// redisOutOfMemory: Redis refuses every write for a while; nothing is
// appended meanwhile, and everything, once, when memory is freed. A refused
// script did nothing: no excuse for a duplicate.
func (s *suite) redisOutOfMemory(t *testing.T) {
	env := s.newEnv(t, envOptions{privateRedis: true})
	ctx := context.Background()
	stop := s.startRelay(t, env)
	FillRedis(ctx, t, env.Env)
	rec := NewProduced()
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 2, Transactions: 15}, rec)
	time.Sleep(2 * time.Second)
	if n := CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Fatalf("%d entries appended at maxmemory", n)
	}
	if err := env.RDB.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	stopClean(t, stop)
	s.check(t, env.Env, rec, false, nil)
}

func (s *suite) mysqlStall(t *testing.T) {
	env := s.newEnv(t, envOptions{mysqlProxy: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		env.MySQLProxy.Stall()
		time.Sleep(FaultStall)
		env.MySQLProxy.Resume()
	})
	s.finish(t, env, stop, rec, true)
}

func (s *suite) redisStall(t *testing.T) {
	env := s.newEnv(t, envOptions{redisProxy: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		env.RedisProxy.Stall()
		time.Sleep(FaultStall)
		env.RedisProxy.Resume()
	})
	s.finish(t, env, stop, rec, true)
}

// redisLostReply: Redis applies a request and the reply never comes; the
// relay cannot know whether its append happened.
func (s *suite) redisLostReply(t *testing.T) {
	env := s.newEnv(t, envOptions{redisProxy: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		for i := 1; i <= 3; i++ {
			env.RedisProxy.DropNextReply()
			WaitFor(t, 10*time.Second, "a dropped Redis reply", func() bool { return env.RedisProxy.Dropped() >= i })
			time.Sleep(100 * time.Millisecond)
		}
	})
	s.finish(t, env, stop, rec, true)
}

func (s *suite) mysqlCut(t *testing.T) {
	env := s.newEnv(t, envOptions{mysqlProxy: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		for i := 0; i < 4; i++ {
			env.MySQLProxy.Cut()
			time.Sleep(150 * time.Millisecond)
		}
	})
	s.finish(t, env, stop, rec, true)
}

func (s *suite) redisCut(t *testing.T) {
	env := s.newEnv(t, envOptions{redisProxy: true})
	stop := s.startRelay(t, env)
	rec := underLoad(t, env.Env, func() {
		for i := 0; i < 4; i++ {
			env.RedisProxy.Cut()
			time.Sleep(150 * time.Millisecond)
		}
	})
	s.finish(t, env, stop, rec, true)
}

// throttledLargeRow: a row that takes several read timeouts to cross a slow
// MySQL link is progress, not a dead link (binlog mode counted events and
// read the row again and again); nothing behind it waits for ever.
func (s *suite) throttledLargeRow(t *testing.T) {
	env := s.newEnv(t, envOptions{mysqlProxy: true})
	ctx := context.Background()
	stop := s.startRelay(t, env)
	// The poller's wait for its first round; the binlog reader's start.
	time.Sleep(500 * time.Millisecond)
	rec := NewProduced()
	// 900 KiB (under poll mode's 1 MiB payload limit) at 256 KiB/s: three
	// and a half seconds, more than 3 binlog heartbeats and RedisTimeout.
	env.MySQLProxy.Throttle(256 << 10)
	insertLargeEvent(t, env.Env, rec, 900<<10)
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 1, Transactions: 5, RollbackRatio: 0.0001}, rec)
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	env.MySQLProxy.Throttle(0)
	stopClean(t, stop)
	// A poller's mark of rows it appended can time out on the slow link
	// (on a loaded machine it did): those rows are polled again, the
	// duplicate at-least-once allows.
	s.check(t, env.Env, rec, true, nil)
}

// insertLargeEvent commits one event whose payload is about size bytes, in
// the shape Check expects. The server builds the padding, so that the
// statement text in the binlog (MariaDB's annotate event) stays small.
func insertLargeEvent(t *testing.T, env *Env, rec *Produced, size int) {
	t.Helper()
	id := MessageID()
	agg := "large-" + id
	prefix := `{"seq":1,"agg":"` + agg + `","text":"héllo \"quoted\" 🙂","pad":"`
	if _, err := env.DB.Exec("INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) "+
		"VALUES (?, 'order', ?, 'order.changed', CONCAT(?, REPEAT('x', ?), '\"}'), '{}', UTC_TIMESTAMP(6))", id, agg, prefix, size); err != nil {
		t.Fatalf("insert a large row: %v", err)
	}
	rec.mu.Lock()
	rec.Committed[id] = Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: 1}
	rec.mu.Unlock()
}

// stopWhileStalled: the MySQL link goes silent, then Redis fails, so the
// relay's session ends for a Redis error while the MySQL link is dead. Stop
// must still be prompt (binlog mode hung in go-mysql's Close, whose KILL
// connection's handshake had no deadline), and once the network is back
// everything arrives.
func (s *suite) stopWhileStalled(t *testing.T) {
	env := s.newEnv(t, envOptions{mysqlProxy: true, redisProxy: true})
	ctx := context.Background()
	stop := s.startRelay(t, env)
	rec := NewProduced()
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 2, Transactions: 10}, rec)
	WaitDelivered(t, env.Env, rec, deliveryTimeout)
	// Appends crawl, so that the relay is busy with Redis when MySQL stalls.
	env.RedisProxy.ThrottleBoth(4 << 10)
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 2, Transactions: 20}, rec)
	time.Sleep(300 * time.Millisecond)
	env.MySQLProxy.Stall()
	env.RedisProxy.Cut()
	time.Sleep(FaultStall)
	stopClean(t, stop)
	env.MySQLProxy.Resume()
	env.RedisProxy.ThrottleBoth(0)
	stop = s.startRelay(t, env)
	s.finish(t, env, stop, rec, true)
}

// deadLetters: rows the relay cannot deliver go to the dead-letter stream
// with a reason, and the rows behind them are not held back.
func (s *suite) deadLetters(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	ctx := context.Background()
	// A table whose constraints let a NULL in, as old ones do.
	if _, err := env.DB.Exec("ALTER TABLE `" + env.Table + "` MODIFY event_type VARCHAR(255) NULL"); err != nil {
		t.Fatal(err)
	}
	stop := s.startRelay(t, env)
	rec := NewProduced()
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 2, Transactions: 5, RollbackRatio: 0.0001}, rec)
	insertRaw(t, env.DB, "INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('dl-nulltype', 'order', 'dl', NULL, '{}')")
	// MariaDB's JSON is a LONGTEXT with a json_valid CHECK, which a session
	// can skip; MySQL's JSON type cannot hold it at all.
	notJSON := true
	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION check_constraint_checks = 0"); err != nil {
		notJSON = false
	} else if _, err := conn.ExecContext(ctx, "INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('dl-notjson', 'raw', 'dl', 'raw.changed', '{\"n\":')"); err != nil {
		t.Fatalf("insert a payload that is not JSON: %v", err)
	}
	// Values the relay would have to invent a meaning for (issue 41): a
	// zero occurred_at, which a relaxed sql_mode lets in, and empty types.
	// Each is a dead letter with its reason, in both modes alike.
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = ''"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES ('dl-zerotime', 'order', 'dl', 'order.changed', '{}', '0000-00-00 00:00:00')",
		"INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('dl-emptyaggtype', '', 'dl', 'order.changed', '{}')",
		"INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('dl-emptytype', 'order', 'dl', '', '{}')",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	Produce(ctx, t, env.DB, env.Table, ProduceOptions{Producers: 2, Transactions: 5, RollbackRatio: 0.0001}, rec)

	wantDead := map[string]string{"dl-nulltype": "event_type is NULL", "dl-zerotime": "occurred_at is NULL or a zero date",
		"dl-emptyaggtype": "aggregate_type is empty", "dl-emptytype": "event_type is empty"}
	if notJSON && s.f.DeadLettersInvalidJSON {
		wantDead["dl-notjson"] = "payload is not valid JSON"
	}
	relayedAsIs := notJSON && !s.f.DeadLettersInvalidJSON
	// The dead letters and the relayed-as-is row are entries under outbox:
	// too: waiting for the committed count alone could stop the relay before
	// the last committed events.
	extra := len(wantDead)
	if relayedAsIs {
		extra++
	}
	rec.mu.Lock()
	want := len(rec.Committed) + extra
	rec.mu.Unlock()
	WaitFor(t, deliveryTimeout, "the committed events and the dead letters", func() bool {
		n := env.Streams().XLen(ctx, env.Prefix+"dead-letter").Val()
		return n >= int64(len(wantDead)) && (!relayedAsIs || env.Streams().XLen(ctx, env.Prefix+"raw").Val() >= 1) &&
			CountEntries(ctx, env.Streams(), env.Prefix) >= want
	})
	stopClean(t, stop)
	dead := env.Streams().XRange(ctx, env.Prefix+"dead-letter", "-", "+").Val()
	ids := map[string]bool{}
	for _, m := range dead {
		ids[fmt.Sprint(m.Values["message_id"])] = true
	}
	if len(ids) != len(wantDead) || len(dead) != len(wantDead) {
		t.Errorf("dead-letter stream holds %d entries, want %d: %v", len(dead), len(wantDead), dead)
	}
	for _, m := range dead {
		id := fmt.Sprint(m.Values["message_id"])
		if want, ok := wantDead[id]; !ok || !strings.Contains(fmt.Sprint(m.Values["reason"]), want) {
			t.Errorf("dead letter %s with reason %q, want %q", id, m.Values["reason"], want)
		}
	}
	if relayedAsIs {
		raw := env.Streams().XRange(ctx, env.Prefix+"raw", "-", "+").Val()
		if len(raw) != 1 || raw[0].Values["payload"] != `{"n":` {
			t.Errorf("outbox:raw holds %v, want the payload that is not JSON as it is", raw)
		}
	}
	// No duplicates in any mode: poll mode once appended the batch again
	// every round, because MariaDB checked the payload's json_valid CHECK
	// again on the UPDATE that sets sent_at.
	skip := map[string]bool{"dl-notjson": true}
	for id := range wantDead {
		skip[id] = true
	}
	s.check(t, env.Env, rec, false, skip)
}

func insertRaw(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// payloadPassThrough: a payload reaches the stream byte for byte: MariaDB's
// JSON (a LONGTEXT) with odd spacing, key order and number formatting, and
// a BLOB that is no text at all.
func (s *suite) payloadPassThrough(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	ctx := context.Background()
	payloads := map[string][]byte{"raw-plain": []byte(`{"k":"v"}`)}
	var version string
	if err := env.DB.QueryRow("SELECT @@version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		payloads["raw-odd"] = []byte(`{ "b" : 1.0,   "a":[1,2,  3], "é":"\u00e9" }`)
	}
	// A second table whose payload column is a BLOB.
	blobEnv := s.newEnv(t, envOptions{})
	if _, err := blobEnv.DB.Exec("ALTER TABLE `" + blobEnv.Table + "` MODIFY payload LONGBLOB NOT NULL"); err != nil {
		t.Fatal(err)
	}
	binary := []byte("\x00\xff\xfe{not json}\n\t\"é\r\n")
	stop := s.startRelay(t, env)
	stopBlob := s.startRelay(t, blobEnv)
	for id, p := range payloads {
		insertRaw(t, env.DB, "INSERT INTO `"+env.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'raw', ?, 'raw', ?)", id, id, p)
	}
	insertRaw(t, blobEnv.DB, "INSERT INTO `"+blobEnv.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('raw-bin', 'raw', 'bin', 'raw', ?)", binary)
	for _, c := range []struct {
		env  *faultEnv
		want map[string][]byte
	}{{env, payloads}, {blobEnv, map[string][]byte{"raw-bin": binary}}} {
		WaitFor(t, deliveryTimeout, "the raw payloads", func() bool {
			return c.env.Streams().XLen(ctx, c.env.Prefix+"raw").Val() >= int64(len(c.want))
		})
		msgs := c.env.Streams().XRange(ctx, c.env.Prefix+"raw", "-", "+").Val()
		if len(msgs) != len(c.want) {
			t.Errorf("outbox:raw holds %d entries, want %d", len(msgs), len(c.want))
		}
		for _, m := range msgs {
			id := fmt.Sprint(m.Values["message_id"])
			if want, ok := c.want[id]; !ok || m.Values["payload"] != string(want) {
				t.Errorf("payload of %s: got %q, want %q byte for byte", id, m.Values["payload"], want)
			}
		}
	}
	stopClean(t, stop)
	stopClean(t, stopBlob)
}
