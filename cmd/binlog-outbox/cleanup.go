package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Defaults and bounds of the cleanup flags.
const (
	defaultCleanupBatch = 500
	maxCleanupBatch     = 10000
	defaultCleanupWait  = time.Minute
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

func cleanupCommand() *cli.Command {
	return &cli.Command{
		Name:  "cleanup",
		Usage: "delete relayed outbox rows older than a duration, in small batches, while producers and the relay run",
		Description: "Deletes the rows whose occurred_at is older than --older-than that the relay has relayed, by primary key,\n" +
			"--batch rows per DELETE, each its own short transaction. Binlog mode: only rows the relay's stored\n" +
			"position has passed; the rows are chosen in a consistent snapshot, and deleted once the position reached\n" +
			"the binlog end as of that snapshot; if it does not within --wait (the relay is behind or stopped),\n" +
			"cleanup deletes nothing more and exits 1. Poll mode: only rows marked sent (sent_at set); unsent rows\n" +
			"stay. A table without sent_at has nothing to clean in poll mode: the poller deletes the rows it sends.\n" +
			"With --redis-cluster, rows also wait until every master's replicas hold what it does, and stay when a\n" +
			"failover happens meanwhile (it may have lost appends).\n" +
			"Exits 0 when done, 1 on failure, 2 for a usage or configuration error. See docs/operations.md.",
		Flags: []cli.Flag{
			positionKeyFlag(),
			&cli.StringFlag{
				Name:    "older-than",
				EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_OLDER_THAN"},
				Usage:   "delete rows whose occurred_at is older than this, e.g. 7d, 36h or 1d12h (required)",
			},
			&cli.IntFlag{
				Name:    "batch",
				EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_BATCH"},
				Usage:   "rows per DELETE; each DELETE is its own transaction, so this bounds how long row locks are held",
				Value:   defaultCleanupBatch,
			},
			&cli.DurationFlag{
				Name:    "pause",
				EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_PAUSE"},
				Usage:   "pause between two DELETEs, to leave the server and replicas room",
			},
			&cli.DurationFlag{
				Name:    "wait",
				EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_WAIT"},
				Usage:   "binlog mode: how long to wait for the relay's stored position to pass the rows chosen before giving up (with --redis-cluster, and for the replicas to acknowledge the appends)",
				Value:   defaultCleanupWait,
			},
			&cli.BoolFlag{
				Name:    "dry-run",
				EnvVars: []string{"BINLOG_OUTBOX_CLEANUP_DRY_RUN"},
				Usage:   "count the rows that would be deleted, deleting none",
			},
			&cli.BoolFlag{
				Name:  "json",
				Usage: "print the result as JSON",
			},
		},
		Action: runCleanup,
	}
}

// cleanupResult is what cleanup did.
type cleanupResult struct {
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

func runCleanup(c *cli.Context) error {
	ctx := c.Context
	age, err := parseAge(c.String("older-than"))
	if err != nil {
		return usageError{err}
	}
	batch, pause, wait := c.Int("batch"), c.Duration("pause"), c.Duration("wait")
	if batch < 1 || batch > maxCleanupBatch {
		return usageError{fmt.Errorf("--batch %d: want 1 to %d rows", batch, maxCleanupBatch)}
	}
	if pause < 0 || wait < 0 {
		return usageError{errors.New("--pause and --wait must not be negative")}
	}
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	db, res, err := openUsableTable(ctx, &cfg, "cleanup")
	if err != nil {
		return err
	}
	defer db.Close()
	client := cfg.redisClient()
	defer client.Close()
	keys := redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key"))
	st, err := loadRelayState(ctx, client, keys, "cleanup")
	if err != nil {
		return err
	}
	if !st.Recorded && st.Position == nil {
		// Most likely other keys than the relay's: deleting by guess
		// could delete rows no relay has seen.
		return outbox.WithHint(fmt.Errorf("cleanup: no relay recorded a mode (%s) or a position (%s) for %s.%s, so nothing is known to be relayed",
			keys.Mode, keys.Position, cfg.Database, cfg.Table),
			"run cleanup with the --table, --redis-url and --position-key the relay runs with; `binlog-outbox status` shows what it finds")
	}
	r := &cleanupResult{Mode: st.Mode, Table: cfg.Database + "." + cfg.Table, Cutoff: time.Now().Add(-age).UTC(), DryRun: c.Bool("dry-run")}
	cl := &cleaner{
		db: db, log: cfg.Logger.With("component", "cleanup"), sink: st.Sink, res: r,
		batch: batch, pause: pause, wait: wait, start: time.Now(),
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		cl.guard = &clusterGuard{client: cc}
	}
	switch {
	case st.Mode == mode.Binlog:
		cl.buildQueries(cfg, res.Table, false)
		err = cl.binlogMode(ctx)
	case st.Mode == mode.Poll && !cfg.Mapping.Has(schema.ColSentAt):
		r.Note = "nothing to clean: the table has no sent_at column, so poll mode deletes each row as it sends it"
	case st.Mode == mode.Poll:
		cl.buildQueries(cfg, res.Table, true)
		err = cl.pollMode(ctx)
	default:
		return fmt.Errorf("cleanup: %s holds mode %q, which is neither %s nor %s", keys.Mode, st.Mode, mode.Binlog, mode.Poll)
	}
	cl.finish()
	if err != nil {
		return fmt.Errorf("cleanup: %s, then: %w", cl.done(), err)
	}
	return printCleanup(c.App.Writer, r, c.Bool("json"))
}

// cleaner deletes old relayed rows, a batch at a time.
type cleaner struct {
	db    *sql.DB
	log   *slog.Logger
	sink  *redisstream.Sink
	res   *cleanupResult
	batch int
	pause time.Duration
	wait  time.Duration
	// selectQ reads the ids of old rows after an id, in id order (args:
	// the id, the cutoff, the limit); deleteQ lacks the id list.
	selectQ, deleteQ string
	// unsentQ counts the old unsent rows (poll mode; arg: the cutoff).
	unsentQ string
	// guard, on a Redis Cluster, makes sure the appends the position
	// stands for survive a failover before rows are deleted.
	guard *clusterGuard
	// cutoff is the cutoff as the time column compares with it.
	cutoff  any
	start   time.Time
	lastLog time.Time
}

// buildQueries renders the statements for the resolved mapping. sent
// limits them to rows marked sent (poll mode).
func (cl *cleaner) buildQueries(cfg config, tbl *schema.Table, sent bool) {
	q := columnsOf(cfg)
	occurredName, _ := cfg.Mapping.Physical(schema.ColOccurredAt)
	occurred := schema.QuoteIdent(occurredName)
	// A DATETIME holds UTC, as the relay reads it (eventrow.ToTime); a
	// TIMESTAMP compares in the session's time zone, in which
	// FROM_UNIXTIME renders the instant.
	older := occurred + " < ?"
	cl.cutoff = cl.res.Cutoff
	if tbl != nil {
		if col, ok := tbl.Column(occurredName); ok && col.DataType == "timestamp" {
			older = occurred + " < FROM_UNIXTIME(?)"
			cl.cutoff = float64(cl.res.Cutoff.UnixMicro()) / 1e6
		}
	}
	where := q.id + " > ? AND " + older
	cl.deleteQ = "DELETE /* binlog-outbox */ FROM " + q.table + " WHERE "
	if sent {
		where += " AND NOT (" + q.unsent + ")"
		// Marked sent stays marked; the condition only guards the rule.
		cl.deleteQ += "NOT (" + q.unsent + ") AND "
		cl.unsentQ = "SELECT /* binlog-outbox */ COUNT(*) FROM " + q.table + " WHERE " + q.unsent + " AND " + older
	}
	cl.deleteQ += q.id + " IN ("
	cl.selectQ = "SELECT /* binlog-outbox */ " + q.id + " FROM " + q.table + " WHERE " + where + " ORDER BY " + q.id + " LIMIT ?"
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
	// Without SESSION: the next transaction only, whatever the DSN sets.
	if _, err := conn.ExecContext(ctx, "SET /* binlog-outbox */ TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return nil, position.End{}, fmt.Errorf("set isolation: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "START /* binlog-outbox */ TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return nil, position.End{}, fmt.Errorf("start the snapshot: %w", err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK /* binlog-outbox */") //nolint:errcheck // read only
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
	rows, err := q.QueryContext(ctx, cl.selectQ, after, cl.cutoff, n)
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
	if err := cl.db.QueryRowContext(ctx, cl.unsentQ, cl.cutoff).Scan(&cl.res.KeptUnsent); err != nil {
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
		list := make([]string, len(chunk))
		for i, id := range chunk {
			list[i] = strconv.FormatUint(id, 10)
		}
		res, err := cl.db.ExecContext(ctx, cl.deleteQ+strings.Join(list, ",")+")")
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

func printCleanup(w io.Writer, r *cleanupResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s mode), rows whose occurred_at is before %s: ", r.Table, r.Mode, r.Cutoff.Format(time.RFC3339))
	switch {
	case r.Note != "":
		b.WriteString(r.Note)
	case r.DryRun:
		fmt.Fprintf(&b, "%d would be deleted (dry run)", r.Candidates)
	default:
		fmt.Fprintf(&b, "deleted %d in %d batches, %.1fs (%.0f rows/s)", r.Deleted, r.Batches, r.Seconds, r.RowsPerSecond)
	}
	if r.KeptUnsent > 0 {
		fmt.Fprintf(&b, "; %d as old are not sent yet and stay", r.KeptUnsent)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// maxAgeDays is the oldest --older-than, a century: older rows are no
// retention policy but a typo.
const maxAgeDays = 36525

// ageRE splits an age into weeks, days and a Go duration for the rest.
var ageRE = regexp.MustCompile(`^(?:([0-9]{1,5})w)?(?:([0-9]{1,6})d)?(.*)$`)

// parseAge parses --older-than: a Go duration (36h, 90m) that may start
// with weeks and days, which Go durations lack (7d, 2w, 1d12h).
func parseAge(s string) (time.Duration, error) {
	bad := fmt.Errorf("--older-than %q: want a positive duration such as 7d, 36h or 1d12h", s)
	if s == "" {
		return 0, errors.New("--older-than is required: say how old a relayed row must be to be deleted, e.g. --older-than 7d")
	}
	m := ageRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil || m[0] == "" {
		return 0, bad
	}
	weeks, _ := strconv.Atoi(m[1])
	days, _ := strconv.Atoi(m[2])
	days += weeks * 7
	var rest time.Duration
	if m[3] != "" {
		var err error
		if rest, err = time.ParseDuration(m[3]); err != nil || rest < 0 {
			return 0, bad
		}
	}
	// A century bounds both parts, so that their sum cannot overflow.
	if days > maxAgeDays || rest > maxAgeDays*24*time.Hour {
		return 0, bad
	}
	d := time.Duration(days)*24*time.Hour + rest
	if d <= 0 {
		return 0, bad
	}
	return d, nil
}
