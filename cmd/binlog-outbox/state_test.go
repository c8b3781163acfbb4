package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The relay's state in Redis against an operator's mistakes and Redis
// losing data: each test follows the steps that lost or doubled events
// before the relay kept a record of itself beside its position.

// storedPosition decodes the position stored at key.
func storedPosition(t *testing.T, env *relaytest.Env, key string) position.Binlog {
	t.Helper()
	raw, err := env.Streams().Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatalf("stored position %q: %v", raw, err)
	}
	return b
}

// TestRun_IdleRestartKeepsThePosition: a relay restarted on a server that
// writes nothing stored, within a heartbeat, the file being written at
// offset 4 (the rotate a GTID dump starts with), and looked megabytes and
// minutes behind until the next write. A quiet system must look quiet.
func TestRun_IdleRestartKeepsThePosition(t *testing.T) {
	t.Parallel()
	// A server of its own: nothing else writes to its binlog.
	env := relaytest.NewEnv(t, testsvc.StartMariaDB(t, testsvc.MariaDBOptions{}), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	for i := range 20 {
		relaytest.InsertEvent(t, env.DB, rec, "order", i)
	}
	// Lots of bytes before the relay's position, in the same file.
	relaytest.InsertOldEvents(t, env.DB, rec, "filler", 200)
	p := startRelay(t, env, "--start-from", "earliest", "--heartbeat", "200ms")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	relaytest.WaitFor(t, 10*time.Second, "a position past the last row", func() bool {
		return storedPosition(t, env, posKey(env)).Pos > 4
	})
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exit %d", code)
	}
	before := storedPosition(t, env, posKey(env))

	p = startRelay(t, env, "--heartbeat", "200ms")
	defer p.Signal(t, syscall.SIGTERM)
	if !p.Said("reading binlog", 20*time.Second) {
		t.Fatal("the relay did not start reading")
	}
	// Several heartbeats and idle checkpoints.
	time.Sleep(2 * time.Second)
	after := storedPosition(t, env, posKey(env))
	if after.File != before.File || after.Pos != before.Pos || after.GTIDSet != before.GTIDSet {
		t.Fatalf("an idle restart moved the position from %s to %s", before, after)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "status", "--json")...)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	var st struct {
		Position struct {
			BytesBehind *int64 `json:"bytes_behind"`
		} `json:"position"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Position.BytesBehind == nil || *st.Position.BytesBehind != 0 {
		t.Fatalf("status of an idle relay: bytes behind %v, want 0\n%s", st.Position.BytesBehind, strings.TrimSpace(out))
	}
}

// envFlags are the flags that point a command at env's servers.
func envFlags(env *relaytest.Env) []string {
	return []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
}

// firstGTIDEvent returns the binlog file being written and the offset of
// a transaction's start in it.
func firstGTIDEvent(t *testing.T, env *relaytest.Env) (file string, pos uint32) {
	t.Helper()
	ctx := context.Background()
	if err := env.DB.QueryRowContext(ctx, "SELECT @@GLOBAL.log_bin_basename").Err(); err != nil {
		t.Fatal(err)
	}
	var x1, x2, x3 any
	if err := env.DB.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &x1, &x2, &x3); err != nil {
		t.Fatal(err)
	}
	rows, err := env.DB.QueryContext(ctx, "SHOW BINLOG EVENTS IN '"+file+"' LIMIT 50")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ, info string
		var at, sid, end uint32
		if err := rows.Scan(&name, &at, &typ, &sid, &end, &info); err != nil {
			t.Fatal(err)
		}
		if typ == "Gtid" {
			return file, at
		}
	}
	t.Fatalf("no transaction in the first events of %s", file)
	return "", 0
}

// TestPosition_SetRefusesPointsTheServerCannotStartAt: `position set`
// stored a GTID set the server never had (a typo, 1-1-5 for 0-1-5), with
// which the relay then read the whole binlog again, and offsets past a
// file's end or inside an event, with exit 0. It refuses them, with the
// way on, and stores nothing.
func TestPosition_SetRefusesPointsTheServerCannotStartAt(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	relaytest.InsertEvent(t, env.DB, relaytest.NewProduced(), "order", 1)
	file, pos := firstGTIDEvent(t, env)
	for _, tt := range []struct{ from, says string }{
		{"1-1-5", "never had"},
		{file + ":4000000000", "past the end"},
		{file + ":" + strconv.FormatUint(uint64(pos)+1, 10), "not the start of an event"},
		{"mysql-bin.999999:4", "not on the server"},
	} {
		out, errOut, code := run(t, append(envFlags(env), "position", "set", "--start-from", tt.from)...)
		if code != exitUsage || !strings.Contains(errOut, tt.says) || !strings.Contains(errOut, "hint: ") {
			t.Errorf("position set --start-from %s: exit %d, want %d saying %q with a hint\n%s%s", tt.from, code, exitUsage, tt.says, out, errOut)
		}
		if n := env.RDB.Exists(context.Background(), posKey(env)).Val(); n != 0 {
			t.Fatalf("position set --start-from %s stored a position", tt.from)
		}
	}
}

// TestRun_RefusesAStoredPositionTheServerCannotResume: check passed and run
// read the whole binlog again from a GTID set the server never had, and
// failed with "bogus data in log event" on an offset inside an event,
// while check said it converts it. Both refuse, in the same words, and
// nothing is appended.
func TestRun_RefusesAStoredPositionTheServerCannotResume(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	relaytest.InsertEvent(t, env.DB, rec, "order", 1)
	file, pos := firstGTIDEvent(t, env)
	var id uint32
	if err := env.DB.QueryRow("SELECT @@server_id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		stored position.Binlog
		says   string
	}{
		{"a GTID set the server never had", position.Binlog{Flavor: "mariadb", ServerID: id, File: file, Pos: pos, GTIDSet: "1-1-5"}, "never had"},
		{"an offset inside an event", position.Binlog{Flavor: "mariadb", ServerID: id, File: file, Pos: pos + 1}, "not the start of an event"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.stored.UpdatedAt = time.Now()
			if err := env.RDB.Set(context.Background(), posKey(env), tt.stored.Encode(), 0).Err(); err != nil {
				t.Fatal(err)
			}
			checkAndRunFail(t, envFlags(env), []string{"stored position"}, []string{tt.says}, "no-password-here")
			if n := relaytest.CountEntries(context.Background(), env.RDB, env.Prefix); n != 0 {
				t.Fatalf("%d entries appended from a position the server cannot resume", n)
			}
		})
	}
}

// TestRun_RefusesAPurgedPosition: with the binlog after the stored
// position purged, check passed while status said purged and run failed
// with ERROR 1236. Both refuse with the way on (repair).
func TestRun_RefusesAPurgedPosition(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.StartMariaDB(t, testsvc.MariaDBOptions{}), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	relaytest.InsertEvent(t, env.DB, rec, "order", 1)
	p := startRelay(t, env, "--start-from", "earliest")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("relay exit %d", code)
	}
	// Rows the stopped relay misses, in a file purged below.
	relaytest.InsertEvent(t, env.DB, rec, "order", 2)
	env.MariaDB.Exec(t, "FLUSH BINARY LOGS")
	var last string
	var x1, x2, x3 any
	if err := env.DB.QueryRow("SHOW MASTER STATUS").Scan(&last, &x1, &x2, &x3); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 20*time.Second, "the purge of the binlog before "+last, func() bool {
		env.MariaDB.Exec(t, "PURGE BINARY LOGS TO '"+last+"'")
		var first string
		_ = env.DB.QueryRow("SHOW BINARY LOGS").Scan(&first, &x1)
		return first == last
	})
	checkAndRunFail(t, envFlags(env), []string{"stored position"}, []string{"purged", "repair"}, "no-password-here")
}

// relayed runs a relay of env until the events of rec are in the streams,
// then stops it.
func relayed(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, args ...string) {
	t.Helper()
	p := startRelay(t, env, args...)
	waitStoredPosition(t, env, posKey(env))
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
}

// insertEvents commits n events of aggregate agg, numbered after the
// first done (sequence numbers start at 1).
func insertEvents(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, agg string, done, n int) {
	t.Helper()
	for i := range n {
		relaytest.InsertEvent(t, env.DB, rec, agg, done+i+1)
	}
}

// repairThenRun runs `repair --apply` with args, wants it to succeed, and
// a relay started then to bring every event of rec to the streams once.
func repairThenRun(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, args ...string) {
	t.Helper()
	out, errOut, code := run(t, append(append(envFlags(env), "repair", "--apply"), args...)...)
	if code != 0 {
		t.Fatalf("repair --apply %v: exit %d\n%s%s", args, code, out, errOut)
	}
	p := startRelay(t, env)
	if !p.Said("reading binlog", 30*time.Second) {
		t.Fatal("the relay did not start after the repair")
	}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show now
	stopRelay(t, p)
	relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRun_LostPositionRefusedThenRepaired: with the relay stopped and rows
// committed meanwhile, the position key deleted (by hand, or evicted): run
// stored the server's end and skipped those rows, and check passed. Both
// refuse, naming repair, which appends the rows once.
func TestRun_LostPositionRefusedThenRepaired(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	insertEvents(t, env, rec, "order", 0, 1)
	relayed(t, env, rec, "--start-from", "earliest")
	insertEvents(t, env, rec, "order", 1, 10) // while the relay is stopped
	if err := env.RDB.Del(context.Background(), posKey(env)).Err(); err != nil {
		t.Fatal(err)
	}
	checkAndRunFail(t, envFlags(env), []string{"start without a position"}, []string{"its position is gone", "repair --apply"}, "no-password-here")
	if n := relaytest.CountEntries(context.Background(), env.RDB, env.Prefix); n != 1 {
		t.Fatalf("%d entries after the refusals, want the 1 relayed before", n)
	}
	repairThenRun(t, env, rec)
}

// TestRun_RedisLostItsDataRefusedThenRepaired: Redis lost everything (a
// restart without persistence, FLUSHALL) while the relay was stopped: run
// started from the server's end, and verify said clean. Run and check
// refuse with the rows the table holds, verify says it cannot tell, and
// repair --mode binlog brings every row back once.
func TestRun_RedisLostItsDataRefusedThenRepaired(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	p := startRelay(t, env)
	waitStoredPosition(t, env, posKey(env))
	insertEvents(t, env, rec, "order", 0, 5)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	insertEvents(t, env, rec, "order", 5, 10) // while the relay is stopped
	if err := env.RDB.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	checkAndRunFail(t, envFlags(env), []string{"start without a position"}, []string{"15 rows", "repair --mode binlog --apply"}, "no-password-here")
	if out, errOut, code := run(t, append(envFlags(env), "verify")...); code == 0 || !strings.Contains(errOut, "nothing in Redis says") {
		t.Fatalf("verify after Redis lost its data: exit %d, want a refusal\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, append(envFlags(env), "repair", "--apply")...); code == 0 || !strings.Contains(errOut, "--mode binlog") {
		t.Fatalf("repair --apply without --mode after Redis lost its data: exit %d, want a refusal naming --mode\n%s%s", code, out, errOut)
	}
	repairThenRun(t, env, rec, "--mode", "binlog")
}

// TestRun_FirstStartOnRowsSaysWhereToBegin: a first start on a table that
// holds rows would skip them: refused with their count, until the operator
// says where to begin; --start-from now then starts, saying what it skips.
func TestRun_FirstStartOnRowsSaysWhereToBegin(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	insertEvents(t, env, relaytest.NewProduced(), "order", 0, 3)
	checkAndRunFail(t, envFlags(env), []string{"start without a position"}, []string{"3 rows", "--start-from now"}, "no-password-here")
	out, _, _ := run(t, append(envFlags(env), "check", "--mode", "binlog", "--start-from", "now")...)
	if !strings.Contains(out, "WARN  start without a position") || !strings.Contains(out, "3 rows") {
		t.Fatalf("check --start-from now does not warn of the rows it skips:\n%s", out)
	}
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--start-from", "now")
	waitStoredPosition(t, env, posKey(env))
	insertEvents(t, env, rec, "order", 3, 2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
	relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRun_SecondPositionOnATableRefused: two relays of one table with
// different --position-keys (a new key when a table was added to a relay,
// or a second deployment) appended every event twice, and check passed.
// The second refuses, naming the first; check names it too.
func TestRun_SecondPositionOnATableRefused(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	p := startRelay(t, env)
	waitStoredPosition(t, env, posKey(env))
	defer stopRelay(t, p)
	insertEvents(t, env, rec, "order", 0, 5)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	out, errOut, code := run(t, append(envFlags(env), "check", "--mode", "binlog", "--position-key", "binlog-outbox:position:tenants")...)
	if code == 0 || !strings.Contains(out, "FAIL  relays of the tables") || !strings.Contains(out, posKey(env)) {
		t.Fatalf("check with another position key: exit %d, want the relays line naming %s\n%s%s", code, posKey(env), out, errOut)
	}
	second := startRelay(t, env, "--position-key", "binlog-outbox:position:tenants")
	if code := second.Wait(t, 30*time.Second); code == 0 || !strings.Contains(second.Out.String(), posKey(env)) {
		t.Fatalf("a relay of another position on the table: exit %d, want a refusal naming %s", code, posKey(env))
	}
	insertEvents(t, env, rec, "order", 5, 5)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestCommands_UseTheRelaysRecord: the stream template and format lived in
// the relay's flags only: backfill --stream equal to the relay's own
// (non-default) template wrote duplicates into its live streams, dead-letters
// replay without --stream delivered to a stream nobody reads, and repair
// --apply with a wrong --stream appended to other streams. The commands take
// the relay's settings from its record and refuse a flag that contradicts
// it.
func TestCommands_UseTheRelaysRecord(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	const live = "events:{aggregate_type}"
	p := startRelay(t, env, "--stream", live)
	waitStoredPosition(t, env, posKey(env))
	insertEvents(t, env, rec, "order", 0, 5)
	insertRaw := func(q string) {
		if _, err := env.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// A dead letter: NULL aggregate_id.
	insertRaw("ALTER TABLE outbox MODIFY aggregate_id VARCHAR(255) NULL")
	insertRaw("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES ('dl-1', 'order', NULL, 'order.changed', '{}', UTC_TIMESTAMP(6))")
	relaytest.WaitFor(t, 30*time.Second, "5 events and a dead letter", func() bool {
		return env.RDB.XLen(ctx, "events:order").Val() == 5 && env.RDB.XLen(ctx, "outbox:dead-letter").Val() == 1
	})
	stopRelay(t, p)
	global := envFlags(env)

	// backfill into the relay's own streams: refused, nothing written.
	_, errOut, code := run(t, append(global, "backfill", "--stream", live)...)
	if code != exitUsage || !strings.Contains(errOut, "live-stream") {
		t.Errorf("backfill --stream %s (the relay's): exit %d, want a refusal\n%s", live, code, errOut)
	}
	_, errOut, code = run(t, append(global, "backfill", "--stream", "rebuild:{aggregate_type}", "--live-stream", "outbox:{aggregate_type}")...)
	if code != exitUsage || !strings.Contains(errOut, "contradicts the relay's record") {
		t.Errorf("backfill --live-stream other than the relay's: exit %d, want a refusal naming its record\n%s", code, errOut)
	}
	// repair with another --stream: refused.
	_, errOut, code = run(t, append(global, "repair", "--apply", "--stream", "outbox:{aggregate_type}")...)
	if code != exitUsage || !strings.Contains(errOut, "contradicts the relay's record") {
		t.Errorf("repair --apply --stream other than the relay's: exit %d, want a refusal naming its record\n%s", code, errOut)
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 1 {
		t.Fatalf("%d entries under outbox:, want the dead letter alone", n)
	}
	// The fix, then replay without --stream: to the relay's stream.
	insertRaw("UPDATE outbox SET aggregate_id = 'o-9' WHERE message_id = 'dl-1'")
	out, errOut, code := run(t, append(global, "dead-letters", "replay", "--all")...)
	if code != 0 || !strings.Contains(out, "delivered to events:order") {
		t.Fatalf("dead-letters replay --all: exit %d, want the row delivered to events:order\n%s%s", code, out, errOut)
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Errorf("%d entries under outbox: after the replay, want none", n)
	}
}

// TestPosition_RefusedUnderALiveRelay: position set and reset under a
// running relay stopped it, and its hint led to a restart that skipped
// events. They refuse, naming the relay; so does a relay started with
// --lease=false beside one that holds the lease, which it would fence.
func TestPosition_RefusedUnderALiveRelay(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	p := startRelay(t, env)
	waitStoredPosition(t, env, posKey(env))
	if !p.Said("reading binlog", 30*time.Second) {
		t.Fatal("the relay did not start reading")
	}
	before := env.RDB.Get(context.Background(), posKey(env)).Val()
	for _, args := range [][]string{{"position", "set", "--start-from", "now"}, {"position", "reset"}} {
		out, errOut, code := run(t, append(envFlags(env), args...)...)
		if code != exitUsage || !strings.Contains(errOut, "holding the lease") || !strings.Contains(errOut, "hint: stop that relay") {
			t.Errorf("%v under a running relay: exit %d, want a refusal naming it\n%s%s", args, code, out, errOut)
		}
	}
	// The relay goes on storing its own positions (the shared server's other
	// databases move the binlog); what must not happen is another writer.
	if got := env.RDB.Get(context.Background(), posKey(env)).Val(); writerOf(t, got) != writerOf(t, before) {
		t.Errorf("the position was written under the relay by another writer: %s, was %s", got, before)
	}
	out, errOut, code := run(t, append(envFlags(env), "check", "--lease=false")...)
	if code == 0 || !strings.Contains(out, "FAIL  reading without the lease") || !strings.Contains(out, "holds the lease") {
		t.Errorf("check --lease=false beside the holder: exit %d, want the refusal\n%s%s", code, out, errOut)
	}
	out, code = runProcess(t, append(envFlags(env), "run", "--lease=false")...)
	if code == 0 || !strings.Contains(out, "holds the lease") {
		t.Errorf("run --lease=false beside the holder: exit %d, want the refusal\n%s", code, out)
	}
	// The relay reads on.
	rec := relaytest.NewProduced()
	insertEvents(t, env, rec, "order", 0, 3)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, p)
}

// TestRun_WithoutLeaseTwinWaitsAndStops: a --lease=false twin of a running
// --lease=false relay (the same configuration started twice) connected with
// its server id and knocked it off its binlog connection again and again. It
// opens no binlog connection while the other claims the id, and stops
// naming it; the running one reads on.
func TestRun_WithoutLeaseTwinWaitsAndStops(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	first := startRelay(t, env, "--lease=false")
	waitStoredPosition(t, env, posKey(env))
	if !first.Said("reading binlog", 30*time.Second) {
		t.Fatal("the first relay did not start reading")
	}
	twin := startRelay(t, env, "--lease=false")
	rec := relaytest.NewProduced()
	insertEvents(t, env, rec, "order", 0, 3)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if code := twin.Wait(t, 90*time.Second); code == 0 || !strings.Contains(twin.Out.String(), "is in use by the relay") {
		t.Fatalf("the twin: exit %d, want a refusal naming the first relay", code)
	}
	if strings.Contains(twin.Out.String(), "reading binlog") {
		t.Error("the twin opened a binlog connection")
	}
	insertEvents(t, env, rec, "order", 3, 3)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	stopRelay(t, first)
	relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestRun_KeysInTheStreamsNamespace: a key of another type where the
// template puts a stream stalled the whole relay, and check passed; a
// template that could name the relay's own position key was accepted by
// run. The stream's events become dead letters with the reason, the rest
// flow, check reports the key; the template is refused by every command.
func TestRun_KeysInTheStreamsNamespace(t *testing.T) {
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	for _, args := range [][]string{{"run", "--stream", "{aggregate_type}"}, {"check", "--stream", "{aggregate_type}"}, {"backfill", "--stream", "{aggregate_type}"}} {
		out, errOut, code := run(t, append(envFlags(env), args...)...)
		if code == 0 || !strings.Contains(out+errOut, "which the relay keeps for itself") {
			t.Errorf("%v: exit %d, want a refusal of a template that can name the relay's keys\n%s%s", args, code, out, errOut)
		}
	}
	if err := env.RDB.Set(ctx, "outbox:invoice", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out, _, _ := run(t, append(envFlags(env), "check")...)
	if !strings.Contains(out, "WARN  stream keys") || !strings.Contains(out, "outbox:invoice (string)") {
		t.Errorf("check does not report the key of another type:\n%s", out)
	}
	p := startRelay(t, env)
	waitStoredPosition(t, env, posKey(env))
	rec := relaytest.NewProduced()
	insertEvents(t, env, rec, "order", 0, 2)
	if _, err := env.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ('inv-1', 'invoice', 'i-1', 'invoice.sent', '{}', '{}', UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	insertEvents(t, env, rec, "order", 2, 2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	relaytest.WaitFor(t, 30*time.Second, "the invoice's dead letter", func() bool {
		for _, m := range env.RDB.XRange(ctx, "outbox:dead-letter", "-", "+").Val() {
			if m.Values["message_id"] == "inv-1" && strings.Contains(fmt.Sprint(m.Values["reason"]), "outbox:invoice holds a string") {
				return true
			}
		}
		return false
	})
	stopRelay(t, p)
	if got := env.RDB.Get(ctx, "outbox:invoice").Val(); got != "x" {
		t.Errorf("outbox:invoice is %q, want it left as it was", got)
	}
}

// writerOf is the writer a stored position names.
func writerOf(t *testing.T, stored string) string {
	t.Helper()
	b, err := position.Decode([]byte(stored))
	if err != nil {
		t.Fatalf("stored position %q: %v", stored, err)
	}
	return b.Writer
}
