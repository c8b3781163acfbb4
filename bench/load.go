package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// binlogPos is a place in the binlog.
type binlogPos struct {
	File string
	Pos  uint32
}

func (p binlogPos) String() string { return fmt.Sprintf("%s:%d", p.File, p.Pos) }

func (p binlogPos) mysql() mysql.Position { return mysql.Position{Name: p.File, Pos: p.Pos} }

// binlogEnd reads the end of the binlog with the statement the server's
// version understands (MySQL 8.4 has no SHOW MASTER STATUS).
func binlogEnd(ctx context.Context, db *sql.DB) (binlogPos, error) {
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return binlogPos{}, err
	}
	file, pos, err := srv.BinlogPosition(ctx, db)
	return binlogPos{File: file, Pos: pos}, err
}

// createTable makes an empty outbox table of the default shape.
func createTable(ctx context.Context, db *sql.DB, table string) error {
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+schema.QuoteIdent(table)+" /* binlog-outbox */"); err != nil {
		return err
	}
	return schema.Apply(ctx, db, table, schema.DefaultMapping())
}

// payload returns valid JSON of exactly n bytes (n >= 16).
func payload(n int) string {
	const head, tail = `{"pad":"`, `"}`
	return head + strings.Repeat("x", max(0, n-len(head)-len(tail))) + tail
}

// durability switches the server between the durable settings of the live
// workloads and the relaxed ones that make loading a backlog quick. It
// returns a function that restores what was set before.
func durability(ctx context.Context, db *sql.DB, durable bool) (restore func(), err error) {
	var flush, sync int
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog /* binlog-outbox */").Scan(&flush, &sync); err != nil {
		return nil, err
	}
	set := func(f, s int) error {
		_, err := db.ExecContext(ctx, fmt.Sprintf("SET GLOBAL innodb_flush_log_at_trx_commit = %d, GLOBAL sync_binlog = %d /* binlog-outbox */", f, s))
		return err
	}
	want := [2]int{2, 0}
	if durable {
		want = [2]int{1, 1}
	}
	if err := set(want[0], want[1]); err != nil {
		return nil, fmt.Errorf("set durability (needs SUPER or SYSTEM_VARIABLES_ADMIN): %w", err)
	}
	return func() { _ = set(flush, sync) }, nil
}

const insertCols = "INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES "

// loadBacklog inserts rows into table from conns connections, txRows rows
// per transaction (1: autocommit single-row INSERTs). It returns the commit
// rate.
func loadBacklog(ctx context.Context, db *sql.DB, table string, rows, txRows, conns, payloadBytes int, prefix string) (float64, error) {
	pay := payload(payloadBytes)
	ins := fmt.Sprintf(insertCols, schema.QuoteIdent(table))
	var next atomic.Int64
	began := time.Now()
	err := parallel(ctx, db, conns, func(ctx context.Context, conn *sql.Conn) error {
		var sb strings.Builder
		args := make([]any, 0, 3*txRows)
		for {
			first := int(next.Add(int64(txRows))) - txRows
			if first >= rows {
				return nil
			}
			n := min(txRows, rows-first)
			sb.Reset()
			sb.WriteString(ins)
			args = args[:0]
			for j := range n {
				if j > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString("(?, 'order', ?, 'order.created', ?)")
				i := first + j
				args = append(args, messageID(prefix, i), fmt.Sprintf("agg-%d", i%1000), pay)
			}
			var err error
			if n == 1 {
				_, err = conn.ExecContext(ctx, sb.String(), args...)
			} else {
				err = inTx(ctx, conn, sb.String(), args)
			}
			if err != nil {
				return fmt.Errorf("load %s: %w", table, err)
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return float64(rows) / float64(txRows) / time.Since(began).Seconds(), nil
}

func inTx(ctx context.Context, conn *sql.Conn, query string, args []any) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// messageID is a 26-character id, as the table's CHAR(26) expects.
func messageID(prefix string, i int) string {
	return fmt.Sprintf("%s%0*d", prefix, 26-len(prefix), i)
}

// copyInOneTx copies src into dst in a single transaction: the
// million-row-transaction workload.
func copyInOneTx(ctx context.Context, db *sql.DB, dst, src string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO "+schema.QuoteIdent(dst)+" (message_id, aggregate_type, aggregate_id, event_type, payload) "+
		"SELECT CONCAT('X', SUBSTRING(message_id, 2)), aggregate_type, aggregate_id, event_type, payload FROM "+schema.QuoteIdent(src)+" ORDER BY id /* binlog-outbox */")
	return err
}

// Wide rows of the application-shaped workload: two tables of appWideRows
// rows, each row appWideCols VARCHAR columns of appWideBytes characters.
const (
	appWideRows  = 1000
	appWideCols  = 12
	appWideBytes = 80
)

// appTables are the application's own tables the app workload updates.
var appTables = []string{"app_customers", "app_orders"}

// createAppTables makes and fills the wide tables of the app workload.
func createAppTables(ctx context.Context, db *sql.DB) error {
	val := strings.Repeat("w", appWideBytes)
	for _, t := range appTables {
		var cols, vals strings.Builder
		for c := range appWideCols {
			fmt.Fprintf(&cols, ", c%d VARCHAR(%d) NOT NULL", c, appWideBytes+10)
			fmt.Fprintf(&vals, ", '%s'", val)
		}
		q := "DROP TABLE IF EXISTS " + t + " /* binlog-outbox */"
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
		q = fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, n BIGINT NOT NULL, updated_at DATETIME(6) NOT NULL%s) /* binlog-outbox */", t, cols.String())
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
		var ins strings.Builder
		fmt.Fprintf(&ins, "INSERT INTO %s VALUES ", t)
		for i := range appWideRows {
			if i > 0 {
				ins.WriteByte(',')
			}
			fmt.Fprintf(&ins, "(%d, 0, NOW(6)%s)", i+1, vals.String())
		}
		if _, err := db.ExecContext(ctx, ins.String()+" /* binlog-outbox */"); err != nil {
			return err
		}
	}
	return nil
}

// appTx is one transaction of the application-shaped workload: it updates a
// wide row of each of appTables (the whole row changes in the row image) and
// inserts outbox row i. Each transaction locks a customer before an order, so
// concurrent ones wait for each other but never deadlock.
func appTx(ctx context.Context, conn *sql.Conn, ins, pay, prefix string, i int) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	c1 := fmt.Sprintf("%0*d", appWideBytes, i)
	for k, t := range appTables {
		id := (i*(2*k+1))%appWideRows + 1
		if _, err := tx.ExecContext(ctx, "UPDATE "+t+" SET n = n + 1, updated_at = NOW(6), c1 = ? WHERE id = ? /* binlog-outbox */", c1, id); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, ins, messageID(prefix, i), fmt.Sprintf("agg-%d", i%1000), pay); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// loadApp commits rows application-shaped transactions (appTx) from conns
// connections and returns their rate.
func loadApp(ctx context.Context, db *sql.DB, table string, rows, conns, payloadBytes int, prefix string) (float64, error) {
	pay := payload(payloadBytes)
	ins := fmt.Sprintf(insertCols, schema.QuoteIdent(table)) + "(?, 'order', ?, 'order.created', ?)"
	var next atomic.Int64
	began := time.Now()
	err := parallel(ctx, db, conns, func(ctx context.Context, conn *sql.Conn) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= rows {
				return nil
			}
			if err := appTx(ctx, conn, ins, pay, prefix, i); err != nil {
				return fmt.Errorf("load %s: %w", table, err)
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return float64(rows) / time.Since(began).Seconds(), nil
}

// parallel runs fn on conns connections at once and returns the first error;
// the first error cancels the others.
func parallel(ctx context.Context, db *sql.DB, conns int, fn func(context.Context, *sql.Conn) error) error {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return together(conns, cancel, func() error {
		conn, err := db.Conn(gctx)
		if err == nil {
			err = fn(gctx, conn)
			conn.Close()
		}
		return err
	})
}

// together runs fn n times at once and returns the first error, once every
// run has ended. After an error it calls stop, when not nil, so that the
// other runs end too: the error is recorded first, so the ones they end
// with do not come before it.
func together(n int, stop func(), fn func() error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if err := fn(); err != nil {
				errs <- err
				if stop != nil {
					stop()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// producers commit single-row transactions from conns connections until ctx
// ends, as fast as the server takes them or at a given rate. After each
// COMMIT returns it records the time, keyed by the row's message id.
type producers struct {
	committed atomic.Int64
	seq       atomic.Int64
	mu        sync.Mutex
	doneAt    map[string]time.Time
}

func newProducers() *producers { return &producers{doneAt: map[string]time.Time{}} }

// run produces until ctx ends; rate is transactions per second over all
// connections, 0 for as fast as they go.
func (p *producers) run(ctx context.Context, db *sql.DB, table string, conns, payloadBytes int, rate float64, prefix string) error {
	pay := payload(payloadBytes)
	ins := fmt.Sprintf(insertCols, schema.QuoteIdent(table)) + "(?, 'order', ?, 'order.created', ?)"
	var tokens chan struct{}
	if rate > 0 {
		tokens = make(chan struct{}, conns)
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					select {
					case tokens <- struct{}{}:
					default: // the producers fall behind the rate: skip
					}
				}
			}
		}()
	}
	// No stop: a failed producer does not end the others; ctx (the
	// workload's duration) does.
	return together(conns, nil, func() error {
		for ctx.Err() == nil {
			if tokens != nil {
				select {
				case <-ctx.Done():
					return nil
				case <-tokens:
				}
			}
			i := int(p.seq.Add(1))
			id := messageID(prefix, i)
			tx, err := db.BeginTx(context.Background(), nil)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ins, id, fmt.Sprintf("agg-%d", i%1000), pay); err != nil {
				_ = tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			t := time.Now()
			p.mu.Lock()
			p.doneAt[id] = t
			p.mu.Unlock()
			p.committed.Add(1)
		}
		return nil
	})
}

// committedAt returns when the COMMIT of message id returned.
func (p *producers) committedAt(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.doneAt[id]
	return t, ok
}
