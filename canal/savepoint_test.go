package canal

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The binlog carries ROLLBACK TO only when a non-transactional table changed
// after the savepoint; MariaDB then logs SAVEPOINT and ROLLBACK TO with the
// names as each statement wrote them, in backquotes. The server matches them
// in any letter case, so the relay must too, or it appends the rolled-back
// rows. A one-phase XA commit, which MariaDB logs as an ordinary
// transaction, is relayed too.
func TestReader_SavepointNamesAndOnePhaseXA(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, _ := newReader(t, env, nil)
	stop := startReader(r)
	waitStarted(t, r)

	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insert := func(id string) {
		t.Helper()
		exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', 'o1', 'order.changed', '{}')", id)
	}
	exec("CREATE TABLE audit (id INT) ENGINE=MyISAM")

	exec("BEGIN")
	insert("kept-1")
	exec("SAVEPOINT /* app */ `My ``Sp`")
	insert("rolled-back-1")
	exec("INSERT INTO audit VALUES (1)")
	exec("SAVEPOINT Later")
	exec("ROLLBACK WORK TO /* app */ `my ``sp`")
	insert("kept-2")
	exec("SAVEPOINT sp2")
	insert("rolled-back-2")
	exec("INSERT INTO audit VALUES (2)")
	exec("ROLLBACK TO SAVEPOINT SP2")
	exec("RELEASE SAVEPOINT `MY ``SP`")
	exec("COMMIT")

	exec("XA START 'x1'")
	insert("xa-one-phase")
	exec("XA END 'x1'")
	exec("XA COMMIT 'x1' ONE PHASE")

	want := []string{"kept-1", "kept-2", "xa-one-phase"}
	relaytest.WaitFor(t, 30*time.Second, "the committed events", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:") >= len(want)
	})
	time.Sleep(200 * time.Millisecond) // a phantom appended late would show now
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range relaytest.ReadAll(ctx, t, env.RDB, "outbox:") {
		id, _ := e.Values["message_id"].(string)
		got = append(got, id)
	}
	if !slices.Equal(got, want) {
		t.Errorf("message ids in the stream: got %v, want %v", got, want)
	}
}
