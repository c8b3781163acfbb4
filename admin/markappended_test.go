package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// countUnsent counts env's unsent rows.
func countUnsent(t *testing.T, env *relaytest.Env) int {
	t.Helper()
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// markOptions marks env's rows in the default streams.
func markOptions(t *testing.T, env *relaytest.Env) MarkOptions {
	return MarkOptions{DB: env.DB, Table: table(t, env), Redis: env.RDB, Streams: streams(t)}
}

// TestMarkAppended_TrimmedStreamsAndForeignEntries: an entry whose message_id
// is not its row's (another table sharing the stream) marks nothing, and a
// stream that lost entries stops the command unless AllowTrimmed.
func TestMarkAppended_TrimmedStreamsAndForeignEntries(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	rec := relaytest.NewProduced()
	mine := relaytest.InsertEvent(t, env.DB, rec, "a", 1)
	relaytest.InsertEvent(t, env.DB, rec, "a", 2)
	xadd(t, env.RDB, "outbox:order", []string{"message_id", mine, "outbox_id", "1"})
	xadd(t, env.RDB, "outbox:order", []string{"message_id", "someone-elses", "outbox_id", "2"})
	xadd(t, env.RDB, "outbox:order", []string{"message_id", "no-outbox-id"})
	o := markOptions(t, env)
	r, err := MarkAppended(ctx, o)
	if err != nil || r.Streams != 1 || r.Entries != 3 || r.Marked != 1 || r.AlreadySent != 0 || r.Foreign != 2 || len(r.Warnings) != 0 {
		t.Fatalf("mark-appended: %+v, %v; want 1 row marked and 2 foreign entries of 3", r, err)
	}
	if n := countUnsent(t, env); n != 1 {
		t.Errorf("%d rows unsent, want 1 (row 2: its entry carries another message_id)", n)
	}
	if r, err = MarkAppended(ctx, o); err != nil || r.Marked != 0 || r.AlreadySent != 1 || r.Foreign != 2 {
		t.Errorf("mark-appended again: %+v, %v; want row 1 sent already", r, err)
	}

	env.RDB.XDel(ctx, "outbox:order", xadd(t, env.RDB, "outbox:order", []string{"message_id", "x", "outbox_id", "2"}))
	_, err = MarkAppended(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "lost 1 of the 4 entries") || !strings.Contains(outbox.HintOf(err), "--allow-trimmed") {
		t.Fatalf("mark-appended on a trimmed stream: %v; want a failure that names the loss and, in its hint, the flag", err)
	}
	o.AllowTrimmed = true
	if r, err = MarkAppended(ctx, o); err != nil || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "outbox:order lost 1 entries") {
		t.Fatalf("mark-appended --allow-trimmed: %+v, %v; want a warning", r, err)
	}

	o.DeleteRows = true
	if r, err = MarkAppended(ctx, o); err != nil || r.Marked != 0 {
		t.Fatalf("mark-appended --on-sent delete: %+v, %v", r, err)
	}
	var n int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM outbox").Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows after a delete run that matched no unsent row, want 2 (%v)", n, err)
	}
}

// TestMarkAppended_DeadLetterWithInvalidJSON: MariaDB checks a JSON column's
// json_valid CHECK again on the UPDATE that marks a row, so a dead letter
// whose payload a producer wrote with the checks off could not be marked.
func TestMarkAppended_DeadLetterWithInvalidJSON(t *testing.T) {
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	// MySQL's JSON type cannot hold such a payload at all.
	srv.RequirePrivate(t, "a MariaDB JSON column whose CHECK a session can skip")
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION check_constraint_checks = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-json', 'raw', 'r', 'raw.changed', '{\"n\":')"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:dead-letter", Values: []string{"message_id", "bad-json", "outbox_id", "1", "reason", "payload is not valid JSON"}})
	r, err := MarkAppended(ctx, markOptions(t, env))
	if err != nil || r.Marked != 1 {
		t.Fatalf("mark-appended: %+v, %v; want the dead letter's row marked", r, err)
	}
	if n := countUnsent(t, env); n != 0 {
		t.Errorf("%d rows unsent, want 0", n)
	}
}

// TestMarkAppended_NeedsSentAtToMark: --on-sent mark on a table without
// sent_at is a configuration error with the fix.
func TestMarkAppended_NeedsSentAtToMark(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	o := markOptions(t, env)
	delete(o.Table.Mapping, "sent_at")
	_, err := MarkAppended(context.Background(), o)
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "needs the sent_at column") {
		t.Errorf("mark-appended without sent_at: %v, want ErrConfig", err)
	}
}
