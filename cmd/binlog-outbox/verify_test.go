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

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// verifyJSON runs verify --json and decodes what it printed.
func verifyJSON(t *testing.T, global []string, args ...string) (admin.VerifyReport, int) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "verify", "--json"), args...)...)
	var r admin.VerifyReport
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

// TestVerify_Output: the text and the JSON of verify, and its exit codes: 0
// when clean, 1 with the counts when not. What verify finds is tested in
// package admin.
func TestVerify_Output(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	var mids []string
	for i := 0; i < 3; i++ {
		mids = append(mids, insertEvent(t, env.DB, rec, "a", i))
	}
	// Poll mode's rows marked sent, each with its entry.
	if _, err := env.DB.Exec("UPDATE outbox SET sent_at = NOW(6)"); err != nil {
		t.Fatal(err)
	}
	env.RDB.Set(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table, "poll", 0)
	var ids []string
	for i, mid := range mids {
		ids = append(ids, env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"outbox_id", strconv.Itoa(i + 1), "message_id", mid}}).Val())
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "verify")...)
	if code != 0 || !strings.HasSuffix(out, "clean\n") || !strings.Contains(out, "matched:         3") || !strings.Contains(out, "pending:         0 (unsent rows)") {
		t.Fatalf("verify of a clean table: exit %d, want 0 and clean\n%s%s", code, out, errOut)
	}

	// One entry lost, one appended twice, one naming no row.
	env.RDB.XDel(ctx, "outbox:order", ids[0])
	env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"outbox_id", "2", "message_id", mids[1]}})
	env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:dead-letter", Values: []string{"outbox_id", "9999999", "message_id", "phantom-message"}})
	out, errOut, code = run(t, append(global, "verify")...)
	t.Logf("verify:\n%s%s", out, errOut)
	for _, want := range []string{env.Database + ".outbox (poll mode), all rows: 3 rows, 4 entries in 2 streams\n",
		"missing:         1", "row id=1 message_id=" + mids[0] + " has no entry", "duplicated:      1", "row id=2 message_id=" + mids[1] + " has 2 entries: outbox:order/",
		"foreign:         1", "entry outbox:dead-letter/", "(outbox_id=9999999 message_id=phantom-message) names no row"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q", want)
		}
	}
	if code != exitFailure || !strings.Contains(errOut, "1 missing, 1 duplicated, 1 foreign") || strings.Contains(out, "clean") {
		t.Errorf("verify: exit %d, want %d with the counts on stderr\n%s", code, exitFailure, errOut)
	}
	r, code := verifyJSON(t, global)
	if code != exitFailure || r.Missing != 1 || r.Duplicated != 1 || r.Foreign != 1 || r.Mode != "poll" || len(r.Examples.Duplicated) != 1 {
		t.Errorf("verify --json: exit %d, %+v; want exit 1, one of each", code, r)
	}
	for _, args := range [][]string{{"--since", "1h", "--from-id", "1"}, {"--since", "-1h"}, {"--chunk-rows", "0"}, {"--on-sent", "keep"}} {
		if _, errOut, code := run(t, append(append(global, "verify"), args...)...); code != exitUsage {
			t.Errorf("verify %v: exit %d, want %d\n%s", args, code, exitUsage, errOut)
		}
	}
}

// TestVerifyStatus_NoPasswordInOutput runs verify, status and cleanup as a
// user with a password and few grants: whatever fails, the password is not
// printed.
func TestVerifyStatus_NoPasswordInOutput(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
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
