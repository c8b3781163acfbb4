package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestCheckVerify_SharedMessageIDs follows issue 41's reproduction: with the
// unique key on message_id dropped, two rows with one message_id are both
// appended. check warns of the missing key, naming the fix, and verify
// reports the id the rows share, exiting 1 with a hint.
func TestCheckVerify_SharedMessageIDs(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, _ := run(t, append(global, "check", "--mode", "binlog")...); strings.Contains(out, "has no unique key") {
		t.Fatalf("check warns of a missing unique key on the table schema apply made:\n%s%s", out, errOut)
	}
	if _, err := env.DB.Exec("ALTER TABLE outbox DROP INDEX outbox_message_id_unique"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, append(global, "check", "--mode", "binlog")...)
	if code != 0 || !strings.Contains(out, "message_id has no unique key") || !strings.Contains(out, "ADD UNIQUE KEY (`message_id`)") {
		t.Fatalf("check without the unique key: exit %d, want 0 with a warning naming the fix\n%s%s", code, out, errOut)
	}

	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	const shared = "01SHAREDSHAREDSHAREDSHARED"
	for _, agg := range []string{"a", "b"} {
		if _, err := env.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', ?, 'order.changed', '{}')", shared, agg); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitFor(t, 30*time.Second, "both rows appended", func() bool { return env.RDB.XLen(ctx, "outbox:order").Val() == 2 })
	out, errOut, code = run(t, append(global, "verify")...)
	stopRelay(t, p)
	if code != 1 || !strings.Contains(out, "shared ids:      1") || !strings.Contains(out, "message_id="+shared+": 2 rows, ids 1 to 2") {
		t.Fatalf("verify: exit %d, want 1 and the shared id\n%s%s", code, out, errOut)
	}
	if hint := hintLine(errOut); !strings.Contains(hint, "ADD UNIQUE KEY (message_id)") {
		t.Errorf("verify's hint %q does not name the unique key\n%s", hint, errOut)
	}
	r, code := verifyJSON(t, global)
	if code != 1 || r.SharedIDs != 1 || len(r.Examples.SharedIDs) != 1 || r.Examples.SharedIDs[0].MessageID != shared || r.Examples.SharedIDs[0].Rows != 2 {
		t.Errorf("verify --json: exit %d, %+v; want the shared id", code, r)
	}
}
