package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// cleanupJSON runs cleanup --json and decodes what it printed on success.
func cleanupJSON(t *testing.T, global []string, args ...string) (r admin.CleanupReport, stderr string, code int) {
	t.Helper()
	out, errOut, code := run(t, append(append(global, "cleanup", "--json"), args...)...)
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("cleanup --json: output does not parse: %v\n%s%s", err, out, errOut)
		}
	}
	return r, errOut, code
}

// insertOldEvents is relaytest.InsertOldEvents into env's table.
func insertOldEvents(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, agg string, n int) {
	t.Helper()
	relaytest.InsertOldEvents(t, env.DB, rec, agg, n)
}

func countRows(t *testing.T, env *relaytest.Env, where string) int {
	t.Helper()
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const oldRows = "occurred_at < UTC_TIMESTAMP(6) - INTERVAL 7 DAY"

// TestCleanup_Output: the text and the JSON of cleanup, and its exit codes:
// 1 with the reason and the hint when the relay has not passed the rows or
// no relay ran, 2 for bad flags and a table it cannot read. What cleanup
// deletes is tested in package admin.
func TestCleanup_Output(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	rec := relaytest.NewProduced()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	_, errOut, code := cleanupJSON(t, global, "--older-than", "7d")
	if code != exitFailure || !strings.Contains(errOut, "no relay recorded a mode") || !strings.Contains(errOut, "hint: run cleanup with the --table") {
		t.Errorf("cleanup of a table no relay ran for: exit %d, want 1, why and the hint\n%s", code, errOut)
	}
	if out, errOut, code := run(t, append(global, "position", "set", "--start-from", "now")...); code != 0 {
		t.Fatalf("position set: exit %d\n%s%s", code, out, errOut)
	}
	insertOldEvents(t, env, rec, "unread", 3)
	_, errOut, code = cleanupJSON(t, global, "--older-than", "7d", "--wait", "1s")
	if code != exitFailure || !strings.Contains(errOut, "the relay is behind or stopped") || !strings.Contains(errOut, "hint: see `binlog-outbox status`") {
		t.Errorf("cleanup with no relay running: exit %d, want 1 with the reason and the hint\n%s", code, errOut)
	}

	// Poll mode's rows marked sent.
	env.RDB.Set(context.Background(), "binlog-outbox:mode:"+env.Database+"."+env.Table, "poll", 0)
	if _, err := env.DB.Exec("UPDATE outbox SET sent_at = NOW(6) WHERE id < 3"); err != nil {
		t.Fatal(err)
	}
	r, errOut, code := cleanupJSON(t, global, "--older-than", "7d", "--dry-run")
	if code != 0 || !r.DryRun || r.Candidates != 2 || r.KeptUnsent != 1 || r.Mode != "poll" || countRows(t, env, oldRows) != 3 {
		t.Errorf("cleanup --dry-run --json: exit %d, %+v; want 2 candidates, 1 unsent kept, nothing deleted\n%s", code, r, errOut)
	}
	out, errOut, code := run(t, append(global, "cleanup", "--older-than", "7d", "--batch", "1")...)
	if code != 0 || !strings.Contains(out, env.Database+".outbox (poll mode), rows whose occurred_at is before ") ||
		!strings.Contains(out, ": deleted 2 in 2 batches, ") || !strings.Contains(out, "; 1 as old are not sent yet and stay\n") {
		t.Errorf("cleanup: exit %d, want 2 deleted\n%s%s", code, out, errOut)
	}

	if _, err := env.DB.Exec("ALTER TABLE outbox DROP COLUMN occurred_at"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, append(global, "cleanup", "--older-than", "7d")...)
	if code != exitUsage || !strings.Contains(errOut, "occurred_at") || !strings.Contains(errOut, "--column occurred_at=<name>") {
		t.Errorf("cleanup of a table without occurred_at: exit %d, want 2 and how to map it\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{}, {"--older-than", "7"}, {"--older-than", "7d", "--batch", "0"}, {"--older-than", "7d", "--pause", "-1s"}} {
		_, errOut, code := run(t, append(append(global, "cleanup"), args...)...)
		if code != exitUsage {
			t.Errorf("cleanup %v: exit %d, want 2\n%s", args, code, errOut)
		}
	}
}
