package canal

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// hintRows inserts rows of aggregate type "hint" with the given message ids,
// through q's columns besides message_id, aggregate_type and aggregate_id.
func hintRows(t *testing.T, env *relaytest.Env, cols, vals string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		q := "INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id" + cols + ") VALUES (?, 'hint', 'a'" + vals + ")"
		if _, err := env.DB.Exec(q, id); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// hintStream returns the message ids in the stream of aggregate type
// "hint", in stream order.
func hintStream(t *testing.T, env *relaytest.Env) []string {
	t.Helper()
	var ids []string
	for _, m := range env.RDB.XRange(context.Background(), "outbox:hint", "-", "+").Val() {
		ids = append(ids, fmt.Sprint(m.Values["message_id"]))
	}
	return ids
}

// runStops runs a reader made by tweak until it stops, which it must do
// with a configuration error within 30s, and returns the error.
func runStops(t *testing.T, env *relaytest.Env, tweak func(*Config)) error {
	t.Helper()
	r, _ := newReader(t, env, tweak)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
		t.Fatalf("Run returned %v, want ErrConfig with a hint", err)
	}
	return err
}

// deliveredOnce waits until the "hint" stream holds want, and checks that
// it holds each exactly once, in that order.
func deliveredOnce(t *testing.T, env *relaytest.Env, want ...string) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the rows "+strings.Join(want, ", "), func() bool { return len(hintStream(t, env)) >= len(want) })
	time.Sleep(300 * time.Millisecond) // a duplicate would be appended by now
	if got := hintStream(t, env); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("stream holds %v, want %v, each once", got, want)
	}
}

// asRun sets the mapping and absent columns the way run resolves them
// against the table as it is now.
func asRun(t *testing.T, env *relaytest.Env, flags ...string) func(*Config) {
	t.Helper()
	m, err := schema.ParseMapping(flags)
	if err != nil {
		t.Fatal(err)
	}
	res, err := schema.Resolve(context.Background(), env.DB, env.Database, env.Table, m, schema.DeclaredColumns(flags), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.ProblemsError(env.Table, res.Problems); err != nil {
		t.Fatalf("run would refuse the table: %v", err)
	}
	return func(c *Config) { c.Mapping, c.Absent = res.Mapping, res.Absent }
}

// TestReader_DroppedColumnHintGoesOn: rows written with an optional column
// that was dropped while the relay was behind. A plain restart stops at them
// again, so the hint must not offer it; the step it names (--column
// headers=-) relays them, and the rows after the DROP, exactly once.
func TestReader_DroppedColumnHintGoesOn(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	_, _, stop := startedReader(t, env, asRun(t, env))
	hintRows(t, env, ", event_type, payload", ", 'e', '{}'", "before")
	relaytest.WaitFor(t, 30*time.Second, "the first row", func() bool { return len(hintStream(t, env)) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	hintRows(t, env, ", event_type, payload, headers", ", 'e', '{}', '{\"h\":1}'", "with-headers")
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox DROP COLUMN headers")
	hintRows(t, env, ", event_type, payload", ", 'e', '{}'", "after-drop")

	err := runStops(t, env, asRun(t, env))
	hint := outbox.HintOf(err)
	if !strings.Contains(hint, "a plain restart stops here again") || !strings.Contains(hint, "restart with --column headers=-") {
		t.Fatalf("hint %q does not name the step that goes on (--column headers=-)", hint)
	}
	// What the hint says of a plain restart is so.
	if again := runStops(t, env, asRun(t, env)); again.Error() != err.Error() {
		t.Fatalf("a plain restart stopped with %v, want the same stop %v", again, err)
	}
	// Follow the hint.
	r, _ := newReader(t, env, asRun(t, env, "headers=-"))
	stop = startReader(r)
	deliveredOnce(t, env, "before", "with-headers", "after-drop")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestReader_AddedColumnHintGoesOn: an optional column the table lacked at
// start-up is added while the relay runs. The hint's restart relays it from
// the stopping point on, every row exactly once.
func TestReader_AddedColumnHintGoesOn(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox DROP COLUMN headers")
	r, _ := newReader(t, env, asRun(t, env))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitStarted(t, r)
	hintRows(t, env, ", event_type, payload", ", 'e', '{}'", "before")
	relaytest.WaitFor(t, 30*time.Second, "the first row", func() bool { return len(hintStream(t, env)) == 1 })
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox ADD COLUMN headers JSON NULL")
	hintRows(t, env, ", event_type, payload, headers", ", 'e', '{}', '{\"h\":1}'", "with-headers")
	err := <-done
	if !errors.Is(err, outbox.ErrConfig) || !strings.HasPrefix(outbox.HintOf(err), "restart the relay:") {
		t.Fatalf("Run returned %v (hint %q), want ErrConfig and the hint to restart", err, outbox.HintOf(err))
	}
	// Follow the hint: run resolves the table again, which has headers.
	r2, _ := newReader(t, env, asRun(t, env))
	stop := startReader(r2)
	deliveredOnce(t, env, "before", "with-headers")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if h := env.RDB.XRange(context.Background(), "outbox:hint", "-", "+").Val()[1].Values["headers"]; h != `{"h":1}` {
		t.Errorf("headers of the row after the ADD: %v, want {\"h\":1}", h)
	}
}

// TestReader_RestoredColumnHintGoesOn: rows written while a required column
// was dropped, read after it was added again. No --column can map what the
// rows lack, and a restart reads them again: the hint names the position
// after the DDL that restored it, and following it the relay goes on with
// every later row exactly once.
func TestReader_RestoredColumnHintGoesOn(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	_, _, stop := startedReader(t, env, asRun(t, env))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	hintRows(t, env, ", event_type, payload", ", 'e', '{}'", "before")
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox DROP COLUMN event_type")
	hintRows(t, env, ", payload", ", '{}'", "without-event-type")
	env.MariaDB.Exec(t, "ALTER TABLE `"+env.Database+"`.outbox ADD COLUMN event_type VARCHAR(255) NOT NULL DEFAULT 'restored' AFTER aggregate_id")
	hintRows(t, env, ", event_type, payload", ", 'e', '{}'", "after")

	err := runStops(t, env, asRun(t, env))
	hint := outbox.HintOf(err)
	if strings.Contains(hint, "--column event_type=") {
		t.Errorf("hint %q offers a --column that has nothing to map", hint)
	}
	if !strings.Contains(err.Error(), "ADD COLUMN event_type") {
		t.Errorf("error %q does not name the DDL that restored the column", err)
	}
	m := regexp.MustCompile("position set --start-from ([^`]+)`").FindStringSubmatch(hint)
	if m == nil || !strings.Contains(hint, "repair --apply") {
		t.Fatalf("hint %q names no position to resume from, or no way to republish the rows skipped", hint)
	}
	// Follow the hint: the position after the DDL.
	start, err := position.ParseStart(m[1])
	if err != nil {
		t.Fatal(err)
	}
	r, sink := newReader(t, env, asRun(t, env))
	raw, err := r.StartPosition(context.Background(), start)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.SetPosition(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	stop = startReader(r)
	deliveredOnce(t, env, "before", "after")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
