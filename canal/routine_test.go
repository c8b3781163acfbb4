package canal

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestReader_RoutineNamingTheTableIsNoDDL follows issue 41's reproduction:
// a CREATE PROCEDURE whose body inserts into the outbox table, as an
// application's migration writes one, was logged as "DDL on the outbox
// table". It changes no column: the reader says nothing of it, and relays
// the rows the procedure inserts. An ALTER TABLE still counts.
func TestReader_RoutineNamingTheTableIsNoDDL(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	logs := &relaytest.Logs{}
	r, _ := newReaderLogging(t, env, nil, logs.Logger())
	stopOnce := sync.OnceValue(startReader(r))
	defer stopOnce()
	waitStarted(t, r)
	rec := relaytest.NewProduced()
	for _, q := range []string{
		"CREATE PROCEDURE add_event(IN mid CHAR(26), IN agg VARCHAR(255)) BEGIN " +
			"INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES (mid, 'order', agg, 'order.changed', JSON_OBJECT('seq', 1, 'text', 'héllo \"quoted\" 🙂'), '{}'); END",
		"CREATE TRIGGER outbox_bi BEFORE INSERT ON outbox FOR EACH ROW SET NEW.sent_at = NULL",
	} {
		if _, err := env.DB.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mid := relaytest.MessageID()
	if _, err := env.DB.ExecContext(ctx, "CALL add_event(?, 'p-1')", mid); err != nil {
		t.Fatal(err)
	}
	rec.Committed[mid] = relaytest.Sent{AggregateType: "order", AggregateID: "p-1", EventType: "order.changed", Seq: 1}
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if strings.Contains(logs.String(), "DDL on the outbox table") {
		t.Errorf("a procedure or trigger naming the table was logged as DDL on it:\n%s", logs.String())
	}
	if _, err := env.DB.ExecContext(ctx, "ALTER TABLE outbox ADD COLUMN note VARCHAR(10) NULL"); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the ALTER TABLE logged as DDL on the table", func() bool {
		return strings.Contains(logs.String(), "DDL on the outbox table")
	})
	if err := stopOnce(); err != nil {
		t.Fatal(err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
