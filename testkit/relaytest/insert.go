package relaytest

import (
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
)

// Execer is a *sql.DB, *sql.Tx or *sql.Conn's Exec.
type Execer interface {
	Exec(string, ...any) (sql.Result, error)
}

// InsertEvent inserts one row into the outbox table of the default mapping,
// shaped as Produce writes them, and records it as committed (the caller
// commits). It returns the row's message id.
func InsertEvent(t testing.TB, ex Execer, rec *Produced, agg string, seq int) string {
	t.Helper()
	id := MessageID()
	payload, _ := json.Marshal(map[string]any{"seq": seq, "agg": agg, "text": "héllo \"quoted\" 🙂"})
	if _, err := ex.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6))",
		id, agg, string(payload)); err != nil {
		t.Fatal(err)
	}
	rec.Committed[id] = Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: seq}
	return id
}

// InsertOldEvents commits n events of aggregate agg into the outbox table of
// the default mapping whose occurred_at is eight days ago, 500 rows per
// INSERT, and records them: rows a cleanup of seven days deletes.
func InsertOldEvents(t testing.TB, db *sql.DB, rec *Produced, agg string, n int) {
	t.Helper()
	for done := 0; done < n; {
		k := min(500, n-done)
		var b strings.Builder
		args := make([]any, 0, 3*k)
		b.WriteString("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for i := 0; i < k; i++ {
			done++
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("(?, 'order', ?, 'order.changed', ?, '{}', UTC_TIMESTAMP(6) - INTERVAL 8 DAY)")
			id := MessageID()
			payload, _ := json.Marshal(map[string]any{"seq": done, "agg": agg, "text": "héllo \"quoted\" 🙂"})
			args = append(args, id, agg, string(payload))
			rec.Committed[id] = Sent{AggregateType: "order", AggregateID: agg, EventType: "order.changed", Seq: done}
		}
		if _, err := db.Exec(b.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
}
