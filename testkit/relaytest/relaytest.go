// Package relaytest is the conformance suite every relay mode passes: events
// from concurrent producers, some transactions rolled back, must reach their
// streams with the right fields, none lost, none rolled back, per-aggregate
// order kept, and, where the mode promises it, none twice; across restarts
// too. It also has the producer and the checker the crash tests use.
package relaytest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// Env is one test's private world: a database with an outbox table and an
// empty Redis database.
//
// MySQLAddr and RedisURL are what the relay under test dials: the servers,
// or a fault proxy in front of them (the suite's network cases swap them).
// DB and RDB, the test's own, always reach the servers directly.
type Env struct {
	MariaDB   *testsvc.MariaDB
	Redis     *testsvc.Redis
	Database  string
	Table     string
	DB        *sql.DB
	MySQLAddr string
	RedisURL  string
	RDB       *redis.Client
	// Cluster, in an Env of NewClusterEnv, reaches the Redis Cluster
	// RedisURL names; RDB is nil there.
	Cluster *redis.ClusterClient
	// Topology is where the relay under test appends (the conformance
	// suite's; NewEnv's is a standalone Redis without a lease).
	Topology Topology
	// Prefix starts every stream key the relay under test appends to,
	// "outbox:" where the Redis database is the test's own; on the shared
	// Redis Cluster, which has database 0 only, the test's database name
	// comes first. Its streams are Prefix+"{aggregate_type}" and its dead
	// letters Prefix+"dead-letter".
	Prefix string
	// Mapping (nil: schema.DefaultMapping) and Extra (--extra-column) are
	// what the relay under test maps the table with, when a case changes
	// them.
	Mapping schema.Mapping
	Extra   []schema.ExtraColumn
}

// NewEnv creates the outbox table (default mapping) in a fresh database on
// srv and reserves a fresh Redis database on rs.
func NewEnv(t testing.TB, srv *testsvc.MariaDB, rs *testsvc.Redis) *Env {
	t.Helper()
	e := newTableEnv(t, srv)
	e.Redis = rs
	e.RedisURL = rs.NewDB(t)
	e.RDB = rs.Client(t, e.RedisURL)
	return e
}

// NewSentinelEnv is NewEnv with the streams in a fresh database of the
// master that the sentinels s name: RedisURL is a redis+sentinel:// URL and
// RDB follows the master across failovers. Redis is nil: s kills and fails
// over the servers.
func NewSentinelEnv(t testing.TB, srv *testsvc.MariaDB, s *testsvc.Sentinels) *Env {
	t.Helper()
	e := newTableEnv(t, srv)
	url, db := s.NewDB(t)
	e.RedisURL, e.RDB = url, s.Client(t, db)
	return e
}

// newTableEnv creates the outbox table (default mapping) in a fresh
// database on srv.
func newTableEnv(t testing.TB, srv *testsvc.MariaDB) *Env {
	t.Helper()
	e := &Env{MariaDB: srv, Table: "outbox", Prefix: DefaultPrefix}
	e.Database = srv.NewDatabase(t)
	e.DB = srv.Open(t, e.Database)
	e.DB.SetMaxOpenConns(32)
	if err := schema.Apply(context.Background(), e.DB, e.Table, schema.DefaultMapping()); err != nil {
		t.Fatalf("create outbox table: %v", err)
	}
	e.MySQLAddr = srv.Addr()
	return e
}

// DefaultPrefix is the stream key prefix of the relay's defaults
// (entry.DefaultStream), which Env.Prefix is where nothing else
// shares the Redis database.
const DefaultPrefix = "outbox:"

// NewSharedClusterEnv is NewClusterEnv on a cluster other tests use at the
// same time: the streams are under a prefix of the test's own (Env.Prefix).
func NewSharedClusterEnv(t testing.TB, srv *testsvc.MariaDB, rc *testsvc.RedisCluster) *Env {
	t.Helper()
	e := NewClusterEnv(t, srv, rc)
	e.Prefix = e.Database + ":" + DefaultPrefix
	return e
}

// NewClusterEnv is NewEnv with the streams on a private Redis Cluster, which
// the test has to itself: RedisURL names it in go-redis's cluster URL form.
func NewClusterEnv(t testing.TB, srv *testsvc.MariaDB, rc *testsvc.RedisCluster) *Env {
	t.Helper()
	e := &Env{MariaDB: srv, Table: "outbox", Prefix: DefaultPrefix}
	e.Database = srv.NewDatabase(t)
	e.DB = srv.Open(t, e.Database)
	e.DB.SetMaxOpenConns(32)
	if err := schema.Apply(context.Background(), e.DB, e.Table, schema.DefaultMapping()); err != nil {
		t.Fatalf("create outbox table: %v", err)
	}
	e.MySQLAddr = srv.Addr()
	e.RedisURL = rc.URL()
	e.Cluster = rc.Client(t)
	return e
}

// Streams returns the test's client of the Redis the streams are in.
func (e *Env) Streams() redis.UniversalClient {
	if e.Cluster != nil {
		return e.Cluster
	}
	return e.RDB
}

// RelayDB returns the connection pool the relay under test uses: env.DB when
// it dials the server itself, else a pool through MySQLAddr, closed at the
// end of the test.
func (e *Env) RelayDB(t testing.TB) *sql.DB {
	t.Helper()
	if e.MySQLAddr == e.MariaDB.Addr() {
		return e.DB
	}
	cfg, err := mysql.ParseDSN(e.MariaDB.DSN(e.Database))
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.Addr = e.MySQLAddr
	// Short I/O timeouts, as the relay sets long ones (its DSN default):
	// a stalled link fails a statement, and its ROLLBACK, within seconds.
	cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 2*time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open MariaDB through %s: %v", e.MySQLAddr, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// MySQLHostPort splits MySQLAddr for configs that take them apart.
func (e *Env) MySQLHostPort(t testing.TB) (string, uint16) {
	t.Helper()
	host, port, err := net.SplitHostPort(e.MySQLAddr)
	if err != nil {
		t.Fatalf("MySQLAddr %q: %v", e.MySQLAddr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("MySQLAddr %q: %v", e.MySQLAddr, err)
	}
	return host, uint16(n)
}

// Produced records what producers committed and rolled back.
type Produced struct {
	mu         sync.Mutex
	Committed  map[string]Sent // by message_id
	RolledBack map[string]bool
	// Unknown holds the events of transactions whose COMMIT failed (the
	// server was killed): committed or not, the table knows; Check accepts
	// them present (once, in order) or absent. Reconcile settles them.
	Unknown map[string]Sent
}

// Sent is one committed event as the producer wrote it.
type Sent struct {
	AggregateType, AggregateID, EventType string
	Seq                                   int
}

// NewProduced returns an empty record.
func NewProduced() *Produced {
	return &Produced{Committed: map[string]Sent{}, RolledBack: map[string]bool{}, Unknown: map[string]Sent{}}
}

var idCounter struct {
	sync.Mutex
	n uint64
}

// MessageID returns a unique 26-character id (the shape of a ULID).
func MessageID() string {
	idCounter.Lock()
	idCounter.n++
	n := idCounter.n
	idCounter.Unlock()
	return fmt.Sprintf("T%09d%016d", time.Now().UnixNano()%1e9, n)
}

// ProduceOptions shape a load.
type ProduceOptions struct {
	Producers      int     // concurrent connections (default 4)
	Transactions   int     // per producer (default 50)
	MaxRowsPerTx   int     // outbox rows per transaction, 1..Max (default 3)
	RollbackRatio  float64 // share of transactions rolled back (default 0.2)
	AggregateTypes []string
	// Pause between transactions, to spread a load over a crash window.
	Pause time.Duration
}

// Produce writes outbox rows from concurrent producers. Every producer owns
// its aggregates, as a row lock on the aggregate would arrange in an
// application, so each aggregate's seq order is its commit order. Errors
// (e.g. the server was killed) end that producer; what it committed before
// is recorded, a transaction whose COMMIT failed is recorded as unknown and
// resolved by Reconcile.
func Produce(ctx context.Context, t testing.TB, db *sql.DB, table string, o ProduceOptions, rec *Produced) {
	t.Helper()
	if o.Producers == 0 {
		o.Producers = 4
	}
	if o.Transactions == 0 {
		o.Transactions = 50
	}
	if o.MaxRowsPerTx == 0 {
		o.MaxRowsPerTx = 3
	}
	if o.RollbackRatio == 0 {
		o.RollbackRatio = 0.2
	}
	if len(o.AggregateTypes) == 0 {
		o.AggregateTypes = []string{"order", "invoice"}
	}
	// Aggregates are new in every call: seqs restart at 1.
	idCounter.Lock()
	idCounter.n++
	run := idCounter.n
	idCounter.Unlock()
	var wg sync.WaitGroup
	for p := 0; p < o.Producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			seqs := map[string]int{}
			for i := 0; i < o.Transactions && ctx.Err() == nil; i++ {
				if err := produceTx(ctx, db, table, fmt.Sprintf("r%d-p%d", run, p), rng, o, seqs, rec); err != nil {
					return
				}
				if o.Pause > 0 {
					time.Sleep(o.Pause)
				}
			}
		}(p)
	}
	wg.Wait()
}

func produceTx(ctx context.Context, db *sql.DB, table string, p string, rng *rand.Rand, o ProduceOptions, seqs map[string]int, rec *Produced) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	n := 1 + rng.IntN(o.MaxRowsPerTx)
	rows := make(map[string]Sent, n)
	for j := 0; j < n; j++ {
		typ := o.AggregateTypes[rng.IntN(len(o.AggregateTypes))]
		agg := fmt.Sprintf("%s-%s-%d", p, typ, rng.IntN(5))
		key := typ + "/" + agg
		seqs[key]++
		s := Sent{AggregateType: typ, AggregateID: agg, EventType: typ + ".changed", Seq: seqs[key]}
		id := MessageID()
		payload, _ := json.Marshal(map[string]any{"seq": s.Seq, "agg": agg, "text": "héllo \"quoted\" 🙂"})
		_, err := tx.ExecContext(ctx, "INSERT INTO `"+table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
			id, s.AggregateType, s.AggregateID, s.EventType, string(payload), `{"producer":"`+p+`"}`)
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		rows[id] = s
	}
	if rng.Float64() < o.RollbackRatio {
		// The seqs stay consumed: a gap, not a reorder, as in real life.
		if err := tx.Rollback(); err != nil {
			return err
		}
		rec.mu.Lock()
		for id := range rows {
			rec.RolledBack[id] = true
		}
		rec.mu.Unlock()
		return nil
	}
	if err := tx.Commit(); err != nil {
		rec.mu.Lock()
		for id, s := range rows {
			rec.Unknown[id] = s
		}
		rec.mu.Unlock()
		return err
	}
	rec.mu.Lock()
	for id, s := range rows {
		rec.Committed[id] = s
	}
	rec.mu.Unlock()
	return nil
}

// Reconcile replaces the record of committed events with what the table
// holds: after a server crash, a COMMIT whose reply was lost may or may not
// have happened, and the table is the truth.
func Reconcile(t testing.TB, db *sql.DB, table string, rec *Produced) {
	t.Helper()
	rows, err := db.Query("SELECT message_id, aggregate_type, aggregate_id, event_type, JSON_VALUE(payload, '$.seq') FROM `" + table + "`")
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	defer rows.Close()
	committed := map[string]Sent{}
	for rows.Next() {
		var id string
		var s Sent
		if err := rows.Scan(&id, &s.AggregateType, &s.AggregateID, &s.EventType, &s.Seq); err != nil {
			t.Fatal(err)
		}
		committed[id] = s
	}
	rec.mu.Lock()
	rec.Committed = committed
	rec.Unknown = map[string]Sent{}
	rec.mu.Unlock()
}

// Entry is a stream entry as a consumer reads it.
type Entry struct {
	Stream string
	ID     string
	Values map[string]any
}

// ReadAll reads every entry of every stream whose key starts with prefix.
func ReadAll(ctx context.Context, t testing.TB, rdb redis.UniversalClient, prefix string) []Entry {
	t.Helper()
	var keys []string
	all, err := scanKeys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatalf("scan streams: %v", err)
	}
	for _, k := range all {
		if rdb.Type(ctx, k).Val() == "stream" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []Entry
	for _, k := range keys {
		// The first page is small: its entries tell how large the next may be.
		start, count := "-", int64(16)
		for {
			msgs, err := rdb.XRangeN(ctx, k, start, "+", count).Result()
			if err != nil {
				t.Fatalf("XRANGE %s: %v", k, err)
			}
			for _, m := range msgs {
				out = append(out, Entry{Stream: k, ID: m.ID, Values: m.Values})
			}
			if int64(len(msgs)) < count {
				break
			}
			start, count = "("+msgs[len(msgs)-1].ID, pageCount(msgs)
		}
	}
	return out
}

// pageCount is how many entries like msgs make a page of about 4 MiB. One
// reply of 160 entries of 256 KiB outlasted the client's read timeout on a
// loaded machine under the race detector.
func pageCount(msgs []redis.XMessage) int64 {
	n := 0
	for _, m := range msgs {
		for f, v := range m.Values {
			s, _ := v.(string)
			n += len(f) + len(s)
		}
	}
	per := max(n/max(len(msgs), 1), 1)
	return int64(min(max((4<<20)/per, 16), 10000))
}

// CheckOptions say what a mode promises.
type CheckOptions struct {
	// ExactlyOnce: no committed event appears twice.
	ExactlyOnce bool
	// AnyOrder leaves out the per-aggregate order check.
	AnyOrder bool
	// Skip lists message ids a case checks itself (dead letters, raw
	// payloads): their entries, wherever they are, are not problems.
	Skip map[string]bool
	// Prefix of the stream keys (default "outbox:").
	Prefix string
	// StreamOf names the stream an event belongs in (default: Prefix and
	// the aggregate type), for a --stream template of the case's own.
	StreamOf func(Sent) string
}

// Check verifies the streams against the record: every committed event
// present with the right fields, no rolled-back event, per-aggregate order,
// and no duplicates where promised. It returns the number of entries read.
func Check(ctx context.Context, t testing.TB, rdb redis.UniversalClient, rec *Produced, o CheckOptions) int {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = "outbox:"
	}
	entries := ReadAll(ctx, t, rdb, o.Prefix)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[string]int{}
	lastSeq := map[string]int{}
	var problems []string
	report := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for _, e := range entries {
		id, _ := e.Values["message_id"].(string)
		if o.Skip[id] {
			continue
		}
		if e.Stream == o.Prefix+"dead-letter" {
			report("dead letter %v", e.Values)
			continue
		}
		seen[id]++
		if rec.RolledBack[id] {
			report("rolled-back event %s appeared in %s", id, e.Stream)
			continue
		}
		s, ok := rec.Committed[id]
		if !ok {
			s, ok = rec.Unknown[id]
		}
		if !ok {
			report("unknown event %s in %s: %v", id, e.Stream, e.Values)
			continue
		}
		want := o.Prefix + s.AggregateType
		if o.StreamOf != nil {
			want = o.StreamOf(s)
		}
		if e.Stream != want {
			report("event %s in stream %s, want %s", id, e.Stream, want)
		}
		for field, want := range map[string]string{"aggregate_type": s.AggregateType, "aggregate_id": s.AggregateID, "event_type": s.EventType} {
			if got := e.Values[field]; got != want {
				report("event %s field %s = %v, want %s", id, field, got, want)
			}
		}
		var payload struct {
			Seq  int    `json:"seq"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal([]byte(fmt.Sprint(e.Values["payload"])), &payload); err != nil || payload.Seq != s.Seq || payload.Text != "héllo \"quoted\" 🙂" {
			report("event %s payload %v does not carry seq %d and the text (err %v)", id, e.Values["payload"], s.Seq, err)
		}
		for _, f := range []string{"occurred_at", "outbox_id", "headers"} {
			if v, _ := e.Values[f].(string); v == "" {
				report("event %s has no %s", id, f)
			}
		}
		if ts, _ := e.Values["occurred_at"].(string); ts != "" {
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				report("event %s occurred_at %q is not RFC 3339: %v", id, ts, err)
			}
		}
		key := s.AggregateType + "/" + s.AggregateID
		if seen[id] == 1 && !o.AnyOrder {
			if s.Seq <= lastSeq[key] {
				report("aggregate %s: seq %d after %d (order broken)", key, s.Seq, lastSeq[key])
			}
			lastSeq[key] = s.Seq
		}
	}
	for id := range rec.Unknown {
		if n := seen[id]; n > 1 && o.ExactlyOnce {
			report("event %s of a transaction whose COMMIT failed appended %d times", id, n)
		}
	}
	for id := range rec.Committed {
		switch n := seen[id]; {
		case n == 0:
			report("committed event %s (%+v) missing", id, rec.Committed[id])
		case n > 1 && o.ExactlyOnce:
			report("committed event %s appended %d times", id, n)
		}
	}
	if len(problems) > 0 {
		t.Errorf("%d entries, %d committed events; problems:\n  %s", len(entries), len(rec.Committed), strings.Join(problems, "\n  "))
	}
	return len(entries)
}

// WaitFor polls cond until it holds or the timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CountEntries returns the number of entries in streams with the prefix.
func CountEntries(ctx context.Context, rdb redis.UniversalClient, prefix string) int {
	var n int64
	keys, _ := scanKeys(ctx, rdb, prefix+"*")
	for _, k := range keys {
		if l, err := rdb.XLen(ctx, k).Result(); err == nil {
			n += l
		}
	}
	return int(n)
}

// scanKeys lists the keys matching match: on a Redis Cluster those of
// every master.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, match string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}
