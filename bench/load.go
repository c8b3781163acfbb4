package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// binlogPos is a place in the binlog.
type binlogPos struct {
	File string
	Pos  uint32
}

func (p binlogPos) String() string { return fmt.Sprintf("%s:%d", p.File, p.Pos) }

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
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := func() error {
				conn, err := db.Conn(gctx)
				if err != nil {
					return err
				}
				defer conn.Close()
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
					if n == 1 {
						_, err = conn.ExecContext(gctx, sb.String(), args...)
					} else {
						err = inTx(gctx, conn, sb.String(), args)
					}
					if err != nil {
						return fmt.Errorf("load %s: %w", table, err)
					}
				}
			}(); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
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

// producers commit single-row transactions from conns connections as fast as
// the server takes them until ctx ends. Before each COMMIT it calls sent with
// the row's message id; after it, committed is incremented.
type producers struct {
	committed atomic.Int64
	seq       atomic.Int64
	mu        sync.Mutex
	sentAt    map[string]time.Time
}

func newProducers() *producers { return &producers{sentAt: map[string]time.Time{}} }

func (p *producers) run(ctx context.Context, db *sql.DB, table string, conns, payloadBytes int, prefix string) error {
	pay := payload(payloadBytes)
	ins := fmt.Sprintf(insertCols, schema.QuoteIdent(table)) + "(?, 'order', ?, 'order.created', ?)"
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(p.seq.Add(1))
				id := messageID(prefix, i)
				tx, err := db.BeginTx(context.Background(), nil)
				if err != nil {
					errs <- err
					return
				}
				if _, err := tx.Exec(ins, id, fmt.Sprintf("agg-%d", i%1000), pay); err != nil {
					_ = tx.Rollback()
					errs <- err
					return
				}
				t := time.Now()
				p.mu.Lock()
				p.sentAt[id] = t
				p.mu.Unlock()
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
				p.committed.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (p *producers) sent(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.sentAt[id]
	return t, ok
}
