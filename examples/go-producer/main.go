// Command go-producer is the producer half of the outbox pattern: it places
// orders, and each order row is written in the same transaction as the outbox
// rows that announce it, so an event exists if and only if its state change
// was committed. Every --rollback-every'th transaction is rolled back on
// purpose: the relay must never deliver its events.
//
//	go run ./examples/go-producer --mysql-dsn 'app:app@tcp(127.0.0.1:3306)/app' --orders 10
//
// It prints one line per event, which scripts/demo.sh and the tests read:
//
//	committed order_id=3 event_type=order.placed message_id=01J...
//	rolled-back order_id=4 event_type=order.placed message_id=01J...
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func main() {
	dsn := flag.String("mysql-dsn", envOr("EXAMPLE_MYSQL_DSN", "app:app@tcp(127.0.0.1:3306)/app"), "go-sql-driver DSN of the application database [$EXAMPLE_MYSQL_DSN]")
	table := flag.String("table", "outbox", "outbox table")
	orders := flag.Int("orders", 10, "orders to place, one transaction each")
	rollbackEvery := flag.Int("rollback-every", 4, "roll back every n-th transaction on purpose (0: never)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		fatal(err)
	}
	defer db.Close()
	for i := 1; i <= *orders; i++ {
		rollback := *rollbackEvery > 0 && i%*rollbackEvery == 0
		if err := placeOrder(ctx, db, *table, i, rollback); err != nil {
			fatal(err)
		}
	}
}

// placeOrder inserts an order and its events in one transaction. Even orders
// are paid at once and get a second event in the same transaction.
func placeOrder(ctx context.Context, db *sql.DB, table string, i int, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit

	status := "placed"
	if i%2 == 0 {
		status = "paid"
	}
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, total_cents, status) VALUES (?, ?, ?)",
		fmt.Sprintf("customer-%d", i), 1000+i*250, status)
	if err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	orderID, err := res.LastInsertId()
	if err != nil {
		return err
	}
	events := []string{"order.placed"}
	if status == "paid" {
		events = append(events, "order.paid")
	}
	var lines []string
	for _, ev := range events {
		id := newULID(time.Now())
		// occurred_at is a DATETIME without a zone; the relay reads it as UTC.
		payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer": fmt.Sprintf("customer-%d", i), "total_cents": 1000 + i*250, "status": status})
		_, err := tx.ExecContext(ctx, "INSERT INTO `"+table+"` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, 'order', ?, ?, ?, ?, UTC_TIMESTAMP(6))",
			id, fmt.Sprint(orderID), ev, string(payload), `{"producer":"go-producer"}`)
		if err != nil {
			return fmt.Errorf("insert outbox row: %w", err)
		}
		lines = append(lines, fmt.Sprintf("order_id=%d event_type=%s message_id=%s", orderID, ev, id))
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
		for _, l := range lines {
			fmt.Println("rolled-back " + l)
		}
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for _, l := range lines {
		fmt.Println("committed " + l)
	}
	return nil
}

// newULID returns a ULID (https://github.com/ulid/spec): a 48-bit Unix time in
// milliseconds and 80 random bits, in Crockford's base32, 26 characters that
// sort by time.
func newULID(t time.Time) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var out [26]byte
	ms := uint64(t.UnixMilli())
	for i := 9; i >= 0; i-- { // 10 characters hold the 48 bits (and 2 zero bits)
		out[i] = alphabet[ms&31]
		ms >>= 5
	}
	var r [10]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	// 80 bits are 16 characters of 5 bits: 2 groups of 40 bits.
	for g := 0; g < 2; g++ {
		var v uint64
		for _, b := range r[g*5 : g*5+5] {
			v = v<<8 | uint64(b)
		}
		for i := 7; i >= 0; i-- {
			out[10+g*8+i] = alphabet[v&31]
			v >>= 5
		}
	}
	return string(out[:])
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "go-producer:", err)
	os.Exit(1)
}
