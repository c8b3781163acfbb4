package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// repairOptions repairs env's table against the default streams, as the
// command does by default.
func repairOptions(t *testing.T, env *relaytest.Env, apply bool) RepairOptions {
	t.Helper()
	return RepairOptions{DB: env.DB, Table: table(t, env), Redis: env.RDB, Keys: keys(env), Streams: streams(t),
		SinkConfig: redisstream.Config{PositionKey: keys(env).Position}, Chunk: DefaultVerifyChunk, Page: DefaultVerifyPage, Apply: apply}
}

// purgeStoredFile flushes and purges the binlog until the file of the
// stored position is gone from the server.
func purgeStoredFile(t *testing.T, srv *testsvc.MariaDB, env *relaytest.Env) {
	t.Helper()
	raw, err := env.RDB.Get(context.Background(), keys(env).Position).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	// MariaDB keeps a binlog until InnoDB has made its commits durable, so
	// purging may need a few tries.
	relaytest.WaitFor(t, 30*time.Second, "PURGE BINARY LOGS to remove the stored position's file", func() bool {
		srv.Exec(t, "FLUSH BINARY LOGS")
		rows, err := env.DB.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for rows.Next() {
			var name string
			var size any
			if err := rows.Scan(&name, &size); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		rows.Close()
		for _, n := range names {
			if n == stored.File {
				srv.Exec(t, "PURGE BINARY LOGS TO '"+names[len(names)-1]+"'")
				return false
			}
		}
		return true
	})
}

// TestRepair_PurgedBinlogUnderLoad: the binlog behind the stopped relay's
// position is purged; repair's dry run counts the rows committed since and
// writes nothing, apply refuses while a relay holds the lease, then appends
// them while producers write, and run resumes: every committed row once.
func TestRepair_PurgedBinlogUnderLoad(t *testing.T) {
	repairUnderLoad(t, SnapshotAuto)
}

// TestRepair_LockSnapshotUnderLoad is TestRepair_PurgedBinlogUnderLoad with
// the snapshot MySQL needs (FLUSH TABLES WITH READ LOCK, the binlog end read
// under it), which MariaDB takes too.
func TestRepair_LockSnapshotUnderLoad(t *testing.T) {
	repairUnderLoad(t, SnapshotLock)
}

// repairUnderLoad is TestRepair_PurgedBinlogUnderLoad with snapshot.
func repairUnderLoad(t *testing.T, snapshot string) {
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 50}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relayed := len(rec.Committed)

	const lost = 2000
	relaytest.InsertOldEvents(t, env.DB, rec, "lost", lost)
	purgeStoredFile(t, srv, env)

	before := len(relaytest.ReadAll(ctx, t, env.RDB, "outbox:"))
	posBefore := env.RDB.Get(ctx, keys(env).Position).Val()
	r, err := Repair(ctx, repairOptions(t, env, false))
	if err != nil || r.Missing != lost || r.Applied || r.Rows != relayed+lost || len(r.Examples) == 0 || r.Foreign != 0 {
		t.Fatalf("repair dry run: %+v, %v; want %d missing of %d rows, nothing applied", r, err, lost, relayed+lost)
	}
	if after := len(relaytest.ReadAll(ctx, t, env.RDB, "outbox:")); after != before || env.RDB.Get(ctx, keys(env).Position).Val() != posBefore {
		t.Fatalf("repair dry run wrote: %d entries before, %d after, or the position changed", before, after)
	}

	// A relay holding the lease: apply refuses and writes nothing.
	lease, err := redisstream.NewLease(env.RDB, redisstream.LeaseConfig{Key: keys(env).Lease, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if held, _, err := lease.TryAcquire(ctx); err != nil || !held {
		t.Fatalf("take the lease: %v, %v", held, err)
	}
	if _, err := Repair(ctx, repairOptions(t, env, true)); !errors.Is(err, ErrRepairRefused) {
		t.Fatalf("repair --apply with the lease held: %v, want a refusal", err)
	}
	if after := len(relaytest.ReadAll(ctx, t, env.RDB, "outbox:")); after != before || env.RDB.Get(ctx, keys(env).Position).Val() != posBefore {
		t.Fatal("the refused repair wrote")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Apply while producers write; run then resumes from the stored end.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 200, Pause: 2 * time.Millisecond}, rec)
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	o := repairOptions(t, env, true)
	o.Snapshot = snapshot
	r, err = Repair(ctx, o)
	took := time.Since(start)
	want := map[string]string{SnapshotAuto: SnapshotStatus, SnapshotLock: SnapshotLock}[snapshot]
	if err != nil || !r.Applied || r.Appended != r.Missing || r.Missing < lost || r.Snapshot != want {
		t.Fatalf("repair --apply: %+v, %v; want at least the %d lost rows appended, snapshot %s", r, err, lost, want)
	}
	t.Logf("repair --apply (snapshot %s): %d rows compared, %d missing appended in %s, position %s", r.Snapshot, r.Rows, r.Appended, took, r.Position)
	wg.Wait()
	stop = startRelay(t, env, mode.Binlog)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	stop()
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed rows, each once in the streams", len(rec.Committed))

	if r, err := Repair(ctx, repairOptions(t, env, false)); err != nil || r.Missing != 0 || r.Duplicated != 0 {
		t.Errorf("repair dry run at the end: %+v, %v; want nothing missing", r, err)
	}
}

// TestRepair_RefusesForeignEntries: entries whose rows the table lacks (the
// failover case) are reported, and apply refuses and writes nothing.
func TestRepair_RefusesForeignEntries(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relaytest.InsertEvent(t, env.DB, rec, "missing", 1)
	xadd(t, env.RDB, "outbox:order", []string{entry.FieldOutboxID, "9999999", entry.FieldMessageID, "lost-on-failover"})
	entries := len(relaytest.ReadAll(ctx, t, env.RDB, "outbox:"))
	pos := env.RDB.Get(ctx, keys(env).Position).Val()

	r, err := Repair(ctx, repairOptions(t, env, false))
	if err != nil || r.Missing != 1 || r.Foreign != 1 || r.Foreigns[0].MessageID != "lost-on-failover" {
		t.Fatalf("repair dry run: %+v, %v; want 1 missing and the foreign entry reported", r, err)
	}
	if _, err := Repair(ctx, repairOptions(t, env, true)); !errors.Is(err, ErrRepairRefused) {
		t.Fatalf("repair --apply with a foreign entry: %v, want a refusal", err)
	}
	if n := len(relaytest.ReadAll(ctx, t, env.RDB, "outbox:")); n != entries || env.RDB.Get(ctx, keys(env).Position).Val() != pos {
		t.Fatal("the refused repair wrote")
	}
}

// TestRepair_RefusesTrimmedStreams: a stream trimmed below the table's rows
// makes its trimmed rows look missing; apply refuses and writes nothing.
func TestRepair_RefusesTrimmedStreams(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	for i := 0; i < 5; i++ {
		relaytest.InsertEvent(t, env.DB, rec, "a", i)
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	if err := env.RDB.XTrimMaxLen(ctx, "outbox:order", 2).Err(); err != nil {
		t.Fatal(err)
	}
	pos := env.RDB.Get(ctx, keys(env).Position).Val()
	_, err := Repair(ctx, repairOptions(t, env, true))
	if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), "was trimmed") {
		t.Fatalf("repair --apply over a trimmed stream: %v, want a refusal", err)
	}
	if n := env.RDB.XLen(ctx, "outbox:order").Val(); n != 2 || env.RDB.Get(ctx, keys(env).Position).Val() != pos {
		t.Fatal("the refused repair wrote")
	}
}

// oneMissing has a relay append one row and stop; a second row is then
// committed that no stream holds.
func oneMissing(t *testing.T, env *relaytest.Env, rec *relaytest.Produced) {
	t.Helper()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.InsertEvent(t, env.DB, rec, "a", 0)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relaytest.InsertEvent(t, env.DB, rec, "a", 1)
}

// TestRepair_LockNeedsReload: the lock snapshot without the RELOAD
// privilege is refused with the privilege named, and nothing is written.
func TestRepair_LockNeedsReload(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	oneMissing(t, env, rec)
	user := fmt.Sprintf("noreload%d", time.Now().UnixNano()%1e9)
	env.MariaDB.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT ON `"+env.Database+"`.* TO '"+user+"'@'%'", "GRANT BINLOG MONITOR ON *.* TO '"+user+"'@'%'")
	t.Cleanup(func() { env.MariaDB.Exec(t, "DROP USER '"+user+"'@'%'") })
	db, err := sql.Open("mysql", env.MariaDB.UserDSN(user, "pw", env.Database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pos := env.RDB.Get(ctx, keys(env).Position).Val()
	o := repairOptions(t, env, true)
	o.DB, o.Snapshot = db, SnapshotLock
	_, err = Repair(ctx, o)
	if !errors.Is(err, ErrRepairRefused) || !strings.Contains(outbox.HintOf(err), "RELOAD") {
		t.Fatalf("repair --apply --snapshot lock without RELOAD: %v (hint %q), want a refusal naming RELOAD", err, outbox.HintOf(err))
	}
	if n := env.RDB.XLen(ctx, "outbox:order").Val(); n != 1 || env.RDB.Get(ctx, keys(env).Position).Val() != pos || env.RDB.Exists(ctx, keys(env).Lease).Val() != 0 {
		t.Fatalf("the refused repair wrote, or kept the lease: %d entries", n)
	}
	// The lock-free snapshot needs no RELOAD.
	o.Snapshot = SnapshotStatus
	if r, err := Repair(ctx, o); err != nil || r.Appended != 1 {
		t.Fatalf("repair --apply --snapshot status: %+v, %v; want the row appended", r, err)
	}
}

// TestRepair_LockGivesUp: a long write statement keeps the lock snapshot
// from taking its lock; it gives up after its wait with a refusal, writes
// go on, and nothing is written to Redis. The statement waits for a user
// lock the test holds, so it runs exactly as long as the test needs,
// however loaded the machine.
func TestRepair_LockGivesUp(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	oneMissing(t, env, rec)
	lockName := "binlog-outbox-test:" + env.Database + "." + env.Table
	hold, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	var got sql.NullInt64
	if err := hold.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK = %v, %v", got, err)
	}
	longConn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer longConn.Close()
	long := make(chan error, 1)
	go func() {
		_, err := longConn.ExecContext(ctx, "UPDATE `"+env.Table+"` SET event_type = event_type WHERE id = 1 AND GET_LOCK(?, 120) = 1", lockName)
		long <- err
	}()
	relaytest.WaitFor(t, 30*time.Second, "the long statement to wait for the test's lock", func() bool {
		var n int
		err := env.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ?", "%UPDATE `"+env.Table+"`%").Scan(&n)
		return err == nil && n > 0
	})
	o := repairOptions(t, env, true)
	o.Snapshot, o.lockWait = SnapshotLock, time.Second
	start := time.Now()
	_, err = Repair(ctx, o)
	took := time.Since(start)
	if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), "gave up") || !strings.Contains(outbox.HintOf(err), "SHOW PROCESSLIST") || took > 3*time.Second {
		t.Fatalf("repair --apply --snapshot lock behind a long write: %v (hint %q) after %s, want a refusal after about 1s", err, outbox.HintOf(err), took)
	}
	relaytest.InsertEvent(t, env.DB, rec, "a", 2)
	if n := env.RDB.XLen(ctx, "outbox:order").Val(); n != 1 || env.RDB.Exists(ctx, keys(env).Lease).Val() != 0 {
		t.Fatalf("the refused repair wrote, or kept the lease: %d entries", n)
	}
	if _, err := hold.ExecContext(ctx, "DO RELEASE_LOCK(?)", lockName); err != nil {
		t.Fatal(err)
	}
	if err := <-long; err != nil {
		t.Fatal(err)
	}
	if _, err := longConn.ExecContext(ctx, "DO RELEASE_LOCK(?)", lockName); err != nil {
		t.Fatal(err)
	}
}

// lostRows makes an env whose relay stopped after it relayed a few rows,
// then commits repairLost more it never reads: repair finds them missing,
// in several batches.
func lostRows(t *testing.T) (*relaytest.Env, *relaytest.Produced) {
	t.Helper()
	env, rec := newEnv(t), relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relaytest.InsertOldEvents(t, env.DB, rec, "lost", repairLost)
	return env, rec
}

// repairLost is how many rows the tests of an --apply lose: three batches,
// so that something can happen after the first and after the second.
const repairLost = 2*repairBatch + 200

// applyBeside runs repair --apply of env's repairLost rows with first
// called after its first batch (its error ends the repair), and wants only
// repair to append meanwhile (relay names who else might), and every lost
// row appended.
func applyBeside(t *testing.T, env *relaytest.Env, what, relay string, first func() error) {
	t.Helper()
	ctx := context.Background()
	before := relaytest.CountEntries(ctx, env.RDB, "outbox:")
	o := repairOptions(t, env, true)
	batches := 0
	o.afterBatch = func(ctx context.Context) error {
		batches++
		if batches == 1 {
			if err := first(); err != nil {
				return err
			}
		}
		if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != before+batches*repairBatch {
			t.Errorf("after batch %d: %d entries, want %d: %s appended", batches, n, before+batches*repairBatch, relay)
		}
		return nil
	}
	r, err := Repair(ctx, o)
	if err != nil || !r.Applied || r.Appended != repairLost || batches != 2 {
		t.Fatalf("repair --apply %s: %+v, %v (%d batches); want %d appended", what, r, err, batches, repairLost)
	}
}

// goesOnOnce commits more rows while the relay that stop ends runs, waits
// for them, stops it and wants every committed row once.
func goesOnOnce(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, stop func()) {
	t.Helper()
	ctx := context.Background()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRepair_RelayStartedMidRun: a relay (with its lease, as run starts)
// started while --apply is between batches stands by: repair holds the
// lease, ends, and the relay goes on from the position repair stored, every
// committed row once.
func TestRepair_RelayStartedMidRun(t *testing.T) {
	t.Parallel()
	env, rec := lostRows(t)
	var stopRelay func()
	applyBeside(t, env, "with a relay started after the first batch", "the relay started meanwhile", func() error {
		lease, err := redisstream.NewLease(env.RDB, redisstream.LeaseConfig{Key: keys(env).Lease, TTL: 2 * time.Second})
		if err != nil {
			return err
		}
		stopRelay = startRelay(t, env, mode.Binlog, func(c *canal.Config, sc *redisstream.Config) {
			c.Lease, c.LeaseRenew, sc.Lease = lease, 50*time.Millisecond, lease
		})
		time.Sleep(500 * time.Millisecond) // ten tries to take the lease
		return nil
	})
	goesOnOnce(t, env, rec, stopRelay)
}

// TestRepair_SecondRepairRefused: a second repair --apply while another
// holds the lease (held between its batches) refuses, naming the holder, the
// lease's remaining time and that it runs, and writes nothing; a dry run
// meanwhile says which repair holds the lease. The first goes on: every
// committed row once.
func TestRepair_SecondRepairRefused(t *testing.T) {
	t.Parallel()
	env, rec := lostRows(t)
	ctx := context.Background()
	holder := repairHolder()
	applyBeside(t, env, "with a second repair after the first batch", "the second repair", func() error {
		pos := env.RDB.Get(ctx, keys(env).Position).Val()
		_, err := Repair(ctx, repairOptions(t, env, true))
		remaining := regexp.MustCompile(`for another ([0-9.]+m?s) unless it renews it`).FindStringSubmatch(fmt.Sprint(err))
		if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), "another "+holder+" holds the lease "+keys(env).Lease) || remaining == nil ||
			!strings.Contains(err.Error(), fmt.Sprintf("it is running (process %d on this host)", os.Getpid())) {
			return fmt.Errorf("second repair --apply: %v; want a refusal naming %s, the lease's remaining time and that it runs", err, holder)
		}
		if d, perr := time.ParseDuration(remaining[1]); perr != nil || d <= 0 || d > redisstream.DefaultLeaseTTL {
			return fmt.Errorf("second repair --apply: remaining time %q, want within the lease's TTL %s", remaining[1], redisstream.DefaultLeaseTTL)
		}
		if hint := outbox.HintOf(err); !strings.Contains(hint, "let it finish") {
			return fmt.Errorf("second repair --apply: hint %q, want it to say to let the running one finish", hint)
		}
		if now := env.RDB.Get(ctx, keys(env).Position).Val(); now != pos {
			return fmt.Errorf("the refused repair changed the position")
		}
		r, err := Repair(ctx, repairOptions(t, env, false))
		if err != nil || !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.HasPrefix(w, holder+" holds the lease") }) {
			return fmt.Errorf("repair dry run beside it: %+v, %v; want a warning naming %s", r, err, holder)
		}
		return nil
	})
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRepair_PositionSetMidRun: position set while --apply is between
// batches makes the next batch's script refuse: repair stops with its
// refusal, the batches appended stay once, the position is the one set; a
// second repair appends only the rest, and run goes on: every row once.
func TestRepair_PositionSetMidRun(t *testing.T) {
	t.Parallel()
	env, rec := lostRows(t)
	ctx := context.Background()
	const lost = repairLost
	before := relaytest.CountEntries(ctx, env.RDB, "outbox:")

	o := repairOptions(t, env, true)
	var set []byte
	o.afterBatch = func(ctx context.Context) error {
		if set != nil {
			return nil
		}
		reader, sink := newReader(t, env)
		_, err := PositionSet(ctx, PositionSetOptions{PositionOptions: PositionOptions{Redis: env.RDB, Sink: sink}, Reader: reader, Start: position.Start{Kind: position.StartNow}})
		if !errors.Is(err, ErrLiveHolder) || !strings.Contains(err.Error(), "the relay repair ") {
			return fmt.Errorf("position set under the repair: %v, want a refusal naming the repair", err)
		}
		// A writer that does not look (an earlier version's position set):
		// the repair must stop all the same.
		if set, err = reader.StartPosition(ctx, position.Start{Kind: position.StartNow}); err != nil {
			return err
		}
		return sink.SetPosition(ctx, set)
	}
	r, err := Repair(ctx, o)
	if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), "the stored position moved") || r.Applied || r.Appended != repairBatch {
		t.Fatalf("repair --apply with position set after the first batch: %+v, %v; want a refusal after %d entries", r, err, repairBatch)
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != before+repairBatch || env.RDB.Get(ctx, keys(env).Position).Val() != string(set) {
		t.Fatalf("after the refusal: %d entries, want %d, and the position set kept", n, before+repairBatch)
	}
	if r, err := Repair(ctx, repairOptions(t, env, false)); err != nil || r.Missing != lost-repairBatch || r.Duplicated != 0 {
		t.Fatalf("repair dry run after the refusal: %+v, %v; want %d missing, none doubled", r, err, lost-repairBatch)
	}
	if r, err := Repair(ctx, repairOptions(t, env, true)); err != nil || r.Appended != lost-repairBatch {
		t.Fatalf("repair --apply again: %+v, %v; want the %d rows left appended", r, err, lost-repairBatch)
	}
	goesOnOnce(t, env, rec, startRelay(t, env, mode.Binlog))
}

// TestRepair_PollModeBesidePoller: in poll mode the rows marked sent whose
// entries Redis lost are missing (the unsent ones are the poller's); apply
// appends them while the poller and producers run: every row once.
func TestRepair_PollModeBesidePoller(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Poll)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 50}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	// Redis loses a stream's last entries, as a promoted Redis replica that
	// had not received them: the stream as it was before them.
	entries, err := env.RDB.XRange(ctx, "outbox:order", "-", "+").Result()
	if err != nil || len(entries) < 20 {
		t.Fatalf("XRANGE: %d entries, %v", len(entries), err)
	}
	const gone = 7
	if _, err := env.RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, "outbox:order")
		for _, e := range entries[:len(entries)-gone] {
			p.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", ID: e.ID, Values: e.Values})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := Repair(ctx, repairOptions(t, env, false)); err != nil || r.Mode != mode.Poll || r.Missing != gone {
		t.Fatalf("repair dry run in poll mode: %+v, %v; want %d missing", r, err, gone)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 100, Pause: time.Millisecond}, rec)
	}()
	r, err := Repair(ctx, repairOptions(t, env, true))
	if err != nil || !r.Applied || r.Appended != gone || r.Position != "" {
		t.Fatalf("repair --apply in poll mode: %+v, %v; want the %d rows appended, no position", r, err, gone)
	}
	wg.Wait()
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	// The repaired rows come after their aggregates' later rows.
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true, AnyOrder: true})
	if r, err := Repair(ctx, repairOptions(t, env, false)); err != nil || r.Missing != 0 || r.Duplicated != 0 {
		t.Errorf("repair dry run at the end: %+v, %v; want nothing missing", r, err)
	}
}

// TestRepair_ClusterPositionSetMidRun: on a Redis Cluster, a position
// stored while --apply is between batches makes the next batch refuse
// before it appends: the batch appended stays once, the position and the
// slot positions are left as they are; a second repair appends only the
// rest and stores the position key alone.
func TestRepair_ClusterPositionSetMidRun(t *testing.T) {
	t.Parallel()
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	srv, err := mysqlserver.Detect(ctx, env.DB)
	if err != nil {
		t.Fatal(err)
	}
	// The binlog end as a file position, as position set --start-from now
	// stores it.
	positionNow := func() []byte {
		file, pos, err := srv.BinlogPosition(ctx, env.DB)
		if err != nil {
			t.Fatal(err)
		}
		return position.Binlog{Flavor: srv.Flavor, ServerID: srv.ServerID, File: file, Pos: pos, UpdatedAt: time.Now().UTC()}.Encode()
	}
	key := keys(env).Position
	slotKey := redisstream.SlotPositionKey(key, 7)
	if err := redisstream.NewModeStore(env.Cluster, keys(env).Mode).Save(ctx, mode.Binlog); err != nil {
		t.Fatal(err)
	}
	start := positionNow()
	env.Cluster.Set(ctx, key, start, 0)
	env.Cluster.Set(ctx, slotKey, start, 0) // a slot of the relay that ran before
	const lost = repairLost
	relaytest.InsertOldEvents(t, env.DB, rec, "lost", lost)

	o := RepairOptions{DB: env.DB, Table: table(t, env), Redis: env.Cluster, Keys: keys(env), Streams: streams(t),
		SinkConfig: redisstream.Config{PositionKey: key, Cluster: true}, Chunk: DefaultVerifyChunk, Page: DefaultVerifyPage, Apply: true}
	var set []byte
	o.afterBatch = func(ctx context.Context) error {
		if set == nil {
			relaytest.InsertEvent(t, env.DB, rec, "later", 1)
			set = positionNow()
			return env.Cluster.Set(ctx, key, set, 0).Err()
		}
		return nil
	}
	r, err := Repair(ctx, o)
	if !errors.Is(err, ErrRepairRefused) || !strings.Contains(err.Error(), "the stored position moved") || r.Applied || r.Appended != repairBatch {
		t.Fatalf("repair --apply with a position stored after the first batch: %+v, %v; want a refusal after %d entries", r, err, repairBatch)
	}
	if n := relaytest.CountEntries(ctx, env.Cluster, "outbox:"); n != repairBatch || env.Cluster.Get(ctx, key).Val() != string(set) || env.Cluster.Exists(ctx, slotKey).Val() != 1 {
		t.Fatalf("after the refusal: %d entries, want %d, the position set and the slot position kept", n, repairBatch)
	}
	o.afterBatch, o.Apply = nil, false
	if r, err := Repair(ctx, o); err != nil || r.Missing != lost+1-repairBatch || r.Duplicated != 0 {
		t.Fatalf("repair dry run after the refusal: %+v, %v; want %d missing, none doubled", r, err, lost+1-repairBatch)
	}
	o.Apply = true
	if r, err := Repair(ctx, o); err != nil || r.Appended != lost+1-repairBatch || !r.Applied {
		t.Fatalf("repair --apply again: %+v, %v; want the %d rows left appended", r, err, lost+1-repairBatch)
	}
	if env.Cluster.Exists(ctx, slotKey).Val() != 0 || env.Cluster.Get(ctx, key).Val() == string(set) {
		t.Fatal("after repair --apply: the slot position is left, or the position was not stored")
	}
	relaytest.Check(ctx, t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// relayRuns runs a binlog relay of env in-process (newReader, with) until
// the test ends; wait returns what its Run returned, failing the test when
// it still runs after timeout.
func relayRuns(t *testing.T, env *relaytest.Env, with ...func(*canal.Config, *redisstream.Config)) (wait func(timeout time.Duration) error) {
	t.Helper()
	r, _ := newReader(t, env, with...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = r.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(timeout time.Duration) error {
		t.Helper()
		select {
		case <-done:
			return runErr
		case <-time.After(timeout):
			t.Fatalf("the relay still runs after %s", timeout)
			return nil
		}
	}
}

// wantRepairing fails the test unless err is a relay's refusal of a
// position a repair holds, naming the holder and the way on.
func wantRepairing(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, outbox.ErrRepairing) || !strings.Contains(err.Error(), "repair ") || !strings.Contains(outbox.HintOf(err), "repair --apply") {
		t.Errorf("%s: %v (hint %q), want the refusal of a position a repair holds, with the way on", what, err, outbox.HintOf(err))
	}
}

// TestRepair_LeaselessRelayStartedMidRun: a relay with --lease=false
// started while --apply is between batches would read the lost rows from
// the position repair started from and append them again; it finds
// repair's mark and refuses at once, repair ends, and the relay started
// again goes on: every committed row once.
func TestRepair_LeaselessRelayStartedMidRun(t *testing.T) {
	t.Parallel()
	env, rec := lostRows(t)
	applyBeside(t, env, "with a relay started after the first batch", "the relay started meanwhile", func() error {
		wantRepairing(t, "a relay without lease started after the first batch", relayRuns(t, env)(30*time.Second))
		return nil
	})
	goesOnOnce(t, env, rec, startRelay(t, env, mode.Binlog))
}

// TestRepair_LeaselessRelayRunning: a relay with --lease=false runs, caught
// up, when --apply starts (the lost rows are not in the binlog it reads);
// a row committed during the apply makes it append, which finds repair's
// mark: it stops with the refusal, appending nothing. Repair ends, and
// the relay started again goes on: every committed row once.
func TestRepair_LeaselessRelayRunning(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	rec := relaytest.NewProduced()
	stop := startRelay(t, env, mode.Binlog)
	relaytest.InsertEvent(t, env.DB, rec, "live", 1)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stop()
	wait := relayRuns(t, env)
	relaytest.InsertEvent(t, env.DB, rec, "live", 2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	// Rows the running relay never reads, as after a purged binlog.
	noBinlog, err := sql.Open("mysql", env.MariaDB.DSN(env.Database)+"&sql_log_bin=0")
	if err != nil {
		t.Fatal(err)
	}
	defer noBinlog.Close()
	relaytest.InsertOldEvents(t, noBinlog, rec, "lost", repairLost)
	applyBeside(t, env, "beside a running relay without lease", "the running relay", func() error {
		relaytest.InsertEvent(t, env.DB, rec, "live", 3)
		wantRepairing(t, "the relay without lease at its append after repair's first batch", wait(30*time.Second))
		return nil
	})
	goesOnOnce(t, env, rec, startRelay(t, env, mode.Binlog))
}

// TestRepair_InterruptedLeavesMark: an --apply cancelled after its first
// batch leaves its mark on the position: status and position show say so,
// relays refuse it with or without a lease, a dry run counts the rows
// still missing and says whose mark it is, and a second --apply appends
// them and clears the mark; run then goes on: every committed row once.
func TestRepair_InterruptedLeavesMark(t *testing.T) {
	t.Parallel()
	env, rec := lostRows(t)
	const lost = repairLost

	ctx, cancel := context.WithCancel(context.Background())
	o := repairOptions(t, env, true)
	o.afterBatch = func(ctx context.Context) error {
		cancel() // as a signal would, after the first batch
		return ctx.Err()
	}
	if r, err := Repair(ctx, o); !errors.Is(err, context.Canceled) || r.Appended != repairBatch || r.Applied {
		t.Fatalf("repair --apply cancelled after the first batch: %+v, %v; want %d appended, then the cancellation", r, err, repairBatch)
	}
	ctx = context.Background()
	_, sink := newReader(t, env)
	show, err := PositionShow(ctx, PositionOptions{Redis: env.RDB, Sink: sink})
	if err != nil || !show.Position.Repairing() || !strings.Contains(show.Text(), "held by repair ") {
		t.Fatalf("position show after the interrupted repair: %+v, %v; want the repair's mark\n%s", show, err, show.Text())
	}
	wantRepairing(t, "a relay without lease on the marked position", relayRuns(t, env)(30*time.Second))
	wantRepairing(t, "a relay with a lease on the marked position", relayRuns(t, env, func(c *canal.Config, sc *redisstream.Config) {
		lease, err := redisstream.NewLease(env.RDB, redisstream.LeaseConfig{Key: keys(env).Lease, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.Lease, c.LeaseRenew, sc.Lease = lease, 50*time.Millisecond, lease
	})(30*time.Second))

	r, err := Repair(ctx, repairOptions(t, env, false))
	if err != nil || r.Missing != lost-repairBatch || r.Duplicated != 0 || !strings.Contains(strings.Join(r.Warnings, "\n"), "marked by a repair") {
		t.Fatalf("repair dry run on the marked position: %+v, %v; want %d missing and a warning about the mark", r, err, lost-repairBatch)
	}
	r, err = Repair(ctx, repairOptions(t, env, true))
	if err != nil || !r.Applied || r.Appended != lost-repairBatch || !strings.Contains(strings.Join(r.Warnings, "\n"), "marked by a repair") {
		t.Fatalf("repair --apply again: %+v, %v; want the %d rows left appended, saying it went on from the mark", r, err, lost-repairBatch)
	}
	if show, err := PositionShow(ctx, PositionOptions{Redis: env.RDB, Sink: sink}); err != nil || show.Position.Repairing() || len(show.Warnings) != 0 {
		t.Fatalf("position show after repair --apply: %+v, %v; want the mark gone", show, err)
	}
	goesOnOnce(t, env, rec, startRelay(t, env, mode.Binlog))
}

// TestRepair_ClusterLeaselessRelayBehind: on a Redis Cluster a relay with
// --lease=false is running but behind (its binlog connection stalled) when
// --apply starts, so the rows it has yet to read are missing and repair
// appends them. Once the first batch is appended its connection goes on,
// and the relay reads those rows again: its script in their stream's
// slot finds the slot marked by repair and it stops, appending nothing
// (a mark on the position key alone would stop it only after its slot
// scripts appended them). Repair ends, and a relay started again goes on:
// every committed row once.
func TestRepair_ClusterLeaselessRelayBehind(t *testing.T) {
	t.Parallel()
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	if err := redisstream.NewModeStore(env.Cluster, keys(env).Mode).Save(ctx, mode.Binlog); err != nil {
		t.Fatal(err)
	}
	proxy := testsvc.StartProxy(t, env.MySQLAddr)
	wait := relayRuns(t, env, func(c *canal.Config, _ *redisstream.Config) {
		c.Host, c.Port = proxy.Host(), uint16(proxy.Port())
		c.ReadTimeout = time.Minute // the stall below must not end the session
	})
	relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
		return env.Cluster.Exists(ctx, keys(env).Position).Val() == 1
	})
	relaytest.InsertEvent(t, env.DB, rec, "live", 1)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	proxy.Stall()
	const behind = repairBatch + 200
	relaytest.InsertOldEvents(t, env.DB, rec, "behind", behind)
	before := relaytest.CountEntries(ctx, env.Cluster, "outbox:")

	o := RepairOptions{DB: env.DB, Table: table(t, env), Redis: env.Cluster, Keys: keys(env), Streams: streams(t),
		SinkConfig: redisstream.Config{PositionKey: keys(env).Position, Cluster: true}, Chunk: DefaultVerifyChunk, Page: DefaultVerifyPage, Apply: true}
	batches := 0
	o.afterBatch = func(ctx context.Context) error {
		batches++
		proxy.Resume()
		wantRepairing(t, "the relay without lease reading the rows repair appends", wait(30*time.Second))
		if n := relaytest.CountEntries(ctx, env.Cluster, "outbox:"); n != before+repairBatch {
			t.Errorf("after batch %d: %d entries, want %d: the relay behind appended", batches, n, before+repairBatch)
		}
		return nil
	}
	r, err := Repair(ctx, o)
	if err != nil || !r.Applied || r.Appended != behind || batches != 1 {
		t.Fatalf("repair --apply beside a relay without lease behind: %+v, %v (%d batches); want %d appended", r, err, batches, behind)
	}
	relayRuns(t, env) // from the position repair stored
	relaytest.InsertEvent(t, env.DB, rec, "live", 2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	relaytest.Check(ctx, t, env.Cluster, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
