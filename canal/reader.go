// Package canal reads committed outbox rows from the MySQL or MariaDB binlog
// and appends them to Redis Streams through an outbox.Sink, exactly once.
//
// It drives go-mysql's replication.BinlogSyncer directly rather than its canal
// package: the relay needs column names from each table map event (canal maps
// by the live schema), a dump-connection session setting, row images with
// their skipped columns, and none of canal's side effects (mysqldump, a random
// server id, a position sync on Close). The package keeps the name of the job.
//
// Guarantees, and how:
//   - Only committed transactions: rows are buffered until their XID (or
//     COMMIT), and a transaction cut short by a reconnect is discarded.
//   - Exactly once: the events of a batch and the position after them are
//     written by one atomic step (outbox.Sink.Append); after any error the
//     reader starts over from the position stored in Redis.
//   - Bounded memory: a transaction larger than MaxTxBytes is read to its end
//     without keeping its rows, then read again and appended in chunks, each
//     chunk recording how many rows of the transaction are done; the events
//     read ahead of the reader are bounded by bytes (EventCacheBytes), not
//     only by count.
//   - Never stuck: a connection that receives nothing for ReadTimeout is
//     closed and rebuilt; a slow one that still receives bytes is left alone.
package canal

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Defaults of Config.
const (
	DefaultServerID        = 1001
	DefaultHeartbeatPeriod = 5 * time.Second
	DefaultEventCacheCount = 256
	DefaultEventCacheBytes = 8 << 20
	DefaultMaxBatchEvents  = 2000
	DefaultMaxBatchBytes   = 1 << 20
	DefaultMaxTxBytes      = 4 << 20
	DefaultIdleCheckpoint  = time.Second
	DefaultMaxBackoff      = 30 * time.Second
)

// Config configures a Reader.
type Config struct {
	// Host, Port, User, Password and TLSConfig reach the server. The user
	// needs REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR) and SELECT
	// on the outbox table.
	Host      string
	Port      uint16
	User      string
	Password  string
	TLSConfig *tls.Config

	// Flavor is position.FlavorMySQL or position.FlavorMariaDB. A wrong flavor
	// makes go-mysql speak the wrong dialect, so it is required, not guessed.
	Flavor string
	// Server is the server as the caller inspected it (optional: without
	// it the reader inspects the server when it needs to).
	Server mysqlserver.Server
	// ServerID is the replica id the relay registers with (default 1001). It
	// must differ from the server's and every other replica's id.
	ServerID uint32

	// Database and Table name the outbox table; only INSERTs into it
	// become events. The reader resolves them once to the names the server
	// uses (schema.ResolveName: with lower_case_table_names 1 or 2 the
	// binlog may name it in another letter case) and stops on a name that
	// matches no table.
	Database string
	Table    string
	// Name, when its Table is set, is the table as the caller already
	// resolved it (schema.ResolveName), and the reader does not ask again.
	Name schema.Name
	// Mapping maps logical to physical column names. Rows without column
	// names (binlog_row_metadata is not FULL) are mapped by position with the
	// columns the reader reads from information_schema when it can prove
	// they are the ones the rows were written with (layout.go).
	Mapping schema.Mapping
	// Absent lists the optional logical columns that the table lacked at
	// start-up and no --column named (schema.Resolution.Absent), which
	// Mapping maps to nothing. A row event that carries a column of that
	// name (an ALTER TABLE added it) stops the reader: relaying on without it
	// would silently leave out a field the producers now fill.
	Absent []string

	// Start says where to begin when Redis holds no position (default: the
	// current end of the binlog).
	Start position.Start
	// PositionKey is only used in log lines.
	PositionKey string

	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle
	// (default 5s); ReadTimeout (default 3 heartbeats) then notices a silently
	// dead connection.
	HeartbeatPeriod time.Duration
	ReadTimeout     time.Duration
	// EventCacheCount and EventCacheBytes bound the events read ahead of the
	// reader: at most 256 events and 8 MiB by default (raw event size; one
	// event larger than EventCacheBytes still passes, alone). A count alone
	// does not bound memory: 256 events of 4 MiB rows are a gigabyte. 8 MiB
	// keeps eight 1 MiB batches ready while Redis works, and the relay's live
	// data near its 20 MiB soft memory limit; more costs its size in memory
	// whenever the relay catches up on large rows, and gains little.
	EventCacheCount int
	EventCacheBytes int
	// MaxBatchEvents and MaxBatchBytes bound one append (defaults 2000 events,
	// 1 MiB: larger batches gain little once a round trip carries a thousand
	// entries, and two of them live at once). A batch is sent as soon as the previous one is done, so under a
	// light load every transaction goes alone and at once.
	MaxBatchEvents int
	MaxBatchBytes  int
	// MaxTxBytes is the largest transaction kept in memory (default 4 MiB,
	// some 10,000 small events); larger ones are read twice and appended in
	// chunks.
	MaxTxBytes int
	// IdleCheckpoint is how often the position is stored while the binlog
	// moves without outbox rows (default 1s), so that a restart does not
	// re-read, and binlog purging does not overtake, a busy server's other
	// traffic.
	IdleCheckpoint time.Duration
	// MaxBackoff caps the wait between reconnects (default 30s).
	MaxBackoff time.Duration
	// ServerIDClashGrace is how long the server may refuse the relay's
	// server id before the relay gives up (default 60s): after a crash the
	// server keeps the dead connection until it notices.
	ServerIDClashGrace time.Duration
}

func (c *Config) setDefaults() {
	if c.ServerID == 0 {
		c.ServerID = DefaultServerID
	}
	if c.HeartbeatPeriod == 0 {
		c.HeartbeatPeriod = DefaultHeartbeatPeriod
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 3 * c.HeartbeatPeriod
	}
	if c.EventCacheCount == 0 {
		c.EventCacheCount = DefaultEventCacheCount
	}
	if c.EventCacheBytes == 0 {
		c.EventCacheBytes = DefaultEventCacheBytes
	}
	if c.MaxBatchEvents == 0 {
		c.MaxBatchEvents = DefaultMaxBatchEvents
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxTxBytes == 0 {
		c.MaxTxBytes = DefaultMaxTxBytes
	}
	if c.IdleCheckpoint == 0 {
		c.IdleCheckpoint = DefaultIdleCheckpoint
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.ServerIDClashGrace == 0 {
		c.ServerIDClashGrace = time.Minute
	}
	if c.Mapping == nil {
		c.Mapping = schema.DefaultMapping()
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Flavor != position.FlavorMySQL && c.Flavor != position.FlavorMariaDB:
		return fmt.Errorf("%w: canal: Flavor %q is neither mysql nor mariadb", outbox.ErrConfig, c.Flavor)
	case c.Host == "" || c.Port == 0:
		return fmt.Errorf("%w: canal: Host and Port are required", outbox.ErrConfig)
	case c.Database == "" || c.Table == "":
		return fmt.Errorf("%w: canal: Database and Table are required", outbox.ErrConfig)
	case c.HeartbeatPeriod < 0 || c.ReadTimeout < c.HeartbeatPeriod:
		return fmt.Errorf("%w: canal: ReadTimeout %s must be at least HeartbeatPeriod %s", outbox.ErrConfig, c.ReadTimeout, c.HeartbeatPeriod)
	case c.EventCacheCount < 0 || c.EventCacheBytes < 0:
		return fmt.Errorf("%w: canal: EventCacheCount %d and EventCacheBytes %d must not be negative", outbox.ErrConfig, c.EventCacheCount, c.EventCacheBytes)
	}
	return nil
}

// Reader relays committed outbox rows from the binlog to a Sink.
type Reader struct {
	cfg  Config
	db   *sql.DB
	sink outbox.Sink
	log  *slog.Logger
	// retry decides what a failed session leads to; the flusher reports
	// progress to it.
	retry *retry.Policy

	writer string        // identifies this process in the positions it writes
	seq    atomic.Uint64 // counts the positions it wrote

	// chunkNext makes the next session read its first transaction in chunks.
	chunkNext bool
	// needLayout makes every session prove the column layout before it
	// reads: the binlog had rows without column names.
	needLayout bool

	// eventBytesHigh is the high-water mark of the event queue's bytes.
	eventBytesHigh atomic.Int64
	// name is the table as the server names it, once resolveName ran.
	name     schema.Name
	resolved bool

	mu         sync.Mutex
	stats      Stats
	serverID   uint32
	serverUUID string
}

// Stats are counters for metrics and tests.
type Stats struct {
	Events       uint64 // appended to streams, dead letters included
	DeadLetters  uint64
	Batches      uint64
	Sessions     uint64
	StatementDML uint64 // outbox INSERTs seen as statements (lost to the relay)
	// EventBytesHigh is the most bytes of binlog events that were read
	// ahead of the reader at once (bounded by Config.EventCacheBytes).
	EventBytesHigh uint64
	Position       string
	// LastAppend is when the last batch was appended; LastCommit the commit
	// time (from the binlog) of the newest transaction in it.
	LastAppend time.Time
	LastCommit time.Time
}

// New returns a Reader. db is a connection pool to the same server, used for
// the checks before streaming (current position, binlog files, identity).
func New(db *sql.DB, sink outbox.Sink, cfg Config, logger *slog.Logger) (*Reader, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	log := logger.With("component", "binlog")
	return &Reader{
		cfg: cfg, db: db, sink: sink, log: log,
		retry: retry.New(log, retry.Config{
			Message: "binlog reader stopped; restarting from the stored position",
			MaxWait: cfg.MaxBackoff,
		}),
		writer: fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano()),
	}, nil
}

// Stats returns a snapshot of the counters.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.EventBytesHigh = uint64(r.eventBytesHigh.Load())
	return s
}

// Run relays until ctx is cancelled (it then returns nil) or an error that a
// retry cannot fix (retry.Final): a configuration error, a purged or foreign
// position, or another relay fencing this one. Other errors (connection loss,
// server restart, Redis down or full) are logged, rate-limited, and the reader
// starts over from the stored position after a capped exponential backoff that
// progress (an append) resets.
func (r *Reader) Run(ctx context.Context) error {
	var clashSince time.Time
	for {
		// Progress is reported to r.retry by the flusher as it appends
		// (recordBatch), so that a recovery is logged when it happens.
		_, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var restart *errChunkRestart
		if errors.As(err, &restart) {
			r.log.Info("re-reading a large transaction in chunks", "file", restart.start.file, "pos", restart.start.pos)
			r.chunkNext = true
			continue
		}
		var layoutRestart *errLayoutRestart
		if errors.As(err, &layoutRestart) {
			r.log.Info("rows without column names; proving the table's column layout before reading them", "file", layoutRestart.start.file, "pos", layoutRestart.start.pos)
			r.needLayout = true
			continue
		}
		if errors.Is(err, errServerIDClash) {
			if clashSince.IsZero() {
				clashSince = time.Now()
			}
			if time.Since(clashSince) > r.cfg.ServerIDClashGrace {
				return fmt.Errorf("%w: %w", outbox.ErrConfig, err)
			}
		} else {
			clashSince = time.Time{}
		}
		if errors.Is(err, outbox.ErrPositionRolledBack) {
			r.log.Warn("stored position went back (Redis lost acknowledged writes); re-reading from it, the streams lost the same entries", logging.KeyError, err)
			continue
		}
		wait, final := r.retry.Failed(err)
		if final != nil {
			return final
		}
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// session reads from the stored position until an error. progressed reports
// whether anything was appended (the backoff is reset as appends happen, by
// recordBatch).
func (r *Reader) session(ctx context.Context) (progressed bool, err error) {
	r.mu.Lock()
	r.stats.Sessions++
	r.mu.Unlock()

	if err := r.resolveName(ctx); err != nil {
		return false, err
	}
	start, prev, err := r.resolveStart(ctx)
	if err != nil {
		return false, err
	}
	if prev == nil {
		// Store the start at once: "now" resolved again after a crash would
		// be later, and the events in between would be skipped.
		next := r.encode(start)
		if err := r.sink.Append(ctx, nil, nil, next); err != nil {
			return false, r.appendError(err)
		}
		prev = next
		r.log.Info("stored the start position", "position", r.positionString(start))
	}

	var proof layoutProof
	if r.needLayout {
		if proof, err = r.proveLayout(ctx, start); err != nil {
			return false, err
		}
	}

	lk := &link{}
	q := newEventQueue(r.cfg.EventCacheCount, int64(r.cfg.EventCacheBytes), &r.eventBytesHigh)
	syncer := replication.NewBinlogSyncer(r.syncerConfig(lk, q))
	defer func() {
		// The KILL connection Close dials gets ReadTimeout: what a live
		// link answers well within.
		lk.closing(r.cfg.ReadTimeout)
		syncer.Close()
	}()
	// Before syncer.Close: go-mysql's reading goroutine may wait for room.
	defer q.close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wd := &watchdog{bytes: &lk.bytes}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wd.watch(sctx, r.cfg.ReadTimeout, func() {
			r.log.Warn("nothing received on the binlog connection for too long; closing it", "read_timeout", r.cfg.ReadTimeout)
			lk.kill()
			q.close()
			syncer.Close()
		})
	}()

	var streamer *replication.BinlogStreamer
	wd.waiting.Store(true)
	if start.gset != nil {
		streamer, err = syncer.StartSyncGTID(start.gset)
	} else {
		streamer, err = syncer.StartSync(mysql.Position{Name: start.file, Pos: start.pos})
	}
	if err != nil {
		cancel()
		wg.Wait()
		if wd.fired.Load() {
			err = fmt.Errorf("%w: nothing received within %s", errDeadConnection, r.cfg.ReadTimeout)
		}
		return false, r.streamError(fmt.Errorf("start binlog dump at %s: %w", r.positionString(start), err))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.watch(sctx, streamer)
	}()
	// While sessions keep failing, the failure lines say enough.
	level := slog.LevelInfo
	if r.retry.Failing() {
		level = slog.LevelDebug
	}
	r.log.Log(ctx, level, "reading binlog", "position", r.positionString(start), "server_id", r.cfg.ServerID)

	f := newFlusher(r, prev, cancel)
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.loop(sctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
		progressed = progressed || f.appended > 0
	}()

	m := &machine{
		name:       r.name,
		dec:        newRowDecoder(r.cfg.Mapping, proof.columns, r.cfg.Absent),
		ddlAhead:   proof.ddlAhead,
		log:        r.log,
		maxTxBytes: r.cfg.MaxTxBytes, maxBatchEvents: r.cfg.MaxBatchEvents, maxBatchBytes: r.cfg.MaxBatchBytes,
		file: start.file, boundary: start, pending: f.take(),
	}
	m.pending.at = start
	if r.chunkNext || start.txRows > 0 {
		m.chunked, m.skip = true, start.txRows
		r.chunkNext = false
	}
	m.flush = func(ctx context.Context) error {
		b, err := f.handOff(ctx, m.pending)
		if err != nil {
			return err
		}
		m.pending = b
		return nil
	}

	lastFlush := time.Now()
	for {
		wd.waiting.Store(true)
		ev, err := f.nextEvent(sctx, q, len(m.pending.events) > 0)
		wd.waiting.Store(false)
		wd.seen.Add(1)
		if err != nil {
			if wd.fired.Load() {
				err = fmt.Errorf("%w: nothing received within %s", errDeadConnection, r.cfg.ReadTimeout)
			}
			if ferr := f.err(); ferr != nil {
				return progressed, r.appendError(ferr)
			}
			if ctx.Err() != nil {
				return progressed, ctx.Err()
			}
			if errors.Is(err, errHandOff) {
				// The flusher went idle while pending waited: hand it over.
				if err := r.offer(sctx, f, m, &lastFlush, true); err != nil {
					return progressed, err
				}
				continue
			}
			err = r.streamError(fmt.Errorf("read binlog event: %w", err))
			if errors.Is(err, outbox.ErrConfig) {
				return progressed, r.stopAfterPending(sctx, f, m, err)
			}
			return progressed, err
		}
		err = m.handle(sctx, ev.ev)
		// Handled: the rows the batch keeps are copies.
		q.release(ev.size)
		if err != nil {
			var restart *errChunkRestart
			var layoutRestart *errLayoutRestart
			if errors.As(err, &restart) || errors.As(err, &layoutRestart) {
				// Everything before the transaction is appended first, so
				// the next session can start exactly at it.
				if err := f.drain(sctx, m.pending); err != nil {
					return progressed, r.appendError(err)
				}
				return progressed, err
			}
			if errors.Is(err, outbox.ErrConfig) {
				return progressed, r.stopAfterPending(sctx, f, m, err)
			}
			if ferr := f.err(); ferr != nil {
				return progressed, r.appendError(ferr)
			}
			return progressed, err
		}
		if m.statementDML > 0 {
			r.mu.Lock()
			r.stats.StatementDML += m.statementDML
			r.mu.Unlock()
			m.statementDML = 0
		}
		if !m.inTx && m.pending.dirty {
			if err := r.offer(sctx, f, m, &lastFlush, false); err != nil {
				return progressed, err
			}
		}
	}
}

// stopAfterPending appends the transactions read before one the relay cannot
// relay, then returns the error that stops it: a fix that starts at the
// stopping point (a file position) would otherwise skip them.
func (r *Reader) stopAfterPending(ctx context.Context, f *flusher, m *machine, stop error) error {
	if err := f.drain(ctx, m.pending); err != nil {
		return r.appendError(err)
	}
	return stop
}

// resolveName replaces the configured names with the server's for them,
// once: compared with the binlog, a name the server folds differently, or
// one of no table, would skip every row while the position moves on.
func (r *Reader) resolveName(ctx context.Context) error {
	if r.resolved {
		return nil
	}
	if r.cfg.Name.Table != "" {
		r.name, r.resolved = r.cfg.Name, true
		return nil
	}
	n, err := schema.ResolveName(ctx, r.db, r.cfg.Database, r.cfg.Table)
	if errors.Is(err, schema.ErrTableNotFound) {
		return fmt.Errorf("%w: %w", outbox.ErrConfig, err)
	}
	if err != nil {
		return err
	}
	r.name, r.resolved = n, true
	return nil
}

// offer hands the pending batch to the flusher when that is worth it: it has
// events and the flusher is idle (no waiting under a light load), it is full
// (wait for the flusher: back-pressure), or only the position moved and the
// last store is IdleCheckpoint old.
func (r *Reader) offer(ctx context.Context, f *flusher, m *machine, lastFlush *time.Time, idle bool) error {
	b := m.pending
	full := len(b.events) >= r.cfg.MaxBatchEvents || b.bytes >= r.cfg.MaxBatchBytes
	if len(b.events) == 0 && !idle {
		if time.Since(*lastFlush) < r.cfg.IdleCheckpoint {
			return nil
		}
	}
	var next *batch
	var err error
	if full {
		next, err = f.handOff(ctx, b)
	} else {
		next, err = f.tryHandOff(b)
	}
	if err != nil {
		if ferr := f.err(); ferr != nil {
			return r.appendError(ferr)
		}
		return err
	}
	if next != nil {
		m.pending = next
		*lastFlush = time.Now()
	}
	return nil
}

// appendError turns a failed append into the reader's error: a position
// mismatch becomes fencing or a rollback, the rest stays retryable.
func (r *Reader) appendError(err error) error {
	var mm *outbox.PositionMismatchError
	if !errors.As(err, &mm) {
		return fmt.Errorf("append to redis: %w", err)
	}
	if mm.Stored == nil {
		return outbox.WithHint(fmt.Errorf("%w: the position was deleted while the relay ran", outbox.ErrFenced),
			"someone ran `binlog-outbox position reset` or deleted the key; restart the relay to start over deliberately")
	}
	stored, derr := position.Decode(mm.Stored)
	if derr == nil && stored.Writer == r.writer && stored.Seq < r.seq.Load() {
		return fmt.Errorf("%w: stored seq %d, last written %d", outbox.ErrPositionRolledBack, stored.Seq, r.seq.Load())
	}
	who := "another process"
	if derr == nil && stored.Writer != "" {
		who = stored.Writer
	}
	return outbox.WithHint(fmt.Errorf("%w: it was written by %s", outbox.ErrFenced, who),
		"two relays must not run for the same outbox table and position key; stop the other one, or give each its own --position-key; this relay stops so that no event is appended twice")
}

// streamError classifies errors of the binlog connection.
func (r *Reader) streamError(err error) error {
	var myErr *mysql.MyError
	if !errors.As(err, &myErr) {
		return err
	}
	switch myErr.Code {
	case errSlaveSameID:
		return r.clashError(err)
	case mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG: // 1236
		// The server says why in the message only; the duplicate server id
		// case needs a different fix than a purged binlog.
		if containsFold(myErr.Message, "server_id") || containsFold(myErr.Message, "server_uuid") {
			return r.clashError(err)
		}
		if hint, ok := anonymousRefusal(myErr.Message); ok {
			return outbox.WithHint(fmt.Errorf("%w: %v", outbox.ErrConfig, err), "%s", hint)
		}
		return outbox.WithHint(fmt.Errorf("%w: %v", outbox.ErrPositionGone, err), "%s", recoveryHint)
	case mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, mysql.ER_ACCESS_DENIED_ERROR, mysql.ER_DBACCESS_DENIED_ERROR:
		return outbox.WithHint(err, "grant the relay's user REPLICATION SLAVE and REPLICATION CLIENT: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '<user>'@'<host>'")
	}
	return err
}

// errSlaveSameID is MariaDB's ER_SLAVE_SAME_ID: a replica with our server id
// is connected. MySQL reports the same as 1236 with a message.
const errSlaveSameID = 4052

// errServerIDClash marks a refusal because of a duplicate server id. Right
// after a crash it is the relay's own dead connection the server has not
// noticed yet, so it is retried for Config.ServerIDClashGrace before it
// counts as a configuration error.
var errServerIDClash = errors.New("another replica is connected with the same server id")

func (r *Reader) clashError(err error) error {
	return outbox.WithHint(fmt.Errorf("%w: %v", errServerIDClash, err),
		"another replica (another relay?) uses server id %d; give each relay its own --server-id, different from every server and replica", r.cfg.ServerID)
}

const recoveryHint = "the binlog the stored position points into is gone (purged, or a different server). Events committed in the gap were not relayed. " +
	"Choose: `binlog-outbox position set --start-from earliest` to re-read all the binlog the server still has (consumers deduplicate by message_id), " +
	"or `binlog-outbox position set --start-from now` to accept the gap, then republish the missing rows with `binlog-outbox run --mode poll` on rows WHERE sent_at IS NULL; " +
	"and keep binlogs longer (binlog_expire_logs_seconds) than the relay may be down"

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// recordBatch updates the counters after an append.
func (r *Reader) recordBatch(b *batch, pos string) {
	var dead uint64
	for i := range b.events {
		if b.events[i].Invalid != "" {
			dead++
		}
	}
	r.mu.Lock()
	r.stats.Events += uint64(len(b.events))
	r.stats.DeadLetters += dead
	r.stats.Batches++
	r.stats.Position = pos
	r.stats.LastAppend = time.Now()
	if b.at.commitTS > 0 {
		r.stats.LastCommit = time.Unix(int64(b.at.commitTS), 0)
	}
	r.mu.Unlock()
	r.retry.Progressed()
	if dead > 0 {
		r.log.Error("rows moved to the dead-letter stream", "rows", dead, "position", pos,
			logging.KeyHint, "see the reason field of the entries in the dead-letter stream; fix the producer")
	}
}

// syncerConfig configures go-mysql for one session: lk dials (and counts the
// bytes the watchdog sees), q receives the events, bounded by bytes. Without
// them (the layout proof's scan) go-mysql dials and queues as it does.
func (r *Reader) syncerConfig(lk *link, q *eventQueue) replication.BinlogSyncerConfig {
	cfg := decodeConfig(r.cfg.Flavor, r.name)
	cfg.ServerID = r.cfg.ServerID
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.TLSConfig = r.cfg.Host, r.cfg.Port, r.cfg.User, r.cfg.Password, r.cfg.TLSConfig
	cfg.HeartbeatPeriod = r.cfg.HeartbeatPeriod
	// No per-packet read deadline: re-arming it for every packet cost a
	// sixth of the reader's CPU. The session's watchdog closes a connection
	// that stays silent past ReadTimeout instead.
	cfg.ReadTimeout = 0
	cfg.DisableRetrySync = true // recovery restarts from the stored position
	cfg.EventCacheCount = r.cfg.EventCacheCount
	if lk != nil {
		cfg.Dialer = lk.dial
	}
	if q != nil {
		// Events go to q, bounded by bytes, not to go-mysql's channel.
		cfg.SynchronousEventHandler = q
		cfg.EventCacheCount = 1
	}
	cfg.Logger = slog.New(warnOnly{r.log.Handler()}).With("component", "go-mysql")
	cfg.Localhost = "binlog-outbox"
	// The reader may pause while Redis is slow; the server must not give up
	// on the dump connection meanwhile (net_write_timeout, 60s).
	cfg.Option = func(c *client.Conn) error {
		_, err := c.Execute("SET SESSION net_write_timeout = GREATEST(@@SESSION.net_write_timeout, 600) /* binlog-outbox */")
		return err
	}
	return cfg
}

// decodeConfig is the part of the syncer's configuration that decides what
// the events look like: how rows, times, decimals and JSON are decoded, and
// which rows are decoded at all. The tests that replay binlog files recorded
// by real MySQL servers build their parser from it, so what they check is
// what the live reader decodes.
func decodeConfig(flavor string, name schema.Name) replication.BinlogSyncerConfig {
	cfg := replication.BinlogSyncerConfig{
		Flavor:                  flavor,
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		UseDecimal:              false,
		// MariaDB 11.4+ writes LogPos 0 inside transactions.
		FillZeroLogPos:            flavor == position.FlavorMariaDB,
		PayloadDecoderConcurrency: 1,
	}
	cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
		pos, err := ev.DecodeHeader(data)
		if err != nil {
			return err
		}
		// Rows of other tables are never decoded: on a busy server they are
		// most of the binlog.
		if ev.Table == nil || !name.Matches(string(ev.Table.Schema), string(ev.Table.Table)) {
			return nil
		}
		return ev.DecodeData(pos, data)
	}
	return cfg
}

// encode renders a point as the stored position, stamped with this process.
func (r *Reader) encode(p point) []byte {
	b := position.Binlog{
		Flavor: r.cfg.Flavor, File: p.file, Pos: p.pos, LastGTID: p.lastGTID.String(), TxRows: p.txRows,
		Writer: r.writer, Seq: r.seq.Add(1), UpdatedAt: time.Now().UTC(),
	}
	b.ServerID, b.ServerUUID = r.identity()
	if p.gset != nil {
		b.GTIDSet = p.gset.String()
	}
	return b.Encode()
}

func (r *Reader) positionString(p point) string {
	s := p.file + ":" + strconv.FormatUint(uint64(p.pos), 10)
	if p.gset != nil {
		s += " gtid_set=" + p.gset.String()
	}
	if p.txRows > 0 {
		s += fmt.Sprintf(" (+%d rows)", p.txRows)
	}
	return s
}

// warnOnly passes go-mysql's warnings and errors on and drops its chatter
// (it logs every connect and rotate at info, and its config as unencodable
// JSON); the reader logs what an operator needs itself.
type warnOnly struct{ slog.Handler }

// Enabled implements slog.Handler.
func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h warnOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnOnly{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
