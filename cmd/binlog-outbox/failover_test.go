package main

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// failoverEnv is an outbox table on a private GTID primary with one replica
// (server_id 2, log_slave_updates, gtid_strict_mode) that has caught up.
type failoverEnv struct {
	*relaytest.Env
	primary, replica *testsvc.MariaDB
}

func newFailoverEnv(t *testing.T) *failoverEnv {
	t.Helper()
	primary := testsvc.StartPrimary(t, testsvc.MariaDBOptions{})
	replica := testsvc.StartReplica(t, primary, 2, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, primary, testsvc.SharedRedis(t))
	replica.WaitReplicated(t, primary)
	return &failoverEnv{Env: env, primary: primary, replica: replica}
}

// produce runs producers on db in the background; wait returns when they
// are done, or failed because their server died.
func produce(t *testing.T, db *sql.DB, table string, o relaytest.ProduceOptions, rec *relaytest.Produced) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(context.Background(), t, db, table, o, rec)
	}()
	return wg.Wait
}

// waitAppended waits until the streams hold at least n entries: the relay
// is in the middle of the load.
func waitAppended(t *testing.T, env *relaytest.Env, n int) {
	t.Helper()
	relaytest.WaitFor(t, 60*time.Second, "the relay to append events", func() bool {
		return relaytest.CountEntries(context.Background(), env.RDB, "outbox:") >= n
	})
}

// failOver kills the primary in the middle of its producers' load and
// promotes the replica. Commits are frozen first (FLUSH TABLES WITH READ
// LOCK: the producers' next commits wait, and fail when the server dies),
// until the replica has every transaction the primary committed: the
// guarantee of semi-synchronous replication, which private servers cannot
// give. Without it the old primary's last transactions can be lost, and
// the relay may have appended them (docs/database-failover.md).
func (f *failoverEnv) failOver(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	conn, err := f.primary.Open(t, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	f.replica.WaitReplicated(t, f.primary)
	f.primary.Kill(t)
	conn.Close()
	f.replica.Promote(t)
}

// dsnVia is the DSN of m's database with addr (a proxy) as the address.
func dsnVia(t *testing.T, m *testsvc.MariaDB, database, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(m.DSN(database))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = addr
	return cfg.FormatDSN()
}

// checkResumedByGTID checks that the relay noticed the new server (one
// warning naming both) and that the stored position is a GTID set of the
// promoted replica's.
func checkResumedByGTID(t *testing.T, env *relaytest.Env, p *relayProc) {
	t.Helper()
	out := p.Out.String()
	for _, want := range []string{"connected to another server than the one the stored position was read from", `"stored_server":"server_id 1"`, `"server":"server_id 2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the relay's log does not contain %s", want)
		}
	}
	raw, err := env.RDB.Get(context.Background(), posKey(env)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if b.ServerID != 2 || !strings.Contains(b.GTIDSet, "0-2-") {
		t.Errorf("stored position %s of server_id %d; want a GTID set holding the promoted server's transactions (0-2-n), read from server_id 2", b, b.ServerID)
	}
}

// checkSays runs `check` against dsn and wants its failover line to have
// status and to hold want.
func checkSays(t *testing.T, env *relaytest.Env, dsn, status, want string) {
	t.Helper()
	checkLineSays(t, env, dsn, "position on failover", status, want)
}

// checkLineSays runs check against dsn and wants its line name to have
// status and say want.
func checkLineSays(t *testing.T, env *relaytest.Env, dsn, name, status, want string) {
	t.Helper()
	out, errOut, _ := run(t, "--mysql-dsn", dsn, "--redis-url", env.RedisURL, "check", "--mode", "binlog")
	for _, line := range strings.Split(out, "\n") {
		// "STATUS  name  detail": the name follows the status.
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(strings.Join(f[1:], " "), name) {
			if !strings.HasPrefix(line, status) || !strings.Contains(line, want) {
				t.Errorf("check says %q, want %s with %q", line, status, want)
			}
			return
		}
	}
	t.Errorf("check printed no %s line:\n%s%s", name, out, errOut)
}

// TestRun_FailoverToPromotedReplicaByGTID kills the primary in the middle of
// a load while the relay reads it by GTID, promotes the replica, and starts
// the relay again with the new primary's DSN while the producers go on
// there: it resumes from the stored GTID set, and every committed event is
// in the streams exactly once.
func TestRun_FailoverToPromotedReplicaByGTID(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	for name, start := range failoverStarts {
		t.Run(name, func(t *testing.T) { failoverToPromotedReplica(t, start) })
	}
}

// failoverStarts are the first starts the failover tests run with: an
// explicit GTID set, and the default (--start-from now), which stores a GTID
// position on MariaDB too.
var failoverStarts = map[string]func(t *testing.T, f *failoverEnv) []string{
	"gtid set": func(t *testing.T, f *failoverEnv) []string {
		return []string{"--start-from", f.primary.GTIDBinlogPos(t)}
	},
	"default": func(*testing.T, *failoverEnv) []string { return nil },
}

func failoverToPromotedReplica(t *testing.T, start func(*testing.T, *failoverEnv) []string) {
	f := newFailoverEnv(t)
	rec := relaytest.NewProduced()
	p := startRelay(t, f.Env, append([]string{"--mode", "binlog"}, start(t, f)...)...)
	waitStoredPosition(t, f.Env, posKey(f.Env))

	wait := produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	waitAppended(t, f.Env, 200)
	f.failOver(t)
	wait()
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
	checkSays(t, f.Env, f.replica.DSN(f.Database), "PASS", "the stored position is a GTID set")

	newPrimary := f.replica.Open(t, f.Database)
	newPrimary.SetMaxOpenConns(32)
	wait = produce(t, newPrimary, f.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 60, Pause: time.Millisecond}, rec)
	p = startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog")
	wait()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	stopRelay(t, p)
	n := relaytest.Check(context.Background(), t, f.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	checkResumedByGTID(t, f.Env, p)
	t.Logf("%d committed events (%d whose COMMIT the kill interrupted), %d entries", len(rec.Committed), len(rec.Unknown), n)
}

// TestRun_FailoverBehindTheSameAddress keeps the relay's address while the
// server behind it changes, as a virtual IP, a DNS name or a database proxy
// does in a managed failover: the relay, running all along, notices the
// promoted replica and resumes by GTID, with nothing lost or doubled.
func TestRun_FailoverBehindTheSameAddress(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	for name, start := range failoverStarts {
		t.Run(name, func(t *testing.T) { failoverBehindTheSameAddress(t, start) })
	}
}

func failoverBehindTheSameAddress(t *testing.T, start func(*testing.T, *failoverEnv) []string) {
	f := newFailoverEnv(t)
	rec := relaytest.NewProduced()
	vip := testsvc.StartProxy(t, f.primary.Addr())
	p := startRelayDSN(t, f.Env, dsnVia(t, f.primary, f.Database, vip.Addr()), append([]string{"--mode", "binlog"}, start(t, f)...)...)
	waitStoredPosition(t, f.Env, posKey(f.Env))

	wait := produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	waitAppended(t, f.Env, 200)
	f.failOver(t)
	vip.Retarget(f.replica.Addr())
	wait()

	newPrimary := f.replica.Open(t, f.Database)
	newPrimary.SetMaxOpenConns(32)
	produce(t, newPrimary, f.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 60, Pause: time.Millisecond}, rec)()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	if p.Exited() {
		t.Fatalf("the relay exited at the failover")
	}
	stopRelay(t, p)
	n := relaytest.Check(context.Background(), t, f.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	checkResumedByGTID(t, f.Env, p)
	t.Logf("%d committed events (%d whose COMMIT the kill interrupted), %d entries", len(rec.Committed), len(rec.Unknown), n)
}

// TestRun_ReadsFromReplica points the relay at a replica (log_slave_updates)
// while producers write to the primary: every event exactly once.
func TestRun_ReadsFromReplica(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	f := newFailoverEnv(t)
	rec := relaytest.NewProduced()
	p := startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog")
	waitStoredPosition(t, f.Env, posKey(f.Env))
	produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 60, Pause: time.Millisecond}, rec)()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	stopRelay(t, p)
	n := relaytest.Check(context.Background(), t, f.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}

// checkFilePositionRefused checks that the relay stopped because its file
// position belongs to another server, and offered the ways on.
func checkFilePositionRefused(t *testing.T, p *relayProc) {
	t.Helper()
	if code := p.Wait(t, 60*time.Second); code == 0 {
		t.Fatalf("the relay exited with 0 on another server's file position")
	}
	out := p.Out.String()
	for _, want := range []string{"belongs to server_id 1", "this is server_id 2", "file positions are server-local", "--start-from earliest", "--start-from now"} {
		if !strings.Contains(out, want) {
			t.Errorf("the relay's output does not contain %q", want)
		}
	}
}

// TestRun_FilePositionRefusedOnAnotherServer: a file position is
// server-local; a relay started on the replica, whose binlog files have the
// same names, refuses one the primary wrote (an earlier version's, or a
// server's without GTIDs), with the recovery choices. On the primary itself
// check says the relay converts it to a GTID position.
func TestRun_FilePositionRefusedOnAnotherServer(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	f := newFailoverEnv(t)
	rec := relaytest.NewProduced()
	p := startRelay(t, f.Env, "--mode", "binlog")
	waitStoredPosition(t, f.Env, posKey(f.Env))
	produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	stopRelay(t, p)
	ctx := context.Background()
	raw, err := f.RDB.Get(ctx, posKey(f.Env)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !b.GTIDMode() {
		t.Fatalf("the default first start stored %s, want a GTID position", b)
	}
	b.GTIDSet, b.EmptyGTIDSet, b.LastGTID = "", false, ""
	if err := f.RDB.Set(ctx, posKey(f.Env), b.Encode(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	checkSays(t, f.Env, f.primary.DSN(f.Database), "PASS", "converts it to a GTID position at start")
	checkLineSays(t, f.Env, f.replica.DSN(f.Database), "stored position", "FAIL", "belongs to server_id 1")
	checkFilePositionRefused(t, startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog"))
}

// TestRun_FailoverLostTransactionsRefused: with asynchronous replication
// the old primary can commit transactions it never ships, and the relay may
// append their events before it dies. The stored GTID set then names
// transactions the promoted replica does not have: check and the relay
// refuse to resume there with the ways on, rather than guess.
func TestRun_FailoverLostTransactionsRefused(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	f := newFailoverEnv(t)
	rec := relaytest.NewProduced()
	p := startRelay(t, f.Env, "--mode", "binlog", "--start-from", f.primary.GTIDBinlogPos(t))
	waitStoredPosition(t, f.Env, posKey(f.Env))
	// The replica stops receiving: what the primary commits now is never
	// shipped.
	f.replica.Exec(t, "STOP SLAVE")
	produce(t, f.DB, f.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10, RollbackRatio: 0.0001}, rec)()
	relaytest.WaitDelivered(t, f.Env, rec, 60*time.Second)
	stopRelay(t, p)
	f.primary.Kill(t)
	f.replica.Promote(t)
	f.replica.Exec(t, "INSERT INTO `"+f.Database+"`.`"+f.Table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) "+
		"VALUES ('"+relaytest.MessageID()+"', 'order', 'new-primary', 'order.changed', '{}', '{}', UTC_TIMESTAMP(6))")

	checkLineSays(t, f.Env, f.replica.DSN(f.Database), "stored position", "FAIL", "never had")
	p = startRelayDSN(t, f.Env, f.replica.DSN(f.Database), "--mode", "binlog")
	if code := p.Wait(t, 60*time.Second); code == 0 {
		t.Fatalf("the relay exited with 0 on a server that lacks transactions it appended")
	}
	if out := p.Out.String(); !strings.Contains(out, "never shipped") || !strings.Contains(out, "--start-from <gtid set>") {
		t.Errorf("the relay's output does not explain the lost transactions:\n%s", relaytest.TailLines(out, 10))
	}
}
