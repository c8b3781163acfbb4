package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The package's longest test has a file of its own, early in the order:
// parallel tests resume in the order of the files, and started last it
// was the package's tail.

// TestRun_MillionRowTransaction pushes one transaction of 1,000,000 outbox
// rows through the relay process and prints its peak memory: the rows must
// never be held at once.
func TestRun_MillionRowTransaction(t *testing.T) {
	rows := 1_000_000
	if testing.Short() {
		rows = 100_000
	}
	srv := testsvc.SharedMariaDB(t)
	if !srv.External() {
		// A server of its own: no other test's relay reads through the
		// million rows, so this one can run beside them.
		t.Parallel()
		srv = testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	}
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	const chunk = 2000
	// The server makes the rows from a table of chunk numbers: the test
	// sends a short statement per chunk, not a million rows' SQL text built
	// under the race detector.
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	if _, err := env.DB.Exec("CREATE TABLE big_seq (n INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.DB.Exec("INSERT INTO big_seq (n) SELECT n FROM (SELECT a.d + 10*b.d + 100*c.d + 1000*e.d AS n FROM "+
		digits+" a, "+digits+" b, "+digits+" c, "+digits+" e) s WHERE n < ?", chunk); err != nil {
		t.Fatal(err)
	}
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))

	start := time.Now()
	tx, err := env.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"seq":0,"text":"` + strings.Repeat("x", 200) + `"}`
	for i := 0; i < rows; i += chunk {
		// Row j is ('M%025d', 'big', 'agg-<j%100>', 'big.row', payload), in order of j.
		if _, err := tx.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload) "+
			"SELECT CONCAT('M', LPAD(? + n, 25, '0')), 'big', CONCAT('agg-', (? + n) % 100), 'big.row', ? FROM big_seq WHERE n < ? ORDER BY n",
			i, i, payload, min(chunk, rows-i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	t.Logf("inserted %d rows in one transaction in %s", rows, time.Since(start).Round(time.Millisecond))
	// Fail on a stall, not on slowness: a loaded CI machine is slow.
	lastLen, lastProgress := int64(-1), time.Now()
	for {
		n := env.RDB.XLen(ctx, "outbox:big").Val()
		if n >= int64(rows) {
			break
		}
		if n != lastLen {
			lastLen, lastProgress = n, time.Now()
		}
		if time.Since(lastProgress) > 60*time.Second || p.Exited() {
			for _, k := range env.RDB.Keys(ctx, "*").Val() {
				t.Logf("key %s type %s xlen %d", k, env.RDB.Type(ctx, k).Val(), env.RDB.XLen(ctx, k).Val())
			}
			t.Fatalf("the stream stalled at %d of %d rows", n, rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	if n := env.RDB.XLen(ctx, "outbox:big").Val(); n != int64(rows) {
		t.Fatalf("stream has %d entries, want %d", n, rows)
	}
	// Order: the first and last entries are the first and last rows.
	first := env.RDB.XRangeN(ctx, "outbox:big", "-", "+", 1).Val()
	last := env.RDB.XRevRangeN(ctx, "outbox:big", "+", "-", 1).Val()
	if first[0].Values["message_id"] != fmt.Sprintf("M%025d", 0) || last[0].Values["message_id"] != fmt.Sprintf("M%025d", rows-1) {
		t.Fatalf("first/last entries %v / %v out of order", first[0].Values["message_id"], last[0].Values["message_id"])
	}
	p.Signal(t, syscall.SIGTERM)
	p.Wait(t, 15*time.Second)
	t.Logf("relay: %d rows in one transaction delivered %s after the insert began; peak RSS %.1f MB", rows, elapsed.Round(time.Millisecond), float64(p.peakKB.Load())/1024)
	fmt.Printf("1M-row transaction: rows=%d peak_rss_mb=%.1f\n", rows, float64(p.peakKB.Load())/1024)
	if p.peakKB.Load() > 48*1024 {
		t.Errorf("peak RSS %.1f MB: the transaction was held in memory", float64(p.peakKB.Load())/1024)
	}
}
