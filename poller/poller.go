// Package poller relays outbox rows to Redis Streams by polling the table, for
// servers where the binlog is not available. Each round is one database
// transaction at READ COMMITTED:
//
//  1. SELECT ... WHERE sent_at IS NULL ORDER BY id LIMIT n FOR UPDATE SKIP
//     LOCKED locks a batch that no other relay holds, reading each row's id,
//     aggregate and sizes but no payload;
//  2. a non-locking read lists the unsent rows below the batch's largest id
//     that this relay does not hold (locked by other relays, or committed
//     since step 1), and every row of an aggregate that such a row precedes
//     is left for a later round, so an aggregate's events never overtake
//     each other across relays;
//  3. the rows that fit MaxBatchBytes (an id-ordered prefix of the rest) are
//     read whole, and one Lua script appends them to their streams (and,
//     with a dedupe window, records their message ids in the same step),
//     while
//  4. UPDATE ... SET sent_at = NOW(6) (or DELETE) marks them; then COMMIT.
//
// Progress lives in the table, never in a high-water mark on id: a row with a
// smaller id can commit after a larger one and would be skipped.
//
// Delivery is at least once: a crash between the append and the COMMIT leaves
// the rows unsent and the next round appends them again (a clean stop is no
// crash: Run lets the round in flight commit). With a dedupe window on the
// Publisher (redisstream.Config.Dedupe) the script skips message ids it
// appended within the window, which makes that re-append a no-op
// (effectively once).
package poller

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// What Config.OnSent does with a relayed row.
const (
	// OnSentMark sets the sent_at column to NOW(6); the row stays for audit
	// and the producer's own clean-up.
	OnSentMark = "mark"
	// OnSentDelete deletes the row; the table holds unsent rows only.
	OnSentDelete = "delete"
)

// Defaults of Config.
const (
	DefaultBatchSize       = 1000
	DefaultPollInterval    = 200 * time.Millisecond
	DefaultMaxPayloadBytes = 1 << 20
	DefaultMaxBatchBytes   = 16 << 20
	DefaultMaxBackoff      = 30 * time.Second
	DefaultShutdownGrace   = 5 * time.Second
	// MaxBatchSize bounds BatchSize (--batch-size): one SELECT ... FOR
	// UPDATE locks that many rows.
	MaxBatchSize = 100000
)

// Back-off steps of Run between the adaptive extremes.
const (
	// firstIdleWait is the first wait after a round that found nothing;
	// it doubles up to PollInterval.
	firstIdleWait = 5 * time.Millisecond
	// deferredWait is the wait after a round that left rows to another
	// relay's batch: that relay's COMMIT is usually milliseconds away.
	deferredWait = 5 * time.Millisecond
	// maxDeferWait bounds how long a round whose rows all wait behind
	// other relays' rows keeps looking before it lets go of them.
	maxDeferWait = 100 * time.Millisecond
)

// Config configures a Poller.
type Config struct {
	// Database and Table name the outbox table; an empty Database means the
	// connection's current one. The events carry them as given, for the
	// stream template's {database} and {table}.
	Database string
	Table    string
	// Server is the server as the caller inspected it; when its Flavor is
	// empty the first round inspects it.
	Server mysqlserver.Server
	// TableInfo is the outbox table as the caller inspected and validated
	// it (the preflight's schema.Resolution.Table); when nil the first
	// round inspects and validates it.
	TableInfo *schema.Table
	// Mapping maps logical to physical column names (default
	// schema.DefaultMapping). Absent message_id: the id in decimal is the
	// message id; absent aggregate_type or headers: their entry fields are
	// left out, as in binlog mode.
	Mapping schema.Mapping
	// Extra are the columns the entries carry as fields of their own
	// beside the schema_version column (--extra-column), as in binlog mode.
	Extra []schema.ExtraColumn

	// BatchSize is the most rows one round locks (default 1000). Larger
	// batches amortise the round trips but hold row locks longer and, with
	// several relays, make the others defer more rows of shared
	// aggregates. Throughput stops growing beyond about this size
	// (BenchmarkPoller_VsNaive measures it per size).
	BatchSize int
	// MaxBatchBytes bounds the payload and header bytes one round reads
	// from the database and appends (default 16 MiB), and so the relay's
	// memory: the lock reads only ids, aggregates and lengths, and the
	// payloads are read for the id-ordered prefix of the batch that fits.
	// One row larger than the budget goes alone; with OnSentMark an
	// oversize payload (over MaxPayloadBytes) is never read, with
	// OnSentDelete it is, since its dead letter carries it. The append
	// builds the script's arguments from the events: count about twice
	// the budget. Locked rows beyond it stay unsent and are taken by a
	// later round, in id order.
	MaxBatchBytes int
	// PollInterval is the longest wait between rounds when the table has
	// nothing to send (default 200ms). The wait starts at 5ms after the
	// last busy round and doubles, so a relay that just drained the table
	// reacts within milliseconds and an idle one costs 5 queries a second.
	// A full batch is followed by the next round at once.
	PollInterval time.Duration
	// OnSent is OnSentMark (default) or OnSentDelete. Mark needs the sent_at
	// column.
	OnSent string
	// MaxPayloadBytes is the largest payload relayed as an event (default 1
	// MiB); a larger one goes to the dead-letter stream. With OnSentMark the
	// dead-letter entry leaves the payload out (the row keeps it); with
	// OnSentDelete it carries it, so that nothing vanishes.
	MaxPayloadBytes int
	// PayloadJSON makes rows whose payload is not valid JSON dead letters.
	// Set it when the payload column is declared JSON: MariaDB stores JSON
	// as LONGTEXT whose CHECK can be disabled or dropped. It is turned on
	// by itself on MariaDB when the column is declared JSON; MySQL's JSON
	// type needs no check.
	PayloadJSON bool
	// MaxBackoff caps the wait between retries after an error (default 30s).
	MaxBackoff time.Duration
	// Wake, when not nil, replaces the idle polling: once a round finds
	// nothing to lock and the back-off after the last busy round has
	// reached PollInterval (at once when the table has been idle since
	// the start or since the last wake), Run waits for a value on Wake
	// instead of polling again. The caller sends one, without blocking,
	// on a channel of capacity 1, whenever a probe (ProbeQuery) finds an
	// unsent row: a relay of many tables probes them all in one statement,
	// so that idle tables cost what one does. A probe that ran after the
	// round and found the row wakes the poller; a value sent during a
	// round only costs one more round.
	Wake <-chan struct{}
	// ShutdownGrace is how long Run lets the round in flight finish after
	// its context is cancelled (default 5s). A round cut between its append
	// and its COMMIT rolls back, and its rows are appended again at the
	// next start; the grace lets a clean stop commit instead. A round
	// still running after it (a stalled server) is abandoned: at least
	// once, like a crash. Keep it below the supervisor's stop timeout
	// (Docker's 10s, systemd's TimeoutStopSec); 0 means the default.
	ShutdownGrace time.Duration
}

func (c *Config) setDefaults() {
	if c.Mapping == nil {
		c.Mapping = schema.DefaultMapping()
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.OnSent == "" {
		c.OnSent = OnSentMark
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if err := c.Mapping.Validate(); err != nil {
		return err
	}
	switch {
	case c.Table == "":
		return fmt.Errorf("%w: poller: Table is required", outbox.ErrConfig)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return outbox.WithHint(fmt.Errorf("%w: poller: --batch-size %d is out of range", outbox.ErrConfig, c.BatchSize), "use 1 to %d; 500 is a good start", MaxBatchSize)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("%w: poller: --max-batch-bytes %d must be positive", outbox.ErrConfig, c.MaxBatchBytes)
	case c.PollInterval < 0:
		return fmt.Errorf("%w: poller: --poll-interval %s is negative", outbox.ErrConfig, c.PollInterval)
	case c.OnSent != OnSentMark && c.OnSent != OnSentDelete:
		return outbox.WithHint(fmt.Errorf("%w: poller: --on-sent %q is neither mark nor delete", outbox.ErrConfig, c.OnSent), "use --on-sent mark or --on-sent delete")
	case c.OnSent == OnSentMark && !c.Mapping.Has(schema.ColSentAt):
		return outbox.WithHint(fmt.Errorf("%w: poller: --on-sent mark needs the sent_at column, which the mapping declares absent", outbox.ErrConfig),
			"add a sent_at DATETIME(6) NULL column and map it with --column sent_at=<name>, or run with --on-sent delete")
	case c.MaxPayloadBytes < 1:
		return fmt.Errorf("%w: poller: --max-payload-bytes %d must be positive", outbox.ErrConfig, c.MaxPayloadBytes)
	case c.MaxBackoff <= 0:
		return fmt.Errorf("%w: poller: MaxBackoff %s must be positive", outbox.ErrConfig, c.MaxBackoff)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("%w: poller: --shutdown-grace %s is negative", outbox.ErrConfig, c.ShutdownGrace)
	}
	return nil
}

// Stats are counters for metrics and tests.
type Stats struct {
	// Rounds counts the transactions that locked at least one row.
	Rounds uint64
	// Events counts the rows relayed (appended or skipped as duplicates,
	// then marked or deleted), dead letters included.
	Events uint64
	// DeadLetters counts the rows moved to the dead-letter stream;
	// Oversize the ones among them whose payload exceeded MaxPayloadBytes.
	DeadLetters uint64
	Oversize    uint64
	// Duplicates counts the events the dedupe window kept from being
	// appended again (each one a crash or a failed COMMIT survived).
	Duplicates uint64
	// Deferred counts locked rows left for a later round because an
	// earlier unsent event of their aggregate was held by another relay
	// (or the batch reached MaxBatchBytes).
	Deferred uint64
	// Errors counts failed rounds.
	Errors uint64
	// LastRelay is when a round last relayed rows.
	LastRelay time.Time
	// Retrying is the error Run is retrying after, "" while rounds
	// succeed: the relay is not ready meanwhile.
	Retrying string
}

// Poller relays unsent outbox rows to Redis Streams. Run it in as many
// processes as needed; Step and Run must not be called concurrently on one
// Poller.
type Poller struct {
	db  *sql.DB
	pub Publisher
	cfg Config
	log *slog.Logger

	// q is nil until prepare inspected the server and the table.
	q *queries
	// backlog measures what is unsent, for the lag probe.
	backlog backlogQueries
	// limit is the LIMIT of the next round's lock (see nextLimit); 0 is
	// BatchSize.
	limit int

	mu    sync.Mutex
	stats Stats
	// retry is Run's policy, nil before Run.
	retry *retry.Policy

	// afterPublish, when set (by tests), runs between the append and the
	// marking UPDATE: the crash window of at-least-once delivery.
	afterPublish func(ctx context.Context, tx *sql.Tx) error
	// onFetch, when set (by tests), learns how many payload and header
	// bytes each round read from the database.
	onFetch func(bytes int)
}

// Publisher appends a round's events to their streams, without a position:
// poll mode keeps its progress in the table. redisstream.Sink implements it,
// configured once by the caller for both modes (streams, dead letters, dedupe
// window, consumer groups).
type Publisher interface {
	// Publish appends events in order, dead letters to the dead-letter
	// stream, and returns how many it appended (with a dedupe window, the
	// others were appended before). After an error the events may or may
	// not be appended (a reply can be lost): the round rolls back and its
	// rows are published again, so the client must not retry on its own
	// (redisconn.NewClient sets MaxRetries -1), or a retry whose first
	// reply was lost appends the batch twice.
	Publish(ctx context.Context, events []outbox.Event) (int, error)
	// Prepare finishes an event for the publisher's entry format as soon
	// as it is read (outbox.Sink's Prepare): the envelope it encodes
	// counts for MaxBatchBytes, and an event the format cannot carry
	// becomes a dead letter, counted as one.
	Prepare(e *outbox.Event)
}

// New returns a Poller that appends through pub. New does not talk to the
// servers; the first round checks the server version and the table.
func New(db *sql.DB, pub Publisher, cfg Config, logger *slog.Logger) (*Poller, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Poller{
		db:      db,
		pub:     pub,
		cfg:     cfg,
		log:     logger.With("component", "poller"),
		backlog: buildBacklog(cfg),
	}, nil
}

// Stats returns a snapshot of the counters.
func (p *Poller) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	if p.retry != nil {
		s.Retrying = p.retry.Failure()
	}
	return s
}

// Run polls until ctx is cancelled, then returns nil. Database and Redis
// errors are logged, rate-limited, and retried with capped exponential
// backoff; errors retrying cannot fix (retry.Final: an unfit table, a server
// without SKIP LOCKED) are returned.
//
// The cancellation of ctx stops the loop, not the round in flight: the
// rounds run on a context that is cancelled only ShutdownGrace after ctx.
// Cancelling a round between its append and its COMMIT would roll the marks
// back, and the next start would append the rows again, a duplicate for
// every row of the round (TestRun_CleanStopsUnderLoadExactlyOnce stops a
// relay under load ten times and finds none). No round starts
// after the stop.
func (p *Poller) Run(ctx context.Context) error {
	p.log.Info("poll relay starting", "table", p.cfg.Table, "database", p.cfg.Database, "mapping", p.cfg.Mapping.String(),
		"batch_size", p.cfg.BatchSize, "poll_interval", p.cfg.PollInterval,
		"on_sent", p.cfg.OnSent, "max_payload_bytes", p.cfg.MaxPayloadBytes,
		"max_batch_bytes", p.cfg.MaxBatchBytes, "shutdown_grace", p.cfg.ShutdownGrace)
	policy := retry.New(p.log, retry.Config{Message: "poll round failed; retrying", MaxWait: p.cfg.MaxBackoff})
	p.mu.Lock()
	p.retry = policy
	p.mu.Unlock()
	work, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	go func() {
		select {
		case <-work.Done():
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(p.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-work.Done():
		case <-t.C:
			abandon()
		}
	}()
	stopped := func(err error) error {
		switch {
		case err != nil && work.Err() != nil:
			p.log.Warn("poll relay stopped: the round in flight did not finish within the shutdown grace and was abandoned; its rows stay unsent and are appended again at the next start",
				logging.KeyError, err, "shutdown_grace", p.cfg.ShutdownGrace,
				logging.KeyHint, "raise --shutdown-grace, or run with --dedupe-window so that the re-append is skipped")
		case err != nil:
			p.log.Warn("poll relay stopped; the last round failed", logging.KeyError, err, logging.KeyHint, outbox.HintOf(err))
		default:
			p.log.Info("poll relay stopped")
		}
		return nil
	}
	idle := time.Duration(0)
	// parked: the last wait was for Wake (or Run just started), so a round
	// that finds nothing parks again at once.
	parked := true
	for {
		if ctx.Err() != nil {
			return stopped(nil)
		}
		r, err := p.step(work)
		if ctx.Err() != nil {
			return stopped(err)
		}
		if err == nil {
			policy.Progressed()
		}
		var wait time.Duration
		switch {
		case err != nil:
			var final error
			if wait, final = policy.Failed(err); final != nil {
				return final
			}
			parked = false
		case r.locked == 0 && p.cfg.Wake != nil && (parked || idle >= p.cfg.PollInterval):
			parked = true
			if !p.waitWake(ctx) {
				return stopped(nil)
			}
			continue
		case (r.full || r.capped) && r.relayed > 0:
			// A full batch, or one cut at MaxBatchBytes: more is waiting.
			idle = 0
		case r.deferred > 0:
			idle = 0
			wait = min(deferredWait, p.cfg.PollInterval)
		case r.relayed > 0:
			idle = 0
			wait = min(firstIdleWait, p.cfg.PollInterval)
		default:
			idle = min(max(2*idle, firstIdleWait), p.cfg.PollInterval)
			wait = idle
		}
		if r.locked > 0 {
			parked = false
		}
		if wait > 0 && !retry.Sleep(ctx, wait) {
			return stopped(nil)
		}
	}
}

// waitWake waits for a value on Wake; it reports whether ctx is still
// live.
func (p *Poller) waitWake(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-p.cfg.Wake:
		return true
	}
}

// ProbeQuery is outboxsql.Probe of the poller's table: a statement that
// returns tag when the table holds an unsent row (see Config.Wake).
func (p *Poller) ProbeQuery(tag int) string {
	return outboxsql.Probe(outboxTable(p.cfg, p.cfg.TableInfo), tag)
}

// Step runs one round and returns how many rows it relayed (appended, or
// skipped as duplicates, and then marked or deleted), dead letters included.
func (p *Poller) Step(ctx context.Context) (int, error) {
	r, err := p.step(ctx)
	return r.relayed, err
}

// round is what one step did.
type round struct {
	locked, relayed, deferred int
	// full: the batch reached its LIMIT; capped: MaxBatchBytes left
	// locked rows for a later round.
	full, capped bool
}

// nextLimit is the LIMIT of the next round's lock. The lock reads no
// payload, but the server still reads every locked row whole to measure it;
// when rows are large, a batch that MaxBatchBytes cuts after a few rows would
// have the server read the rest of the BatchSize rows again every round (a
// 200-row backlog of 512 KiB rows cut at 2 MiB: 100 MiB read per round for
// 1.5 MiB relayed). So after a cut the limit shrinks to twice the rows that
// fit, and it doubles back towards BatchSize after rounds that were not cut.
func nextLimit(rows []row, ok []bool, capped bool, limit, batchSize int) int {
	if !capped {
		return min(2*limit, batchSize)
	}
	fit := 0
	for i := range rows {
		if ok[i] {
			fit = i + 1
		}
	}
	return min(max(2*fit, 1), batchSize)
}

func (p *Poller) step(ctx context.Context) (round, error) {
	if p.q == nil {
		q, err := p.prepare(ctx)
		if err != nil {
			return round{}, err
		}
		p.q = q
	}
	r, err := p.round(ctx)
	if err != nil && ctx.Err() == nil {
		p.mu.Lock()
		p.stats.Errors++
		p.mu.Unlock()
	}
	return r, err
}

// filter returns which of the locked rows may be published now (see
// publishable). When none may, another relay holds the first unsent row of
// every aggregate in the batch, and its COMMIT is usually milliseconds away:
// filter looks again a few times, keeping the batch locked, before giving up
// for this round. Keeping the batch makes the relays work as a pipeline (the
// others lock the rows after it) instead of all fighting over the same
// blocked rows. Waiting only when nothing is publishable cannot deadlock:
// the relay holding the smallest unsent row always has something to publish.
//
// The transaction runs at READ COMMITTED because of this read: every look
// takes a fresh snapshot, so it sees the other relay's COMMIT and a row a
// producer committed after lockBatch. At REPEATABLE READ the first look's
// snapshot would stay for the whole transaction and a re-look could never
// see the blocker go.
func (p *Poller) filter(ctx context.Context, tx *sql.Tx, rows []row) ([]bool, error) {
	wait := time.Millisecond
	deadline := time.Now().Add(maxDeferWait)
	for {
		others, err := p.unsentBelow(ctx, tx, rows)
		if err != nil {
			return nil, err
		}
		ok := publishable(rows, others)
		// At REPEATABLE READ a re-look reads the same snapshot: pointless.
		if slices.Contains(ok, true) || time.Now().Add(wait).After(deadline) || p.q.isolation != sql.LevelReadCommitted {
			return ok, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 8*time.Millisecond)
	}
}

// round runs one transaction: lock, filter, fetch what fits the byte budget,
// append, mark, commit.
func (p *Poller) round(ctx context.Context) (round, error) {
	var r round
	tx, err := p.db.BeginTx(ctx, &sql.TxOptions{Isolation: p.q.isolation})
	if err != nil {
		return r, fmt.Errorf("poll: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	limit := p.limit
	if limit == 0 {
		limit = p.cfg.BatchSize
	}
	rows, err := p.lockBatch(ctx, tx, limit)
	if err != nil {
		return r, err
	}
	r.locked = len(rows)
	r.full = len(rows) >= limit
	if len(rows) == 0 {
		return r, tx.Commit()
	}
	ok, err := p.filter(ctx, tx, rows)
	if err != nil {
		return r, err
	}
	r.capped = capBytes(rows, ok, p.cfg.MaxBatchBytes)
	p.limit = nextLimit(rows, ok, r.capped, limit, p.cfg.BatchSize)
	read, err := p.fetch(ctx, tx, rows, ok)
	if err != nil {
		return r, err
	}
	// The entry format's envelopes are known now: a batch they take over
	// the budget leaves its tail to the next round, as a cut at the lock
	// does.
	if capBytes(rows, ok, p.cfg.MaxBatchBytes) {
		r.capped = true
	}
	if p.onFetch != nil {
		p.onFetch(read)
	}

	events := make([]outbox.Event, 0, len(rows))
	ids := make([]uint64, 0, len(rows))
	var dead, oversize int
	for i := range rows {
		if !ok[i] {
			r.deferred++
			continue
		}
		events = append(events, rows[i].ev)
		ids = append(ids, rows[i].ev.OutboxID)
		if rows[i].ev.Invalid != "" {
			dead++
			if rows[i].oversize {
				oversize++
			}
			p.log.Warn("row moved to the dead-letter stream", "id", rows[i].ev.OutboxID, "message_id", rows[i].ev.MessageID,
				"reason", rows[i].ev.Invalid)
		}
	}
	appended := 0
	if len(events) > 0 {
		// The append and the marking UPDATE overlap. The entries are
		// readable at once, the marks only at the COMMIT below, which
		// waits for both: a failure in between leaves the rows unsent
		// and re-appended later (at least once; the dedupe window absorbs
		// it), never marked without their entries.
		published := make(chan error, 1)
		go func() {
			var err error
			appended, err = p.pub.Publish(ctx, events)
			published <- err
		}()
		markErr := p.markSent(ctx, tx, ids)
		if err := <-published; err != nil {
			return r, err
		}
		if markErr != nil {
			return r, markErr
		}
		if p.afterPublish != nil {
			if err := p.afterPublish(ctx, tx); err != nil {
				return r, err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return r, fmt.Errorf("poll: commit: %w", err)
	}
	r.relayed = len(events)
	p.record(r, dead, oversize, appended)
	return r, nil
}

// record counts a committed round in the stats: r.relayed events, dead of
// them dead letters (oversize for their size), appended of them not
// dropped as duplicates by the dedupe window.
func (p *Poller) record(r round, dead, oversize, appended int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Rounds++
	p.stats.Events += uint64(r.relayed)
	p.stats.DeadLetters += uint64(dead)
	p.stats.Oversize += uint64(oversize)
	p.stats.Duplicates += uint64(r.relayed - appended)
	p.stats.Deferred += uint64(r.deferred)
	if r.relayed > 0 {
		p.stats.LastRelay = time.Now()
	}
}
