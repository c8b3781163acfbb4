package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// deadLetterRows are the rows TestDeadLetters_ReplayExactlyOnce makes a
// running relay dead-letter, by message_id: a payload that is not JSON, a
// NULL aggregate_id, an event type without a Messenger class, and one
// whose payload is not JSON and is "fixed" into one Messenger rejects too.
var deadLetterRows = []struct{ id, aggID, evType, payload string }{
	{"dl-json", "'o-1'", "order.changed", "not json"},
	{"dl-null", "NULL", "order.changed", `{"n":1}`},
	{"dl-unmapped", "'o-2'", "order.refunded", `{"r":1}`},
	{"dl-stays", "'o-3'", "order.changed", "nope"},
}

// replayJSON runs dead-letters replay --json and decodes its report.
func replayJSON(t *testing.T, global []string, args ...string) (r admin.ReplayReport, stderr string, code int) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "dead-letters", "replay", "--json"), args...)...)
	if err := json.Unmarshal([]byte(out), &r); err != nil && code != exitUsage {
		t.Logf("dead-letters replay --json: output does not parse: %v\n%s%s", err, out, errOut)
	}
	return r, errOut, code
}

// messageIDs counts the entries of stream by message_id.
func messageIDs(t *testing.T, rdb redis.UniversalClient, stream string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range rdb.XRange(context.Background(), stream, "-", "+").Val() {
		id, _ := m.Values[entry.FieldMessageID].(string)
		out[id]++
	}
	return out
}

// TestDeadLetters_ReplayExactlyOnce: rows a running relay (each mode)
// dead-lettered (a payload that is not JSON, a NULL aggregate_id, an
// unmapped Messenger event type) are listed with their reason, outbox id
// and stream; after the causes are fixed, replay delivers each exactly once
// while the relay keeps running: through a failure injected half-way (a
// target stream that is not a stream), a second and a third run, and a
// replay by --id of a row already replayed. A row still undeliverable stays
// with its new reason and exit 1; purge deletes by age.
func TestDeadLetters_ReplayExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, mode := range []string{"binlog", "poll"} {
		t.Run(mode, func(t *testing.T) { testReplayExactlyOnce(t, mode) })
	}
}

func testReplayExactlyOnce(t *testing.T, mode string) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	format := []string{"--format", entry.FormatMessenger, "--messenger-class", "order.changed=" + orderChangedClass, "--stream", "outbox:{event_type}"}
	if _, err := env.DB.Exec("ALTER TABLE outbox MODIFY aggregate_id VARCHAR(255) NULL"); err != nil {
		t.Fatal(err)
	}
	p := startRelay(t, env, append([]string{"--mode", mode}, format...)...)
	if mode == "binlog" {
		waitStoredPosition(t, env, posKey(env))
	}
	rec := relaytest.NewProduced()
	insertEvent(t, env.DB, rec, "o-1", 1)
	for _, r := range deadLetterRows {
		q := fmt.Sprintf("SET STATEMENT check_constraint_checks=0 FOR INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES ('%s', 'order', %s, '%s', '%s', UTC_TIMESTAMP(6))",
			r.id, r.aggID, r.evType, r.payload)
		if _, err := env.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	insertEvent(t, env.DB, rec, "o-1", 2)
	dead := redisstream.DefaultDeadLetterStream
	relaytest.WaitFor(t, 30*time.Second, "2 events and 4 dead letters", func() bool {
		return env.RDB.XLen(ctx, "outbox:order.changed").Val() == 2 && env.RDB.XLen(ctx, dead).Val() == 4
	})

	// An entry of an older relay, without target_stream.
	oldID := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: dead, Values: []any{entry.FieldMessageID, "dl-old", entry.FieldAggregateType, "order",
		entry.FieldAggregateID, "o-9", entry.FieldEventType, "order.cancelled", entry.FieldOutboxID, "999999", entry.FieldReason, "old reason"}}).Val()
	out, errOut, code := run(t, append(global, "dead-letters", "list", "--json", "--stream", "outbox:{event_type}")...)
	var list admin.DeadLettersReport
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Entries) != 5 {
		t.Fatalf("dead-letters list --json: exit %d, %v, want 5 entries\n%s%s", code, err, out, errOut)
	}
	wantStream := map[string]string{"dl-json": "outbox:order.changed", "dl-null": "outbox:order.changed", "dl-unmapped": "outbox:order.refunded",
		"dl-stays": "outbox:order.changed", "dl-old": "outbox:order.cancelled"}
	for _, e := range list.Entries {
		if e.Stream != wantStream[e.MessageID] || e.OutboxID == nil || e.Reason == "" || e.AgeSeconds < 0 || e.AgeSeconds > 60 || e.StreamFromTemplate != (e.MessageID == "dl-old") {
			t.Errorf("dead letter %+v: want stream %s, an outbox id, a reason, an age", e, wantStream[e.MessageID])
		}
	}
	out, _, code = run(t, append(global, "dead-letters", "list", "--stream", "outbox:{event_type}")...)
	if code != 0 || !strings.Contains(out, dead+": 5 dead letters\n") || !strings.Contains(out, "message_id dl-null  for outbox:order.changed  age ") ||
		!strings.Contains(out, "reason: aggregate_id is NULL") || !strings.Contains(out, "for outbox:order.cancelled (by the current --stream)") {
		t.Errorf("dead-letters list: exit %d\n%s", code, out)
	}
	env.RDB.XDel(ctx, dead, oldID) // its row is not in the table

	// The fixes: a payload, an aggregate_id, a class; and a payload still
	// unfit for Messenger.
	for _, q := range []string{`UPDATE outbox SET payload = '{"fixed":1}' WHERE message_id = 'dl-json'`, "UPDATE outbox SET aggregate_id = 'o-4' WHERE message_id = 'dl-null'",
		"UPDATE outbox SET payload = '0' WHERE message_id = 'dl-stays'"} {
		if _, err := env.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	fixed := append(format, "--messenger-class", `order.refunded=App\Message\OrderRefunded`)
	// The class goes to the relay first: a binlog relay records its format,
	// and a replay in another one is refused.
	stopRelay(t, p)
	if mode == "binlog" {
		_, errOut, code := replayJSON(t, global, append(fixed, "--all")...)
		if code != exitUsage || !strings.Contains(errOut, "the relay's record") && !strings.Contains(errOut, "its record") {
			t.Errorf("replay in another format than the relay records: exit %d, want 2 naming the record\n%s", code, errOut)
		}
	}
	p = startRelay(t, env, append([]string{"--mode", mode}, fixed...)...)
	if mode == "binlog" && !p.Said("reading binlog", 30*time.Second) { // it recorded the fix
		t.Fatal("the relay with the class did not start reading")
	}

	// A failure half-way: the stream of the third row is no stream.
	env.RDB.Set(ctx, "outbox:order.refunded", "in the way", 0)
	_, errOut, code = replayJSON(t, global, append(fixed, "--all")...)
	if code != exitFailure || !strings.Contains(errOut, "2 rows delivered, then: ") || !strings.Contains(errOut, "WRONGTYPE") || !strings.Contains(errOut, "hint: fix the cause and run the replay again") {
		t.Errorf("replay into a key that is no stream: exit %d, want 1 and WRONGTYPE\n%s", code, errOut)
	}
	if got := messageIDs(t, env.RDB, "outbox:order.changed"); got["dl-json"] != 1 || got["dl-null"] != 1 || len(got) != 4 {
		t.Errorf("after the failed replay outbox:order.changed holds %v, want the two rows before the failure once", got)
	}
	if got := messageIDs(t, env.RDB, dead); got["dl-unmapped"] != 1 || got["dl-stays"] != 1 || len(got) != 2 {
		t.Errorf("after the failed replay the dead letters are %v, want the two rows from the failure on", got)
	}
	env.RDB.Del(ctx, "outbox:order.refunded")

	// Run again, and a third time: each row once; the unfit row stays with
	// its new reason.
	out, errOut, code = run(t, append(append(global, "dead-letters", "replay", "--all"), fixed...)...)
	if code != exitFailure || !strings.Contains(out, "message_id dl-unmapped: delivered to outbox:order.refunded as ") ||
		!strings.Contains(out, `message_id dl-stays: stays: payload "0" is empty to PHP`) ||
		!strings.Contains(out, "1 delivered, 1 stay, 0 gone; replayed events land after the events relayed meanwhile, later ones of their aggregates too") ||
		!strings.Contains(errOut, "1 rows stay") {
		t.Errorf("replay run 2: exit %d; want dl-unmapped delivered, dl-stays staying, the order note, exit 1\n%s%s", code, out, errOut)
	}
	r, errOut, code := replayJSON(t, global, append(fixed, "--all")...)
	if code != exitFailure || r.Delivered != 0 || r.Stay != 1 || len(r.Rows) != 1 || r.Rows[0].MessageID != "dl-stays" {
		t.Errorf("replay run 3: exit %d, %+v; want nothing delivered, dl-stays staying, exit 1\n%s", code, r, errOut)
	}
	if got := messageIDs(t, env.RDB, "outbox:order.refunded"); got["dl-unmapped"] != 1 || len(got) != 1 {
		t.Errorf("outbox:order.refunded holds %v, want dl-unmapped once", got)
	}
	dl := env.RDB.XRange(ctx, dead, "-", "+").Val()
	if len(dl) != 1 || dl[0].Values[entry.FieldMessageID] != "dl-stays" || !strings.Contains(dl[0].Values[entry.FieldReason].(string), `payload "0" is empty to PHP`) {
		t.Errorf("dead letters %v: want dl-stays alone, with its new reason", dl)
	}
	// Replaying a row by --id once more appends nothing, and says so with
	// exit 1, as an --id that names nothing (issue 41: garbage exited 0).
	for _, id := range []string{"dl-unmapped", "garbage"} {
		out, errOut, code = run(t, append(append(global, "dead-letters", "replay", "--id", id), fixed...)...)
		if code != exitFailure || !strings.Contains(out, "--id "+id+": no dead letter has it") || !strings.Contains(errOut, "hint: an --id is") {
			t.Errorf("replay --id %s: exit %d, want 1, why nothing was done and a hint\n%s%s", id, code, out, errOut)
		}
	}

	// The relay kept running: later events land after the replayed ones.
	insertEvent(t, env.DB, rec, "o-1", 3)
	relaytest.WaitFor(t, 30*time.Second, "the relay's next event", func() bool { return env.RDB.XLen(ctx, "outbox:order.changed").Val() == 5 })
	for stream, n := range map[string]int{"outbox:order.changed": 5, "outbox:order.refunded": 1} {
		for id, c := range messageIDs(t, env.RDB, stream) {
			if c != 1 {
				t.Errorf("%s holds %s %d times", stream, id, c)
			}
		}
		if l := env.RDB.XLen(ctx, stream).Val(); l != int64(n) {
			t.Errorf("%s has %d entries, want %d", stream, l, n)
		}
	}

	if _, errOut, code := replayJSON(t, global); code != exitUsage {
		t.Errorf("replay without --id or --all: exit %d, want 2\n%s", code, errOut)
	}
	out, errOut, code = run(t, append(global, "dead-letters", "purge", "--older-than", "1h")...)
	if code != 0 || !strings.Contains(out, ": deleted 0 dead letters older than 1h0m0s") || env.RDB.XLen(ctx, dead).Val() != 1 {
		t.Errorf("purge --older-than 1h: exit %d, want nothing deleted\n%s%s", code, out, errOut)
	}
	time.Sleep(1100 * time.Millisecond)
	out, errOut, code = run(t, append(global, "dead-letters", "purge", "--older-than", "1s")...)
	if code != 0 || !strings.Contains(out, ": deleted 1 dead letters") || env.RDB.XLen(ctx, dead).Val() != 0 {
		t.Errorf("purge --older-than 1s: exit %d, want the dead letter deleted\n%s%s", code, out, errOut)
	}
	if _, errOut, code := run(t, append(global, "dead-letters", "purge")...); code != exitUsage {
		t.Errorf("purge without --older-than: exit %d, want 2\n%s", code, errOut)
	}
}

// TestDeadLetters_ReplayKilledExactlyOnce: replay processes killed with
// SIGKILL at random moments, again and again until one finishes, deliver
// each of 300 dead-lettered rows exactly once while the relay runs.
func TestDeadLetters_ReplayKilledExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	const rows = 300
	format := []string{"--format", entry.FormatMessenger, "--messenger-class", "order.changed=" + orderChangedClass, "--stream", "outbox:{event_type}"}
	startRelay(t, env, append([]string{"--mode", "poll"}, format...)...)
	if _, err := env.DB.Exec(`INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at)
		SELECT CONCAT('k-', seq), 'order', CONCAT('o-', seq % 7), 'order.refunded', '{}', UTC_TIMESTAMP(6) FROM seq_1_to_300`); err != nil {
		t.Fatal(err)
	}
	dead := redisstream.DefaultDeadLetterStream
	relaytest.WaitFor(t, 30*time.Second, "300 dead letters", func() bool { return env.RDB.XLen(ctx, dead).Val() == rows })

	args := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--log-format", "json", "dead-letters", "replay", "--all"}
	args = append(append(args, format...), "--messenger-class", `order.refunded=App\Message\OrderRefunded`)
	kills, halfway := 0, 0 // halfway: kills that left some rows replayed, some not
	for attempt := 0; ; attempt++ {
		if attempt > 200 {
			t.Fatalf("replay never finished: %d entries left", env.RDB.XLen(ctx, dead).Val())
		}
		p := relaytest.StartProcess(t, binary(t), args...)
		select {
		case <-p.Done():
		// The window grows with each attempt, so that a loaded machine,
		// where a replay takes longer than the first windows to start,
		// still sees one finish.
		case <-time.After(time.Duration(20+rand.IntN(60)+10*attempt) * time.Millisecond):
			// It may have finished as the time ran out: then it was not
			// killed, and its exit code says how it ended.
			if err := p.Cmd.Process.Signal(syscall.SIGKILL); err == nil {
				kills++
			} else if !errors.Is(err, os.ErrProcessDone) {
				t.Fatal(err)
			}
		}
		if n := env.RDB.XLen(ctx, dead).Val(); n > 0 && n < rows {
			halfway++
		}
		if code := p.Wait(t, 30*time.Second); code == 0 {
			break
		}
	}
	got := messageIDs(t, env.RDB, "outbox:order.refunded")
	for i := 1; i <= rows; i++ {
		if id := fmt.Sprintf("k-%d", i); got[id] != 1 {
			t.Errorf("%s is %d times in outbox:order.refunded, want once", id, got[id])
		}
	}
	if len(got) != rows || env.RDB.XLen(ctx, dead).Val() != 0 {
		t.Errorf("outbox:order.refunded holds %d message ids, %d dead letters left; want %d and 0", len(got), env.RDB.XLen(ctx, dead).Val(), rows)
	}
	t.Logf("%d replays killed before one finished, %d of them half way", kills, halfway)
}
