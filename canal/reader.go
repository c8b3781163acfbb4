// Package canal reads committed outbox rows from the MySQL or MariaDB binlog
// and appends them to Redis Streams through an outbox.Sink, exactly once.
//
// It drives go-mysql's replication.BinlogSyncer directly rather than its canal
// package: the relay needs column names from each table map event (canal maps
// by the live schema), a dump-connection session setting, row images with
// their skipped columns, and none of canal's side effects (mysqldump, a random
// server id, a position sync on Close). The package keeps the name of the job.
//
// Turning a rows event into values, and a row into an Event, is package
// binlogrow's; this package decides which tables are followed, proves the
// column layout of rows without column names, and follows the transactions
// and positions the rows come in.
//
// Guarantees, and how:
//   - Only committed transactions: rows are buffered until their XID (or
//     COMMIT), and a transaction cut short by a reconnect is discarded.
//   - Exactly once: the events of a batch and the position after them are
//     written by one atomic step (outbox.Sink.Append); after any error the
//     reader starts over from the position stored in Redis.
//   - Bounded memory: a transaction of several rows larger than MaxTxBytes
//     is read to its end without keeping its rows (the parser walks the
//     rest of them without decoding), then read again and appended in chunks, each
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
	"sync"
	"sync/atomic"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
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
	DefaultEventCacheBytes = 1 << 20
	DefaultMaxBatchEvents  = 256
	DefaultMaxBatchBytes   = 1 << 20
	DefaultMaxTxBytes      = 4 << 20
	DefaultIdleCheckpoint  = time.Second
	DefaultMaxBackoff      = 30 * time.Second
	DefaultLeaseRenew      = time.Second
	// DefaultLeaseStepDown (Config.LeaseStepDown) outlasts a MySQL or
	// Redis restart, after which the holder goes on by itself.
	DefaultLeaseStepDown = 30 * time.Second
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

	// Database and Table name the outbox table of a relay of one table;
	// only INSERTs into it become events (Sources replaces them, and Name,
	// Mapping and Absent, for several). The reader resolves them once to
	// the names the server uses (schema.ResolveName: with
	// lower_case_table_names 1 or 2 the binlog may name it in another
	// letter case) and stops on a name that matches no table.
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
	// Sources, when set, are the tables the reader follows instead of
	// Database and Table: one position covers all of them, the binlog is
	// read once, and the rows of each are decoded with its own mapping and
	// proven layout (tables.go).
	Sources []Source
	// Extra are the columns the entries carry as fields of their own
	// beside the schema_version column (--extra-column). Rows are mapped
	// to them as to the logical columns: by name, or by the proven layout.
	Extra []schema.ExtraColumn

	// Start says where to begin when Redis holds no position (default: the
	// current end of the binlog).
	Start position.Start
	// PositionKey is only used in log lines.
	PositionKey string
	// UpdateWarning, when set, is logged at error level, at most once a
	// minute, when the binlog carries an UPDATE of a followed table's rows:
	// for a table whose rows another consumer works too (Laravel's jobs
	// table, which a `queue:work database` reserves by UPDATE before it
	// runs the job the relay delivers as well). The relay goes on: the
	// rows it delivers are still every committed one, once. DELETEs are
	// not reported: cleanup deletes relayed rows, and such a worker
	// reserves a row by UPDATE before it deletes it.
	UpdateWarning string

	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle
	// (default 5s); ReadTimeout (default 3 heartbeats) then notices a silently
	// dead connection.
	HeartbeatPeriod time.Duration
	ReadTimeout     time.Duration
	// EventCacheCount and EventCacheBytes bound the events read ahead of the
	// reader: at most 256 events and 1 MiB by default (raw event size; one
	// event larger than EventCacheBytes still passes, alone). A count alone
	// does not bound memory: 256 events of 4 MiB rows are a gigabyte. The
	// events wait parsed, larger than their raw size, and every byte of
	// them is live heap the collector works around under the relay's soft
	// memory limit: with 8 MiB, 512 KiB rows moved at two thirds of the
	// rate of 4 MiB, and 1 MiB moved them faster again, at less CPU, and
	// kept the catch-up of one large transaction under 30 MB of RSS where
	// 4 MiB made it 33-34 (binlog-outbox-bench --workloads huge,onetx).
	EventCacheCount int
	EventCacheBytes int
	// MaxBatchEvents and MaxBatchBytes bound one append (defaults 256 events,
	// 1 MiB). Redis keeps every command of a MULTI transaction until its
	// EXEC: with 1,000-2,000 entries per batch it spent 18-22% more
	// instructions per entry than on the same XADDs pipelined bare
	// (allocations off jemalloc's fast path) and missed a 512 KiB cache
	// four times as often; with 256 it spends 8% more, and as much with 64
	// or 128, which hold fewer arguments but run more transactions
	// (binlog-outbox-bench --redis-callgrind). A batch is sent as soon as
	// the previous one is done, so under a light load every transaction
	// goes at once, alone or with those received in the same read.
	MaxBatchEvents int
	MaxBatchBytes  int
	// MaxTxBytes is the largest transaction kept in memory (default 4 MiB,
	// some 10,000 small events); larger ones are read twice and appended in
	// chunks. A transaction of one row is kept whole, however large: its
	// row is in memory with its event already.
	MaxTxBytes int
	// IdleCheckpoint is how often the position is stored while the binlog
	// moves without outbox rows (default 1s), so that a restart does not
	// re-read, and binlog purging does not overtake, a busy server's other
	// traffic.
	IdleCheckpoint time.Duration
	// MaxBackoff caps the wait between reconnects (default 30s).
	MaxBackoff time.Duration
	// Lease, when set, makes the reader a standby until it holds the lease
	// of the position (standby.go): of the relays of one position only the
	// holder reads, and one that loses it waits to take it again instead of
	// stopping. Without it a second relay is fenced by the position and
	// stops (--lease=false).
	Lease Lease
	// Recorder, when set, records the relay in Redis (redisadmin.Record)
	// once the first session knows where it starts: after a first start
	// stored its position, so that a record always means a position was
	// stored, and a record without one a lost position.
	Recorder func(ctx context.Context) error
	// ExpectPosition says the checks before the start found a stored
	// position: the first session that finds none then refuses, as a later
	// one does, rather than start afresh (it was deleted in between).
	ExpectPosition bool
	// ServerIDClaim, when set, is claimed before every binlog connection
	// and renewed while it is open: a relay of another position holding
	// ServerID makes this one stop before it connects (serverid.go).
	ServerIDClaim ServerIDClaim
	// LeaseRenew is how often the holder renews the lease and a standby
	// tries to take it (default 1s); it must stay well below the lease's
	// TTL.
	LeaseRenew time.Duration
	// LeaseStepDown is how long the holder may fail to read or append
	// (MySQL unreachable from its host, say, while Redis is not) before it
	// gives the lease up, so that a standby that can reach the servers
	// takes over (default DefaultLeaseStepDown; negative: never). It then
	// waits as a standby, and takes the lease again if nobody else does.
	LeaseStepDown time.Duration
	// Cuts, when set, tells where batches must end (cuts.go): each session
	// ends a batch exactly at each point it names, so that the parts of the
	// sink that hold the appends up to there can skip whole batches. Nil:
	// anywhere.
	Cuts Cuts
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
	if c.LeaseRenew == 0 {
		c.LeaseRenew = DefaultLeaseRenew
	}
	if c.LeaseStepDown == 0 {
		c.LeaseStepDown = DefaultLeaseStepDown
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
	case len(c.Sources) == 0 && (c.Database == "" || c.Table == ""):
		return fmt.Errorf("%w: canal: Database and Table, or Sources, are required", outbox.ErrConfig)
	case c.HeartbeatPeriod < 0 || c.ReadTimeout < c.HeartbeatPeriod:
		return fmt.Errorf("%w: canal: ReadTimeout %s must be at least HeartbeatPeriod %s", outbox.ErrConfig, c.ReadTimeout, c.HeartbeatPeriod)
	case c.EventCacheCount < 0 || c.EventCacheBytes < 0:
		return fmt.Errorf("%w: canal: EventCacheCount %d and EventCacheBytes %d must not be negative", outbox.ErrConfig, c.EventCacheCount, c.EventCacheBytes)
	case c.LeaseRenew < 0:
		return fmt.Errorf("%w: canal: LeaseRenew %s must not be negative", outbox.ErrConfig, c.LeaseRenew)
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
	// recorded says Recorder ran.
	recorded bool
	// updates reports UPDATEs of the followed tables (Config.UpdateWarning)
	// across sessions; nil without the warning.
	updates *updateWarner
	// hadPosition says a session found a stored position or stored one: a
	// later session that finds none must not start over from Config.Start.
	hadPosition bool

	// chunkNext makes the next session read its first transaction in chunks.
	chunkNext bool
	// needLayout makes every session prove the column layout before it
	// reads: the binlog had rows without column names.
	needLayout bool

	// leader is set while the reader reads: it holds the lease, or runs
	// without one.
	leader atomic.Bool
	// waiting is set while another relay holds the lease (Stats.Standby).
	waiting atomic.Bool

	// eventBytesHigh is the high-water mark of the event queue's bytes.
	eventBytesHigh atomic.Int64
	// sources are what the reader follows, once resolveSources ran.
	sources *sourceSet
	// layoutTable is the table whose rows without names ended the last
	// session: the next one's proof must find its columns.
	layoutTable schema.Name
	// carried are the layouts the last session had proven when it ended,
	// for the next session's proof. They are in force wherever the next
	// one starts: the stored position only moves forward from the last
	// session's start, and that session forgot each layout at the first
	// DDL on its table it read; a position that went back drops them.
	carried map[string][]binlogrow.Column

	// collations name the character set of each collation id of the
	// server, read at each session's start (binlogrow.ReadCollations): a failover
	// may bring a server that has more.
	collations map[uint64]string

	// noticed is the last change of server noticeNewServer logged.
	noticed string

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
	// RowsWalked counts the rows of transactions too large to keep that
	// the first read walked to the transaction's end without decoding.
	RowsWalked uint64
	// EventBytesHigh is the most bytes of binlog events that were read
	// ahead of the reader at once (bounded by Config.EventCacheBytes).
	EventBytesHigh uint64
	Position       string
	// LastAppend is when the last batch was appended; LastCommit the commit
	// time (from the binlog) of the newest transaction in it.
	LastAppend time.Time
	LastCommit time.Time
	// Stored is the position last stored: after the last append, or
	// where the session started. The lag probe measures from it.
	Stored position.Point
	// Retrying is the error the reader is retrying after, "" while it
	// reads: the relay is not ready meanwhile.
	Retrying string
	// Leader is set while the reader reads: it holds the lease, or runs
	// without one; a standby waiting for the lease has it unset.
	Leader bool
	// Standby is set while another relay holds the lease and this one
	// waits for it (not while the lease cannot be read: Redis down).
	Standby bool
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
	var updates *updateWarner
	if cfg.UpdateWarning != "" {
		updates = &updateWarner{text: cfg.UpdateWarning}
	}
	return &Reader{
		cfg: cfg, db: db, sink: sink, log: log, updates: updates,
		retry: retry.New(log, retry.Config{
			Message: "binlog reader stopped; restarting from the stored position",
			MaxWait: cfg.MaxBackoff,
		}),
		writer:      fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano()),
		hadPosition: cfg.ExpectPosition,
	}, nil
}

// Stats returns a snapshot of the counters.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.EventBytesHigh = uint64(r.eventBytesHigh.Load())
	s.Retrying = r.retry.Failure()
	s.Leader = r.leader.Load()
	s.Standby = r.waiting.Load()
	return s
}

// Run relays until ctx is cancelled (it then returns nil) or an error that a
// retry cannot fix (retry.Final): a configuration error, a purged or foreign
// position, or another relay fencing this one. Other errors (connection loss,
// server restart, Redis down or full) are logged, rate-limited, and the reader
// starts over from the stored position after a capped exponential backoff that
// progress (an append) resets. With Config.Lease it reads only while it holds
// the lease, and waits whenever another relay does (standby).
func (r *Reader) Run(ctx context.Context) error {
	defer r.releaseServerID(ctx)
	if r.cfg.Lease != nil {
		return r.standby(ctx)
	}
	r.leader.Store(true)
	defer r.leader.Store(false)
	return r.relay(ctx)
}

// relay reads sessions from the stored position, retrying as Run says, until
// ctx is cancelled, a final error, or the sink refuses the lease
// (outbox.ErrLeaseLost, returned for the standby loop to wait again).
func (r *Reader) relay(ctx context.Context) error {
	var clashSince time.Time
	for {
		// Progress is reported to r.retry by the flusher as it appends
		// (recordBatch), so that a recovery is logged when it happens.
		_, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ce *columnError
		if errors.As(err, &ce) {
			err = r.explainColumn(ctx, ce)
		}
		var restart *errChunkRestart
		if errors.As(err, &restart) {
			r.log.Info("re-reading a large transaction in chunks", "file", restart.start.File, "pos", restart.start.Pos)
			r.chunkNext = true
			continue
		}
		var layoutRestart *errLayoutRestart
		if errors.As(err, &layoutRestart) {
			r.log.Info("rows without column names; proving the table's column layout before reading them", "table", layoutRestart.table.String(), "file", layoutRestart.start.File, "pos", layoutRestart.start.Pos)
			r.needLayout, r.layoutTable = true, layoutRestart.table
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
		if errors.Is(err, outbox.ErrLeaseLost) {
			return err
		}
		if errors.Is(err, outbox.ErrPositionRolledBack) {
			r.carried = nil
			r.log.Warn("stored position went back (Redis lost acknowledged writes); re-reading from it, the streams lost the same entries", logging.KeyError, err)
			continue
		}
		wait, final := r.retry.Failed(err)
		if final != nil {
			return final
		}
		if r.cfg.Lease != nil && r.cfg.LeaseStepDown > 0 {
			if d := r.retry.FailingFor(); d >= r.cfg.LeaseStepDown {
				return &stepDownError{failingFor: d, err: err}
			}
		}
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// recordBatch updates the counters after an append; the flusher calls it.
func (r *Reader) recordBatch(b *batch) {
	pos := b.at.String()
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
	r.stats.Stored = b.at
	r.stats.LastAppend = time.Now()
	if b.at.CommitTS > 0 {
		r.stats.LastCommit = time.Unix(int64(b.at.CommitTS), 0)
	}
	r.mu.Unlock()
	r.retry.Progressed()
	if dead > 0 {
		r.log.Error("rows moved to the dead-letter stream", "rows", dead, "position", pos,
			logging.KeyHint, "see the reason field of the entries in the dead-letter stream; fix the producer")
	}
}

// encode renders a point as the stored position, stamped with this process
// and the next of its sequence numbers.
func (r *Reader) encode(p position.Point) []byte {
	b := p.Binlog(r.cfg.Flavor)
	b.Writer, b.Seq, b.UpdatedAt = r.writer, r.seq.Add(1), time.Now().UTC()
	b.ServerID, b.ServerUUID = r.identity()
	return b.Encode()
}
