package admin

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Bounds and steps of cleanup.
const (
	// MaxCleanupBatch bounds CleanupOptions.Batch (cleanup's --batch,
	// which the command checks as it reads it): a DELETE of more rows
	// holds its row locks longer.
	MaxCleanupBatch = 10000
	// DefaultCleanupBatch and DefaultCleanupWait are cleanup's --batch and
	// --wait.
	DefaultCleanupBatch = 500
	DefaultCleanupWait  = time.Minute
	// cleanupRoundBatches is how many batches binlog mode reads in one
	// snapshot before it waits for the relay: the ids of a round are held
	// in memory (8 bytes each), and the snapshot is closed while they are
	// deleted, so that no read view stays open for the whole run.
	cleanupRoundBatches = 100
	// cleanupProgressEvery spaces the progress lines.
	cleanupProgressEvery = 5 * time.Second
	// cleanupQuietWait is how long a wait for the relay goes unreported:
	// a running relay passes a snapshot within about a second.
	cleanupQuietWait = 2 * time.Second
)

// CleanupOptions say what Cleanup deletes.
type CleanupOptions struct {
	DB *sql.DB
	// Table is the outbox table with its resolved mapping and its
	// inspection (a TIMESTAMP occurred_at compares in the session's zone).
	Table outboxsql.Table
	// Redis holds the relay's keys; on a Redis Cluster (a
	// *redis.ClusterClient) rows also wait for the masters' replicas.
	Redis redis.UniversalClient
	Keys  redisstream.Keys
	// OlderThan: rows whose occurred_at is older are old enough.
	OlderThan time.Duration
	// Batch is how many rows one DELETE deletes, 1 to MaxCleanupBatch;
	// Pause the pause between two DELETEs.
	Batch int
	Pause time.Duration
	// Wait bounds, in binlog mode, the wait for the stored position to pass
	// the rows chosen (and on a Redis Cluster for the replicas).
	Wait time.Duration
	// DryRun counts the rows that would be deleted, deleting none.
	DryRun bool
	Logger *slog.Logger
}

// Cleanup deletes the old rows the relay has relayed, by primary key, a
// batch per DELETE: in binlog mode the rows the stored position passed, in
// poll mode the rows marked sent. The error of a run that stopped half way
// says what it deleted until then.
func Cleanup(ctx context.Context, o CleanupOptions) (CleanupReport, error) {
	st, err := loadRelayState(ctx, o.Redis, o.Keys, "cleanup")
	if err != nil {
		return CleanupReport{}, err
	}
	name := o.Table.Database + "." + o.Table.Name
	if !st.Recorded && st.Position == nil {
		// Most likely other keys than the relay's: deleting by guess
		// could delete rows no relay has seen.
		return CleanupReport{}, outbox.WithHint(fmt.Errorf("cleanup: no relay recorded a mode (%s) or a position (%s) for %s, so nothing is known to be relayed",
			o.Keys.Mode, o.Keys.Position, name),
			"run cleanup with the --table, --redis-url and --position-key the relay runs with; `binlog-outbox status` shows what it finds")
	}
	r := &CleanupReport{Mode: st.Mode, Table: name, Cutoff: time.Now().Add(-o.OlderThan).UTC(), DryRun: o.DryRun}
	cl := &cleaner{
		db: o.DB, log: o.Logger.With("component", "cleanup"), sink: st.Sink, res: r,
		batch: o.Batch, pause: o.Pause, wait: o.Wait, start: time.Now(),
	}
	if cc, ok := o.Redis.(*redis.ClusterClient); ok {
		cl.guard = &clusterGuard{client: cc}
	}
	switch {
	case st.Mode == mode.Binlog:
		cl.q = outboxsql.NewCleanup(o.Table, false)
		err = cl.binlogMode(ctx)
	case st.Mode == mode.Poll && !o.Table.Mapping.Has(schema.ColSentAt):
		r.Note = "nothing to clean: the table has no sent_at column, so poll mode deletes each row as it sends it"
	case st.Mode == mode.Poll:
		cl.q = outboxsql.NewCleanup(o.Table, true)
		err = cl.pollMode(ctx)
	default:
		return *r, fmt.Errorf("cleanup: %s holds mode %q, which is neither %s nor %s", o.Keys.Mode, st.Mode, mode.Binlog, mode.Poll)
	}
	cl.finish()
	if err != nil {
		return *r, fmt.Errorf("cleanup: %s, then: %w", cl.done(), err)
	}
	return *r, nil
}

// CleanupReport is what Cleanup did; its JSON is `cleanup --json`.
type CleanupReport struct {
	Mode  string `json:"mode"`
	Table string `json:"table"`
	// Cutoff: rows whose occurred_at is before it are old enough.
	Cutoff time.Time `json:"cutoff"`
	DryRun bool      `json:"dry_run"`
	// Candidates are the old rows the relay has relayed; Deleted those
	// deleted (none in a dry run; fewer when something else deleted some
	// meanwhile).
	Candidates int64 `json:"candidates"`
	Deleted    int64 `json:"deleted"`
	Batches    int   `json:"batches"`
	// KeptUnsent counts, in poll mode, the old rows not yet sent, which stay.
	KeptUnsent    int64   `json:"kept_unsent"`
	Seconds       float64 `json:"seconds"`
	RowsPerSecond float64 `json:"rows_per_second"`
	// Note says why there was nothing to do, when there was not.
	Note string `json:"note,omitempty"`
}

// cleaner deletes old relayed rows, a batch at a time.
type cleaner struct {
	db    *sql.DB
	log   *slog.Logger
	sink  *redisstream.Sink
	res   *CleanupReport
	batch int
	pause time.Duration
	wait  time.Duration
	q     *outboxsql.Cleanup
	// guard, on a Redis Cluster, makes sure the appends the position
	// stands for survive a failover before rows are deleted.
	guard   *clusterGuard
	start   time.Time
	lastLog time.Time
}

// binlogMode deletes, round by round, the old rows of a consistent
// snapshot once the stored position passed the binlog end as of that
// snapshot: each of those rows was committed before that end, so the relay
// has appended it. Rows committed later, even with lower ids (an id is
// taken at INSERT, the row shows at COMMIT), are not in the snapshot and
// not deleted, which is why ids are deleted one by one, never as a range.
func (cl *cleaner) binlogMode(ctx context.Context) error {
	srv, err := mysqlserver.Detect(ctx, cl.db)
	if err != nil {
		return err
	}
	round := cl.batch * cleanupRoundBatches
	var after uint64
	for {
		if cl.guard != nil {
			if err := cl.guard.begin(ctx); err != nil {
				return err
			}
		}
		ids, end, err := cl.snapshot(ctx, srv, after, round)
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := cl.waitRelayed(ctx, end, ids); err != nil {
			return err
		}
		if err := cl.deleteAll(ctx, ids); err != nil {
			return err
		}
		if len(ids) < round {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// snapshot reads up to n ids of old rows after the id after, and the end
// of the binlog as of the snapshot it read them in.
func (cl *cleaner) snapshot(ctx context.Context, srv mysqlserver.Server, after uint64, n int) ([]uint64, position.End, error) {
	conn, err := cl.db.Conn(ctx)
	if err != nil {
		return nil, position.End{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if err := beginSnapshot(ctx, conn); err != nil {
		return nil, position.End{}, err
	}
	defer endSnapshot(conn)
	// The end first: on MySQL it is the current end, the closer to the
	// snapshot's start the shorter the wait.
	end, err := srv.SnapshotEnd(ctx, conn)
	if err != nil {
		return nil, position.End{}, err
	}
	ids, err := cl.candidates(ctx, conn, after, n)
	return ids, end, err
}

// candidates reads up to n ids of old rows after the id after, in id order.
func (cl *cleaner) candidates(ctx context.Context, q mysqlserver.Querier, after uint64, n int) ([]uint64, error) {
	query, args := cl.q.Candidates(after, cl.res.Cutoff, n)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read old rows: %w", err)
	}
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read old rows: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read old rows: %w", err)
	}
	cl.res.Candidates += int64(len(ids))
	return ids, nil
}

// waitRelayed waits until the stored position passed end, saying so when
// that takes longer than a running relay would; on a Redis Cluster, then
// until the masters' replicas hold the appends (clusterGuard), within the
// same --wait.
func (cl *cleaner) waitRelayed(ctx context.Context, end position.End, ids []uint64) error {
	began := time.Now()
	if err := cl.waitPosition(ctx, end, ids); err != nil || cl.guard == nil {
		return err
	}
	// Replicas acknowledge every second: give them that much at least.
	if err := cl.guard.replicated(ctx, max(cl.wait-time.Since(began), cleanupQuietWait)); err != nil {
		return fmt.Errorf("rows %d to %d: %w", ids[0], ids[len(ids)-1], err)
	}
	return nil
}

// waitPosition waits until the stored position passed end, saying so when
// that takes longer than a running relay would.
func (cl *cleaner) waitPosition(ctx context.Context, end position.End, ids []uint64) error {
	passed, why, err := waitPassed(ctx, cl.sink, end, min(cl.wait, cleanupQuietWait))
	if err == nil && !passed && cl.wait > cleanupQuietWait {
		cl.log.Info("waiting for the relay to pass the rows to delete", "binlog_end", end.String(), "wait", cl.wait.String(), "why", why)
		passed, why, err = waitPassed(ctx, cl.sink, end, cl.wait-cleanupQuietWait)
	}
	if err != nil || passed {
		return err
	}
	return outbox.WithHint(fmt.Errorf("rows %d to %d, chosen when the binlog ended at %s, are not relayed after --wait %s: %s; the relay is behind or stopped, so they stay",
		ids[0], ids[len(ids)-1], end, cl.wait, why),
		"see `binlog-outbox status`; start the relay or let it catch up, then run cleanup again (or raise --wait)")
}

// pollMode deletes the old rows marked sent: the poller marks a row in the
// transaction that follows its append, so a row marked sent was appended.
// On a Redis Cluster, rows are read a round at a time, and deleted once
// the replicas hold what the masters do (clusterGuard): a row marked sent
// then has its entry on a replica too.
func (cl *cleaner) pollMode(ctx context.Context) error {
	query, args := cl.q.CountUnsent(cl.res.Cutoff)
	if err := cl.db.QueryRowContext(ctx, query, args...).Scan(&cl.res.KeptUnsent); err != nil {
		return fmt.Errorf("count old unsent rows: %w", err)
	}
	n := cl.batch
	if cl.guard != nil {
		n = cl.batch * cleanupRoundBatches
	}
	var after uint64
	for {
		if cl.guard != nil {
			if err := cl.guard.begin(ctx); err != nil {
				return err
			}
		}
		ids, err := cl.candidates(ctx, cl.db, after, n)
		if err != nil || len(ids) == 0 {
			return err
		}
		if cl.guard != nil {
			if err := cl.guard.replicated(ctx, max(cl.wait, cleanupQuietWait)); err != nil {
				return fmt.Errorf("rows %d to %d: %w", ids[0], ids[len(ids)-1], err)
			}
		}
		if err := cl.deleteAll(ctx, ids); err != nil {
			return err
		}
		if len(ids) < n {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// deleteAll deletes ids, --batch per DELETE, each in its own transaction
// (autocommit), pausing between them.
func (cl *cleaner) deleteAll(ctx context.Context, ids []uint64) error {
	for len(ids) > 0 {
		n := min(cl.batch, len(ids))
		chunk := ids[:n]
		ids = ids[n:]
		if cl.res.DryRun {
			continue
		}
		if cl.res.Batches > 0 && cl.pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cl.pause):
			}
		}
		res, err := cl.db.ExecContext(ctx, cl.q.Delete(chunk))
		if mysqlserver.Denied(err) {
			return outbox.WithHint(fmt.Errorf("delete rows %d to %d: %w", chunk[0], chunk[n-1], err),
				"the MySQL user needs the DELETE privilege on the outbox table, which the relay itself does not: GRANT DELETE ON %s TO <user>; or run cleanup as a user that has it (docs/cleanup.md); the rows deleted before stay deleted, and a rerun goes on",
				cl.res.Table)
		}
		if err != nil {
			return fmt.Errorf("delete rows %d to %d: %w", chunk[0], chunk[n-1], err)
		}
		affected, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("delete rows %d to %d: %w", chunk[0], chunk[n-1], err)
		}
		cl.res.Deleted += affected
		cl.res.Batches++
		if time.Since(cl.lastLog) >= cleanupProgressEvery {
			cl.lastLog = time.Now()
			cl.log.Info("cleanup progress", "deleted", cl.res.Deleted, "rows_per_second", int64(cl.rate()), "last_id", chunk[n-1])
		}
	}
	return nil
}

func (cl *cleaner) rate() float64 {
	if s := time.Since(cl.start).Seconds(); s > 0 {
		return float64(cl.res.Deleted) / s
	}
	return 0
}

// finish fills in the time taken and the rate.
func (cl *cleaner) finish() {
	cl.res.Seconds = time.Since(cl.start).Round(time.Millisecond).Seconds()
	cl.res.RowsPerSecond = float64(int64(cl.rate()*10)) / 10
}

// done says what was deleted, for the summary and for errors.
func (cl *cleaner) done() string {
	if cl.res.DryRun {
		return fmt.Sprintf("%d rows would be deleted (dry run)", cl.res.Candidates)
	}
	return fmt.Sprintf("deleted %d rows in %d batches", cl.res.Deleted, cl.res.Batches)
}
