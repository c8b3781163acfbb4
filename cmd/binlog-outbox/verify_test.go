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

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// verifyJSON runs verify --json and decodes what it printed.
func verifyJSON(t *testing.T, global []string, args ...string) (verifyResult, int) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "verify", "--json"), args...)...)
	var r verifyResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify --json: exit %d, output does not parse: %v\n%s%s", code, err, out, errOut)
	}
	return r, code
}

func field(e relaytest.Entry, name string) string {
	s, _ := e.Values[name].(string)
	return s
}

// stopRelay stops a relay process cleanly.
func stopRelay(t *testing.T, p *relayProc) {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0", code)
	}
}

func TestVerify_FindsMissingDuplicatedForeign(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}

	out, errOut, code := run(t, append(global, "verify")...)
	if code != 0 || !strings.Contains(out, "clean") || !strings.Contains(out, "missing:         0") {
		t.Fatalf("verify after relaying: exit %d, want 0 and clean\n%s%s", code, out, errOut)
	}

	// One entry lost, one appended twice, one naming no row.
	entries := relaytest.ReadAll(ctx, t, env.RDB, "outbox:")
	if len(entries) < 3 {
		t.Fatalf("%d entries, want at least 3", len(entries))
	}
	lost, twice := entries[0], entries[1]
	if err := env.RDB.XDel(ctx, lost.Stream, lost.ID).Err(); err != nil {
		t.Fatal(err)
	}
	copyOf := func(stream string, values map[string]any) {
		if err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	copyOf(twice.Stream, twice.Values)
	phantom := map[string]any{}
	for k, v := range twice.Values {
		phantom[k] = v
	}
	phantom["outbox_id"], phantom["message_id"] = "9999999", "phantom-message"
	copyOf("outbox:dead-letter", phantom)

	out, errOut, code = run(t, append(global, "verify")...)
	t.Logf("verify:\n%s%s", out, errOut)
	lostID, twiceID := field(lost, "outbox_id"), field(twice, "outbox_id")
	for _, want := range []string{"missing:         1", "row id=" + lostID + " message_id=" + field(lost, "message_id") + " has no entry",
		"duplicated:      1", "row id=" + twiceID, "has 2 entries", "foreign:         1", "outbox_id=9999999 message_id=phantom-message"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q", want)
		}
	}
	if code != exitFailure || !strings.Contains(errOut, "1 missing, 1 duplicated, 1 foreign") {
		t.Errorf("verify: exit %d, want %d with the counts on stderr\n%s", code, exitFailure, errOut)
	}
	if t.Failed() {
		t.Fatalf("verify output:\n%s%s", out, errOut)
	}

	r, code := verifyJSON(t, global)
	if code != exitFailure || r.Missing != 1 || r.Duplicated != 1 || r.Foreign != 1 || r.Mode != "binlog" || !r.CaughtUp {
		t.Errorf("verify --json: exit %d, %+v; want exit 1, one of each, binlog mode, caught up", code, r)
	}
	if len(r.Examples.Missing) != 1 || strconv.FormatUint(r.Examples.Missing[0].OutboxID, 10) != lostID ||
		len(r.Examples.Duplicated) != 1 || len(r.Examples.Duplicated[0].Entries) != 2 ||
		len(r.Examples.Foreign) != 1 || r.Examples.Foreign[0].MessageID != "phantom-message" {
		t.Errorf("verify --json examples: %+v", r.Examples)
	}

	// Rows committed after the stored position are not missing: the relay
	// is stopped, so the position never passes them.
	stopRelay(t, p)
	insertEvent(t, env.DB, rec, "late", 1)
	r, _ = verifyJSON(t, global, "--wait", "100ms", "--from-id", lostID)
	if r.Missing != 0 || r.NotYetRelayed == 0 || r.CaughtUp || len(r.Warnings) == 0 {
		t.Errorf("verify with the relay stopped: %+v; want the rows without entry as not yet relayed, with a warning", r)
	}
	if n := env.RDB.Keys(ctx, "binlog-outbox:verify:*").Val(); len(n) != 0 {
		t.Errorf("verify left its index behind: %v", n)
	}
}

func TestVerify_PollModePendingRows(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	for i := 0; i < 3; i++ {
		insertEvent(t, env.DB, rec, "a", i)
	}
	env.RDB.Set(context.Background(), "binlog-outbox:mode:"+env.Database+"."+env.Table, "poll", 0)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	r, code := verifyJSON(t, global, "--since", "1h")
	if code != 0 || r.Mode != "poll" || r.Pending != 3 || r.Missing != 0 {
		t.Errorf("verify of unsent rows in poll mode: exit %d, %+v; want exit 0 and 3 pending", code, r)
	}
}

// TestVerify_WalksLargeTable relays 20,000 rows and verifies them with
// small chunks and pages, so that every boundary is crossed many times.
func TestVerify_WalksLargeTable(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	const n = 20000
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	if _, err := env.DB.ExecContext(ctx, `INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at)
		SELECT CONCAT('big-', seq), IF(seq % 2, 'order', 'invoice'), CONCAT('agg-', seq % 97), 'x.changed', '{}', '{}', UTC_TIMESTAMP(6) FROM seq_1_to_20000`); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 60*time.Second, "20000 entries", func() bool { return relaytest.CountEntries(ctx, env.RDB, "outbox:") == n })
	stopRelay(t, p)
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	small := []string{"--chunk-rows", "700", "--page-entries", "300"}
	start := time.Now()
	r, code := verifyJSON(t, global, small...)
	t.Logf("verify of %d rows in %s", n, time.Since(start).Round(time.Millisecond))
	if code != 0 || r.Rows != n || r.Matched != n || r.Entries != n || r.Streams != 2 {
		t.Fatalf("verify: exit %d, %+v; want exit 0 and %d rows matched in 2 streams", code, r, n)
	}
	// One entry of a middle chunk lost.
	var lost redis.XMessage
	for _, m := range env.RDB.XRangeN(ctx, "outbox:order", "-", "+", 5000).Val() {
		lost = m
	}
	env.RDB.XDel(ctx, "outbox:order", lost.ID)
	r, code = verifyJSON(t, global, small...)
	if code != exitFailure || r.Missing != 1 || r.Matched != n-1 || len(r.Examples.Missing) != 1 ||
		strconv.FormatUint(r.Examples.Missing[0].OutboxID, 10) != lost.Values["outbox_id"].(string) {
		t.Fatalf("verify after XDEL of %v: exit %d, %+v; want that row missing", lost.Values["outbox_id"], code, r)
	}
}

// TestVerifyStatus_NoPasswordInOutput runs verify, status and cleanup as a
// user with a password and few grants: whatever fails, the password is not
// printed.
func TestVerifyStatus_NoPasswordInOutput(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	user := fmt.Sprintf("vfy%d", time.Now().UnixNano()%1e6)
	srv.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw-secret-7'",
		"GRANT SELECT ON `"+env.Database+"`.* TO '"+user+"'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER '"+user+"'@'%'") })
	insertEvent(t, env.DB, relaytest.NewProduced(), "a", 1)
	global := []string{"--mysql-dsn", srv.UserDSN(user, "pw-secret-7", env.Database), "--redis-url", env.RedisURL}
	for _, args := range [][]string{{"verify"}, {"verify", "--json"}, {"status"}, {"status", "--json"}, {"cleanup", "--older-than", "1s"}} {
		out, errOut, code := run(t, append(global, args...)...)
		if strings.Contains(out+errOut, "pw-secret-7") {
			t.Errorf("%v (exit %d) prints the password:\n%s%s", args, code, out, errOut)
		}
	}
}
