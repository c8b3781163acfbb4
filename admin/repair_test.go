package admin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// repairOptions repairs env's table against the default streams, as the
// command does by default.
func repairOptions(t *testing.T, env *relaytest.Env, apply bool) RepairOptions {
	t.Helper()
	sink, err := redisstream.New(env.RDB, redisstream.Config{PositionKey: keys(env).Position})
	if err != nil {
		t.Fatal(err)
	}
	return RepairOptions{DB: env.DB, Table: table(t, env), Redis: env.RDB, Keys: keys(env), Streams: streams(t),
		Sink: sink, Chunk: DefaultVerifyChunk, Page: DefaultVerifyPage, Apply: apply}
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
	r, err = Repair(ctx, repairOptions(t, env, true))
	took := time.Since(start)
	if err != nil || !r.Applied || r.Appended != r.Missing || r.Missing < lost {
		t.Fatalf("repair --apply: %+v, %v; want at least the %d lost rows appended", r, err, lost)
	}
	t.Logf("repair --apply: %d rows compared, %d missing appended in %s, position %s", r.Rows, r.Appended, took, r.Position)
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
	xadd(t, env.RDB, "outbox:order", []string{redisstream.FieldOutboxID, "9999999", redisstream.FieldMessageID, "lost-on-failover"})
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
