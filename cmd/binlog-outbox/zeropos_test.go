package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRun_ZeroEndLogPos: MariaDB 11.4 and later write end_log_pos 0 for the
// events inside a transaction (go-mysql #893, #1035, #1052), and the relay's
// own offsets (the stored file position, a chunked transaction's resume,
// status's bytes behind) must come from the events that carry one. On a
// server of its own, whose binlog ends with the test's last transaction:
//   - the stored position after transactions of several rows events each is
//     the server's binlog end, to the byte;
//   - with the relay stopped, status's bytes behind are the binlog written
//     since, to the byte;
//   - a transaction of 4,000 rows, read in chunks (--max-tx-bytes 64 KiB),
//     whose relay is killed with SIGKILL mid-transaction three times,
//     resumes each time from the rows it appended (a stored position with
//     tx_rows): every row once, in order, and the position at the end is
//     the binlog's end again.
//
// It runs on every server; on MariaDB 11.4 and later it checks that the
// binlog indeed holds rows events with end_log_pos 0 (TESTING.md: the suite
// runs it on Debian 13's MariaDB 11.8).
func TestRun_ZeroEndLogPos(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	args := []string{"--mode", "binlog", "--lease=false", "--max-tx-bytes", "65536", "--max-batch-events", "20"}
	p := startRelay(t, env, args...)
	waitStoredPosition(t, env, posKey(env))

	// Transactions of several rows events each.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20, RollbackRatio: -1}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	zeros, rowsEvents := endLogPosZeros(t, env.DB)
	t.Logf("%s: %d of %d rows events with end_log_pos 0", serverVersion(t, env.DB), zeros, rowsEvents)
	if atLeastMariaDB114(t, env.DB) && (zeros == 0 || rowsEvents == 0) {
		t.Fatalf("MariaDB 11.4 or later wrote %d of %d rows events with end_log_pos 0; the test covers nothing", zeros, rowsEvents)
	}
	waitStoredAtEnd(t, env)

	// Bytes behind of a stopped relay.
	stopRelay(t, p)
	stored := storedBinlog(t, env)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 10, RollbackRatio: -1}, rec)
	file, end := binlogEnd(t, env.DB)
	out, errOut, code := run(t, "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "status", "--json")
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Position == nil || r.Position.BytesBehind == nil {
		t.Fatalf("status --json: exit %d, %v, want a position with bytes behind\n%s%s", code, err, out, errOut)
	}
	if file != stored.File || *r.Position.BytesBehind != int64(end)-int64(stored.Pos) || *r.Position.BytesBehind <= 0 {
		t.Errorf("status: %d bytes behind at %s:%d; want %d, the binlog from the stored %s to its end %s:%d",
			*r.Position.BytesBehind, r.Position.File, r.Position.Pos, int64(end)-int64(stored.Pos), stored, file, end)
	}

	// A transaction read in chunks, its relay killed mid-transaction.
	p = startRelay(t, env, args...)
	const rows = 4000
	insertRowsInOneTx(t, env, rows, rec)
	midTx := 0
	for kill := 0; kill < 3; kill++ {
		// Kill it once it has appended some of the transaction's rows since
		// it started.
		var before int64
		if midTx > 0 {
			before = env.RDB.XLen(ctx, "outbox:big").Val()
		}
		relaytest.WaitFor(t, 60*time.Second, "the relay to append some of the transaction's rows", func() bool {
			n := env.RDB.XLen(ctx, "outbox:big").Val()
			return n > before || n == rows
		})
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		if b := storedBinlog(t, env); b.TxRows > 0 {
			midTx++
			t.Logf("killed at %s: %d of the transaction's rows appended", b, b.TxRows)
		}
		p = startRelay(t, env, args...)
	}
	if midTx == 0 {
		t.Fatalf("no kill stopped the relay inside the transaction; the resume is untested")
	}
	relaytest.WaitDelivered(t, env, rec, 120*time.Second)
	time.Sleep(300 * time.Millisecond)
	waitStoredAtEnd(t, env)
	stopRelay(t, p)
	if zeros, rowsEvents := endLogPosZeros(t, env.DB); atLeastMariaDB114(t, env.DB) && zeros < rows/500 {
		t.Errorf("%d of %d rows events with end_log_pos 0 after the %d-row transaction; want its rows events among them", zeros, rowsEvents, rows)
	}
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d kills inside the transaction, %d entries", midTx, n)
}

// insertRowsInOneTx inserts n rows of one aggregate of type "big" in one
// transaction, 200 to an INSERT: a rows event each at least.
func insertRowsInOneTx(t *testing.T, env *relaytest.Env, n int, rec *relaytest.Produced) {
	t.Helper()
	tx, err := env.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	agg := fmt.Sprintf("big-%d", time.Now().UnixNano())
	pad := strings.Repeat("p", 200)
	const perInsert = 200
	for i := 0; i < n; i += perInsert {
		var sb strings.Builder
		var args []any
		sb.WriteString("INSERT INTO `" + env.Table + "` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES ")
		for j := i; j < min(n, i+perInsert); j++ {
			if j > i {
				sb.WriteString(",")
			}
			sb.WriteString("(?, 'big', ?, 'big.changed', ?, '{}', UTC_TIMESTAMP(6))")
			id := relaytest.MessageID()
			args = append(args, id, agg, fmt.Sprintf(`{"seq":%d,"text":"héllo \"quoted\" 🙂","pad":%q}`, j+1, pad))
			rec.Committed[id] = relaytest.Sent{AggregateType: "big", AggregateID: agg, EventType: "big.changed", Seq: j + 1}
		}
		if _, err := tx.Exec(sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// storedBinlog returns the relay's stored position.
func storedBinlog(t *testing.T, env *relaytest.Env) position.Binlog {
	t.Helper()
	b, err := position.Decode([]byte(env.RDB.Get(context.Background(), posKey(env)).Val()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitStoredAtEnd waits until the stored position is the server's binlog
// end, file and offset: nothing but the test writes to its server.
func waitStoredAtEnd(t *testing.T, env *relaytest.Env) {
	t.Helper()
	var b position.Binlog
	var file string
	var end uint32
	ok := false
	deadline := time.Now().Add(30 * time.Second)
	for !ok && time.Now().Before(deadline) {
		b = storedBinlog(t, env)
		file, end = binlogEnd(t, env.DB)
		ok = b.File == file && b.Pos == end && b.TxRows == 0
		time.Sleep(50 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("stored position %s, want the binlog's end %s:%d", b, file, end)
	}
}

// binlogEnd returns the file and offset the server writes next
// (SHOW BINLOG STATUS, MariaDB 10.5.2 and later).
func binlogEnd(t *testing.T, db *sql.DB) (string, uint32) {
	t.Helper()
	rows, err := db.Query("SHOW BINLOG STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var file string
	var pos uint32
	dest := []any{&file, &pos}
	for range cols[2:] {
		dest = append(dest, new(sql.RawBytes))
	}
	if !rows.Next() {
		t.Fatal("SHOW BINLOG STATUS: no row")
	}
	if err := rows.Scan(dest...); err != nil {
		t.Fatal(err)
	}
	return file, pos
}

// endLogPosZeros counts the rows events of the server's binlog files whose
// header says end_log_pos 0, and all rows events.
func endLogPosZeros(t *testing.T, db *sql.DB) (zeros, rowsEvents int) {
	t.Helper()
	files, err := db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for files.Next() {
		var name string
		var size any
		cols, _ := files.Columns()
		dest := []any{&name, &size}
		for range cols[2:] {
			dest = append(dest, new(any))
		}
		if err := files.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	files.Close()
	for _, name := range names {
		evs, err := db.Query("SHOW BINLOG EVENTS IN '" + name + "'")
		if err != nil {
			t.Fatal(err)
		}
		for evs.Next() {
			var logName, evType, info string
			var pos, serverID, endPos uint64
			if err := evs.Scan(&logName, &pos, &evType, &serverID, &endPos, &info); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(evType, "Write_rows") {
				rowsEvents++
				if endPos == 0 {
					zeros++
				}
			}
		}
		evs.Close()
	}
	return zeros, rowsEvents
}

func serverVersion(t *testing.T, db *sql.DB) string {
	t.Helper()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// atLeastMariaDB114 reports whether the server is MariaDB 11.4 or later,
// which writes end_log_pos 0 inside transactions.
func atLeastMariaDB114(t *testing.T, db *sql.DB) bool {
	t.Helper()
	v := serverVersion(t, db)
	if !strings.Contains(v, "MariaDB") {
		return false
	}
	parts := strings.SplitN(v, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major > 11 || (major == 11 && minor >= 4)
}
