package canal

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestReader_MariaDBCompressedBinlog: with log_bin_compress=ON, MariaDB
// writes rows as WRITE_ROWS_COMPRESSED_EVENT_V1 and long statements as
// QUERY_COMPRESSED_EVENT. Every row must arrive once, byte for byte, small
// and large; a compressed DDL is still a boundary, a compressed statement
// INSERT is still reported, a ROLLBACK TO still undoes rows, and a restart
// resumes inside the compressed binlog.
func TestReader_MariaDBCompressedBinlog(t *testing.T) {
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--log-bin-compress=ON", "--log-bin-compress-min-len=10"}})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	r, _, stop := startedReader(t, env, nil)

	want := map[string]string{} // message_id -> payload
	type execer interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
	insert := func(db execer, id, payload string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'compressed', ?, 'c', ?)", id, id, payload); err != nil {
			t.Fatalf("insert %s: %v", id, err)
		}
	}
	large := func(n int, c string) string { return `{"blob":"` + strings.Repeat(c, n) + `"}` }
	tx := func(fn func(tx *sql.Tx)) {
		t.Helper()
		tx, err := env.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		fn(tx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}

	for id, p := range map[string]string{"small-empty": "{}", "small-n": `{"n":1}`, "large-1": large(200_000, "x")} {
		insert(env.DB, id, p)
		want[id] = p
	}
	tx(func(tx *sql.Tx) {
		for i := range 3 {
			id, p := fmt.Sprintf("tx-%d", i), large(20_000, string(rune('a'+i)))
			insert(tx, id, p)
			want[id] = p
		}
	})
	// A DDL long enough to be compressed, and a non-transactional table
	// whose change after a savepoint makes MariaDB log ROLLBACK TO.
	srv.Exec(t, "CREATE TABLE `"+env.Database+"`.audit_trail_for_compression (id INT) ENGINE=MyISAM")
	tx(func(tx *sql.Tx) {
		insert(tx, "sp-keep", `{"sp":"keep"}`)
		for _, q := range []string{"SAVEPOINT s1", "INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('sp-drop', 'compressed', 'sp-drop', 'c', '{}')",
			"INSERT INTO audit_trail_for_compression VALUES (1)", "ROLLBACK TO SAVEPOINT s1"} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		insert(tx, "sp-after", `{"sp":"after"}`)
	})
	want["sp-keep"], want["sp-after"] = `{"sp":"keep"}`, `{"sp":"after"}`
	conn, err := env.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SET SESSION binlog_format = 'STATEMENT'",
		"INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-1', 'order', 'o1', 'order.lost', '{}')",
		"SET SESSION binlog_format = 'ROW'",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)

	// Resume inside the compressed binlog.
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	insert(env.DB, "after-restart", large(50_000, "z"))
	want["after-restart"] = large(50_000, "z")
	r2, _ := newReader(t, env, nil)
	stop2 := startReader(r2)
	relaytest.WaitFor(t, 30*time.Second, "every compressed row", func() bool {
		return env.RDB.XLen(ctx, "outbox:compressed").Val() >= int64(len(want))
	})
	time.Sleep(200 * time.Millisecond) // a duplicate would arrive by now
	if err := stop2(); err != nil {
		t.Fatal(err)
	}

	got := map[string]int{}
	for _, m := range env.RDB.XRange(ctx, "outbox:compressed", "-", "+").Val() {
		id, _ := m.Values["message_id"].(string)
		got[id]++
		if p, ok := want[id]; !ok {
			t.Errorf("unexpected event %s (rolled back to a savepoint?)", id)
		} else if m.Values["payload"] != p {
			t.Errorf("payload of %s: %d bytes, want %d bytes as written", id, len(fmt.Sprint(m.Values["payload"])), len(p))
		}
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("event %s arrived %d times, want once", id, got[id])
		}
	}
	if n := r.Stats().StatementDML; n != 1 {
		t.Errorf("StatementDML = %d, want 1: the compressed statement INSERT went unnoticed", n)
	}
	// The producers' events are in the other streams.
	env.RDB.Del(ctx, "outbox:compressed")
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})

	// The test proves something only if the server compressed.
	types, rollbackTo := binlogEventTypes(t, env.DB)
	for _, et := range []string{"Write_rows_compressed_v1", "Query_compressed"} {
		if types[et] == 0 {
			t.Errorf("the binlog has no %s event (types: %v): was log_bin_compress on?", et, types)
		}
	}
	if !rollbackTo {
		t.Errorf("the binlog has no ROLLBACK TO: the savepoint case proves nothing")
	}
}

// binlogEventTypes counts the events of every binlog file by type, as the
// server names them, and reports whether one is a ROLLBACK TO.
func binlogEventTypes(t testing.TB, db *sql.DB) (types map[string]int, rollbackTo bool) {
	t.Helper()
	var files []string
	rows, err := db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	if err := mysqlserver.ScanRows(rows, func(v []sql.RawBytes) { files = append(files, string(v[0])) }); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	types = map[string]int{}
	for _, f := range files {
		rows, err := db.Query("SHOW BINLOG EVENTS IN '" + f + "'")
		if err != nil {
			t.Fatal(err)
		}
		err = mysqlserver.ScanRows(rows, func(v []sql.RawBytes) {
			types[string(v[2])]++
			rollbackTo = rollbackTo || strings.HasPrefix(string(v[5]), "ROLLBACK TO")
		})
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return types, rollbackTo
}
