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

// TestBackfillCommand_RefusesAndRuns: backfill refuses, with exit 2 and a
// hint and before writing anything, a --stream that can name a live
// stream (the default one or the --live-stream given), the dead-letter
// stream, a bad --rate and a bad --since; then it backfills, --json
// reporting what it appended, and a second run appends nothing.
func TestBackfillCommand_RefusesAndRuns(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	rec := relaytest.NewProduced()
	for i := range 5 {
		insertEvent(t, env.DB, rec, "o-1", i)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream", "outbox:{aggregate_type}"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "outbox:order"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--live-stream", "rebuild:{event_type}"}, "can name a stream of the relay's --live-stream"},
		{[]string{"--stream", "outbox:dead-letter", "--live-stream", "live:{aggregate_type}"}, "dead-letter stream"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--rate", "-1"}, "--rate -1 is not valid"},
		{[]string{"--stream", "rebuild:{aggregate_type}", "--since", "yesterday"}, "not an RFC 3339 time"},
		{[]string{}, `--stream "" is not valid`},
	} {
		_, stderr, code := run(t, append(append(global, "backfill"), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "hint:") {
			t.Errorf("backfill %v: exit %d, stderr %q; want exit %d, %q and a hint", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if keys := env.RDB.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("refused backfills wrote %v", keys)
	}
	for i, want := range []int{5, 0} {
		out, stderr, code := run(t, append(global, "backfill", "--stream", "rebuild:{aggregate_type}", "--since", "2000-01-01T00:00:00Z", "--json")...)
		var r admin.BackfillReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("run %d: exit %d, %v\n%s%s", i+1, code, err, out, stderr)
		}
		if r.Appended != want || r.LastID != 5 {
			t.Errorf("run %d: %+v, want %d appended, last id 5", i+1, r, want)
		}
	}
	if n := env.RDB.XLen(ctx, "rebuild:order").Val(); n != 5 {
		t.Errorf("rebuild:order has %d entries, want 5", n)
	}
	if n := env.RDB.Exists(ctx, "outbox:order", posKey(env)).Val(); n != 0 {
		t.Errorf("the backfill wrote the live stream or the position (%d keys)", n)
	}
	out, _, code := run(t, append(global, "backfill", "--stream", "rebuild2:{aggregate_type}")...)
	if code != 0 || !strings.Contains(out, "appended 5, last id 5 of 5") || !strings.Contains(out, "5 entries appended this run") {
		t.Errorf("backfill without --json: exit %d, output %q, want progress and a report line", code, out)
	}
}
