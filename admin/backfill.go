package admin

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// DefaultBackfillRate is backfill's --rate: entries per second. A rebuild
// of history is not urgent, and Redis serves the live relay and its
// consumers meanwhile.
const DefaultBackfillRate = 1000

// backfillBatch is the most rows one step reads and appends.
const backfillBatch = 100

// ErrLiveStream means a backfill's template could write a stream the
// relay writes.
var ErrLiveStream = outbox.NewConfigError("the backfill's --stream can name a live stream")

// BackfillOptions say what Backfill appends where.
type BackfillOptions struct {
	Redis redis.UniversalClient
	DB    *sql.DB
	// Sink is built with the backfill's --stream and run's format flags
	// (no position key); Live is the relay's stream template.
	Sink *redisstream.Sink
	Live *entry.Template
	// Table is the outbox table with its resolved mapping and inspection;
	// Database fills {database}.
	Table    outboxsql.Table
	Database string
	Extra    []schema.ExtraColumn
	// Since and Until bound occurred_at: at or after Since, before Until
	// (each off when zero).
	Since, Until time.Time
	// Rate is the most entries appended per second, 0 for no bound.
	Rate int
	// Progress, when not nil, is told after each step.
	Progress func(BackfillReport)
}

// BackfillReport is what Backfill did; its JSON is `backfill --json`.
type BackfillReport struct {
	Stream      string `json:"stream"`
	ProgressKey string `json:"progress_key"`
	// Appended counts the entries this run appended; LastID is the last
	// id the backfill stored (this run's or a run's before it).
	Appended int    `json:"appended"`
	LastID   uint64 `json:"last_id"`
	// UpTo is the table's highest id when the run started: where it stops.
	UpTo uint64 `json:"up_to"`
	// Skipped are the rows run would dead-letter, left out: a backfill
	// does not write the dead-letter stream.
	Skipped []uint64 `json:"skipped,omitempty"`
	// Paced is how long the rate limit held the run back.
	Paced time.Duration `json:"paced_ns"`
}

// ErrBackfillCluster refuses a backfill on Redis Cluster: one script
// writes the progress and the entries, so on a cluster they would have to
// share a hash slot, which a template over aggregates cannot promise.
var ErrBackfillCluster = outbox.NewConfigError("backfill does not run on Redis Cluster: its progress and its entries are written in one script, which a cluster runs in one hash slot only")

// BackfillLive is the template of the relay's streams, live (run's
// --stream as the relay resolves it for the table), which a backfill must
// not write (CheckBackfillTarget). It refuses Redis Cluster first
// (ErrBackfillCluster).
func BackfillLive(cluster bool, live string, partitions int, hasAggType bool) (*entry.Template, error) {
	if cluster {
		return nil, outbox.WithHint(ErrBackfillCluster, "run it against a standalone Redis or Sentinel, or rebuild the consumer from the live streams")
	}
	t, err := entry.ParseTemplate(live, partitions, hasAggType)
	if err != nil {
		return nil, fmt.Errorf("--live-stream: %w", err)
	}
	return t, nil
}

// CheckBackfillTarget refuses a backfill template that can render a name
// the live template, the dead-letter stream or the relay's own keys can
// be: a backfill writes only streams no relay writes.
func CheckBackfillTarget(backfill, live *entry.Template, deadLetter string) error {
	hint := "give the backfill streams of their own, e.g. --stream 'rebuild:{aggregate_type}' beside the relay's --live-stream %q; a placeholder stands for any text, so the literal parts must differ"
	switch {
	case backfill.MayOverlap(live):
		return outbox.WithHint(fmt.Errorf("%w: --stream %q can name a stream of the relay's --live-stream %q", ErrLiveStream, backfill, live), hint, live)
	case backfill.MayRender(deadLetter):
		return outbox.WithHint(fmt.Errorf("%w: --stream %q can name the dead-letter stream %s", ErrLiveStream, backfill, deadLetter), hint, live)
	case backfill.MayRenderPrefix(redisstream.KeyPrefix):
		return outbox.WithHint(fmt.Errorf("%w: --stream %q can name a key under %s, which the relay keeps for itself", ErrLiveStream, backfill, redisstream.KeyPrefix), hint, live)
	}
	return nil
}

// BackfillProgressKey is the key of a backfill's progress: one per table,
// template and window, so that the same command line resumes it and
// another one starts afresh.
func BackfillProgressKey(database, table, template string, since, until time.Time) string {
	h := sha256.Sum256([]byte(template + "\x00" + stamp(since) + "\x00" + stamp(until)))
	return redisstream.KeyPrefix + "backfill:" + database + "." + table + ":" + hex.EncodeToString(h[:8])
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Backfill appends the rows of the window the table holds, in id order, to
// the streams of the backfill's template, at most o.Rate a second. Each
// step reads the rows after the stored progress and appends them with the
// new progress in one script (redisstream.Sink.Backfill), so that a run
// interrupted anywhere and run again appends each row once. It writes
// neither the live streams, nor the dead-letter stream, nor the position.
func Backfill(ctx context.Context, o BackfillOptions) (BackfillReport, error) {
	r := BackfillReport{Stream: o.Sink.Template().String(),
		ProgressKey: BackfillProgressKey(o.Database, o.Table.Name, o.Sink.Template().String(), o.Since, o.Until)}
	if err := CheckBackfillTarget(o.Sink.Template(), o.Live, o.Sink.DeadLetterStream()); err != nil {
		return r, err
	}
	q := outboxsql.NewBackfill(o.Table, schema.FieldColumns(o.Table.Mapping, o.Extra))
	var max sql.NullInt64
	if err := o.DB.QueryRowContext(ctx, q.MaxID()).Scan(&max); err != nil {
		return r, fmt.Errorf("backfill: read the highest id: %w", err)
	}
	r.UpTo = uint64(max.Int64)
	p := newPacer(o.Rate)
	for {
		last, err := redisadmin.BackfillProgress(ctx, o.Redis, r.ProgressKey)
		if err != nil {
			return r, fmt.Errorf("backfill: %w", err)
		}
		r.LastID = last
		n, err := o.step(ctx, q, p, &r)
		if err != nil {
			return r, o.stepError(&r, err)
		}
		if n == 0 {
			r.Paced = p.waited
			return r, nil
		}
		if o.Progress != nil {
			o.Progress(r)
		}
	}
}

// stepError says what is done, so that the operator knows a run again
// with the same command line finishes the rest.
func (o BackfillOptions) stepError(r *BackfillReport, err error) error {
	if errors.Is(err, redisstream.ErrBackfillMoved) {
		return outbox.WithHint(fmt.Errorf("backfill: %w", err),
			"another backfill with the same --stream, --since and --until is running (progress key %s); let one run, the other's entries are not appended twice", r.ProgressKey)
	}
	return outbox.WithHint(fmt.Errorf("backfill: %d entries appended, up to id %d, then: %w", r.Appended, r.LastID, err),
		"fix the cause and run the same command again: it resumes after id %d from %s, so nothing is appended twice%s", r.LastID, r.ProgressKey, hintSuffix(err))
}

// step reads the next rows and appends them; it returns how many rows it
// read, 0 at the end.
func (o BackfillOptions) step(ctx context.Context, q *outboxsql.Backfill, p *pacer, r *BackfillReport) (int, error) {
	limit := backfillBatch
	if o.Rate > 0 {
		limit = min(limit, o.Rate)
	}
	query, args := q.Rows(r.LastID, r.UpTo, o.Since, o.Until, limit)
	rs, err := o.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("read rows: %w", err)
	}
	defer rs.Close()
	d := newRowDecoder(o.Table, o.Extra)
	var events []outbox.Event
	read, last := 0, r.LastID
	var skipped []uint64
	for rs.Next() {
		d.reset()
		if err := rs.Scan(d.dest...); err != nil {
			return 0, fmt.Errorf("read rows: %w", err)
		}
		e := d.event()
		e.Database, e.Table = o.Database, o.Table.Name
		read, last = read+1, e.OutboxID
		if o.Sink.Prepare(&e); e.Invalid != "" {
			skipped = append(skipped, e.OutboxID)
			continue
		}
		events = append(events, e)
	}
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("read rows: %w", err)
	}
	if read == 0 {
		return 0, nil
	}
	if err := p.wait(ctx, len(events)); err != nil {
		return 0, err
	}
	if err := o.Sink.Backfill(ctx, r.ProgressKey, events, r.LastID, last); err != nil {
		return 0, err
	}
	r.Appended += len(events)
	r.LastID = last
	r.Skipped = append(r.Skipped, skipped...)
	return read, nil
}

// pacer holds a run to rate entries a second: a batch goes once the
// entries before it have had their time, sent/rate seconds after the first
// step, so that by t seconds at most rate*t entries and one batch (at most
// rate entries) are appended.
type pacer struct {
	rate   int
	start  time.Time
	sent   int
	waited time.Duration
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
}

func newPacer(rate int) *pacer {
	return &pacer{rate: rate, now: time.Now, sleep: sleepCtx}
}

// wait returns when n more entries may be appended.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 {
		return nil
	}
	if p.start.IsZero() {
		p.start = p.now()
	}
	// The entries before this batch fill sent/rate seconds; the batch,
	// at most one second's worth, may go once they have passed.
	due := p.start.Add(time.Duration(float64(p.sent) / float64(p.rate) * float64(time.Second)))
	if d := due.Sub(p.now()); d > 0 {
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
		p.waited += d
	}
	p.sent += n
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
