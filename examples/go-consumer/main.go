// Command go-consumer is the consumer half of the outbox pattern: it reads the
// events binlog-outbox appends to a Redis stream with a consumer group and
// processes each one exactly once against MySQL.
//
// Redis Streams deliver at least once: a consumer that crashes after its
// COMMIT and before its XACK gets the entry again, and a relay in poll mode
// can append an event twice. So each entry is processed in a database
// transaction that also records its message_id in processed_messages (the
// inbox); a second delivery hits the primary key, and the consumer
// acknowledges it and skips it. XACK comes after COMMIT, never before: an
// entry acknowledged first and lost in a crash would be lost for good.
//
// Entries a crashed consumer read but never acknowledged stay pending in the
// group; after --min-idle any consumer takes them over with XAUTOCLAIM. An
// entry delivered more than --max-deliveries times (its processing keeps
// failing: a poison message) is copied to the dead-letter stream with the
// reason and acknowledged: it stops being retried, and someone can look at it.
//
//	go run ./examples/go-consumer --mysql-dsn 'app:app@tcp(127.0.0.1:3306)/app' \
//	    --redis-url redis://127.0.0.1:6379/0 --stream outbox:order --group billing
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultGroup            = "billing"
	DefaultStream           = "outbox:order"
	DefaultDeadLetterStream = "outbox:dead-letter"
	DefaultMaxDeliveries    = 5
	DefaultMinIdle          = 30 * time.Second
	DefaultCount            = 100
	DefaultBlock            = 2 * time.Second
)

// Config configures a Consumer.
type Config struct {
	// Stream to read (default outbox:order, the relay's outbox:{aggregate_type}).
	Stream string
	// Group is the consumer group: one per service that reacts to the events;
	// it is also the key of the inbox rows (default billing).
	Group string
	// Consumer names this process within the group; it must be stable across
	// restarts of one process and unique among the group's processes
	// (default hostname-pid).
	Consumer string
	// DeadLetterStream receives entries whose processing failed
	// MaxDeliveries times, with the reason (default outbox:dead-letter, where
	// the relay puts rows it cannot deliver).
	DeadLetterStream string
	// MaxDeliveries is how often an entry is delivered before it is
	// dead-lettered (default 5). Too low dead-letters events that a short
	// database outage made fail; too high retries a poison message longer.
	MaxDeliveries int64
	// MinIdle is how long an entry stays pending with a consumer before
	// another consumer claims it (default 30s). It must be longer than the
	// slowest processing, or a slow consumer's entries are processed twice
	// (the inbox then skips the second, but the work is done twice).
	MinIdle time.Duration
	// Count is the most entries one read returns (default 100).
	Count int64
	// Block is how long a read waits for new entries (default 2s).
	Block time.Duration
}

func (c *Config) setDefaults() {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.DeadLetterStream == "" {
		c.DeadLetterStream = DefaultDeadLetterStream
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.MinIdle == 0 {
		c.MinIdle = DefaultMinIdle
	}
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
	}
}

// Event is a stream entry as the relay writes it.
type Event struct {
	Stream, EntryID string
	MessageID       string
	AggregateType   string
	AggregateID     string
	EventType       string
	Payload         string
	OccurredAt      string
	Headers         string
}

// Handler applies one event inside the transaction that records it in the
// inbox; an error rolls both back and leaves the entry pending for a retry.
type Handler func(ctx context.Context, tx *sql.Tx, ev Event) error

// Stats counts what a Step did.
type Stats struct {
	Read, Claimed, Processed, Duplicates, Failed, DeadLettered int
}

func (s *Stats) add(o Stats) {
	s.Read += o.Read
	s.Claimed += o.Claimed
	s.Processed += o.Processed
	s.Duplicates += o.Duplicates
	s.Failed += o.Failed
	s.DeadLettered += o.DeadLettered
}

// Consumer reads one stream with a consumer group.
type Consumer struct {
	db     *sql.DB
	rdb    *redis.Client
	cfg    Config
	handle Handler
	log    *slog.Logger
}

// NewConsumer returns a consumer; handle does the work of each event.
func NewConsumer(db *sql.DB, rdb *redis.Client, cfg Config, handle Handler, log *slog.Logger) *Consumer {
	cfg.setDefaults()
	return &Consumer{db: db, rdb: rdb, cfg: cfg, handle: handle, log: log.With("component", "consumer", "group", cfg.Group, "consumer", cfg.Consumer)}
}

// EnsureGroup creates the consumer group at the start of the stream (and the
// stream, if the relay has not appended to it yet). A group that exists is
// left as it is: its position is the group's progress.
func (c *Consumer) EnsureGroup(ctx context.Context) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, "0").Err()
	// BUSYGROUP is the error code Redis gives for "group exists"; the error
	// code is the first word of the reply by protocol.
	if err != nil && !redisErrorCode(err, "BUSYGROUP") {
		return fmt.Errorf("create group %s on %s: %w", c.cfg.Group, c.cfg.Stream, err)
	}
	return nil
}

// Step claims the entries other (crashed) consumers left pending longer than
// MinIdle, then reads new entries (waiting up to block), and processes them.
func (c *Consumer) Step(ctx context.Context, block time.Duration) (Stats, error) {
	var st Stats
	claimed, err := c.claim(ctx)
	if err != nil {
		return st, err
	}
	st.Claimed = len(claimed)
	for _, m := range claimed {
		s, err := c.deliver(ctx, m, true)
		st.add(s)
		if err != nil {
			return st, err
		}
	}
	// BLOCK 0 would wait for ever; a negative block means do not block.
	args := &redis.XReadGroupArgs{Group: c.cfg.Group, Consumer: c.cfg.Consumer, Streams: []string{c.cfg.Stream, ">"}, Count: c.cfg.Count, Block: block}
	if block <= 0 {
		args.Block = -1
	}
	res, err := c.rdb.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return st, nil // nothing new within block
	}
	if err != nil {
		return st, fmt.Errorf("XREADGROUP %s: %w", c.cfg.Stream, err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			st.Read++
			s, err := c.deliver(ctx, m, false)
			st.add(s)
			if err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// claim takes over the entries pending longer than MinIdle, whoever holds
// them; a consumer that restarts under its old name gets its own back too.
func (c *Consumer) claim(ctx context.Context) ([]redis.XMessage, error) {
	var out []redis.XMessage
	start := "0-0"
	for {
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer,
			MinIdle: c.cfg.MinIdle, Start: start, Count: c.cfg.Count,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("XAUTOCLAIM %s: %w", c.cfg.Stream, err)
		}
		out = append(out, msgs...)
		if next == "0-0" || len(out) >= int(c.cfg.Count) {
			return out, nil
		}
		start = next
	}
}

// deliver processes one entry, or dead-letters it when it was delivered too
// often. Only Redis errors are returned: a failed processing is counted and
// the entry stays pending.
func (c *Consumer) deliver(ctx context.Context, m redis.XMessage, claimed bool) (Stats, error) {
	var st Stats
	if claimed {
		// XAUTOCLAIM counted this delivery; XPENDING tells how many there were.
		p, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.cfg.Stream, Group: c.cfg.Group, Start: m.ID, End: m.ID, Count: 1}).Result()
		if err != nil {
			return st, fmt.Errorf("XPENDING %s: %w", c.cfg.Stream, err)
		}
		if len(p) == 1 && p[0].RetryCount > c.cfg.MaxDeliveries {
			reason := fmt.Sprintf("processing failed %d times (max deliveries %d)", p[0].RetryCount-1, c.cfg.MaxDeliveries)
			if err := c.deadLetter(ctx, m, reason, p[0].RetryCount); err != nil {
				return st, err
			}
			st.DeadLettered++
			return st, nil
		}
	}
	ev := toEvent(c.cfg.Stream, m)
	dup, err := c.process(ctx, ev)
	switch {
	case err != nil:
		st.Failed++
		c.log.Warn("processing failed; the entry stays pending and is retried after min-idle", "entry_id", m.ID, "message_id", ev.MessageID, "error", err)
		return st, nil
	case dup:
		st.Duplicates++
		c.log.Info("duplicate delivery acknowledged and skipped", "entry_id", m.ID, "message_id", ev.MessageID)
	default:
		st.Processed++
		c.log.Debug("processed", "entry_id", m.ID, "message_id", ev.MessageID, "event_type", ev.EventType)
	}
	// After COMMIT: a crash before this XACK redelivers the entry, and the
	// inbox turns the redelivery into a duplicate.
	if err := c.rdb.XAck(ctx, c.cfg.Stream, c.cfg.Group, m.ID).Err(); err != nil {
		return st, fmt.Errorf("XACK %s %s: %w", c.cfg.Stream, m.ID, err)
	}
	return st, nil
}

// process runs the handler in a transaction with the inbox insert. It reports
// dup when the group processed the message before.
func (c *Consumer) process(ctx context.Context, ev Event) (dup bool, err error) {
	if ev.MessageID == "" {
		return false, errors.New("entry has no message_id field")
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	_, err = tx.ExecContext(ctx, "INSERT INTO processed_messages (consumer_group, message_id, stream, entry_id, event_type, aggregate_id, consumer) VALUES (?, ?, ?, ?, ?, ?, ?)",
		c.cfg.Group, ev.MessageID, ev.Stream, ev.EntryID, ev.EventType, ev.AggregateID, c.cfg.Consumer)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("record in inbox: %w", err)
	}
	if err := c.handle(ctx, tx, ev); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return false, nil
}

// deadLetter copies the entry to the dead-letter stream with the reason and
// acknowledges it, in one MULTI/EXEC so that it is never lost in between.
func (c *Consumer) deadLetter(ctx context.Context, m redis.XMessage, reason string, deliveries int64) error {
	values := map[string]any{}
	for k, v := range m.Values {
		values[k] = v
	}
	values["reason"] = reason
	values["source_stream"] = c.cfg.Stream
	values["source_entry_id"] = m.ID
	values["consumer_group"] = c.cfg.Group
	values["deliveries"] = strconv.FormatInt(deliveries, 10)
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: c.cfg.DeadLetterStream, Values: values})
		p.XAck(ctx, c.cfg.Stream, c.cfg.Group, m.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead-letter %s %s: %w", c.cfg.Stream, m.ID, err)
	}
	c.log.Warn("entry dead-lettered", "entry_id", m.ID, "dead_letter_stream", c.cfg.DeadLetterStream, "reason", reason)
	return nil
}

// Pending returns how many entries the group has read and not acknowledged.
func (c *Consumer) Pending(ctx context.Context) (int64, error) {
	p, err := c.rdb.XPending(ctx, c.cfg.Stream, c.cfg.Group).Result()
	if err != nil {
		return 0, fmt.Errorf("XPENDING %s: %w", c.cfg.Stream, err)
	}
	return p.Count, nil
}

// Run steps until ctx is done. With drain it returns instead once a read
// finds nothing new and nothing is pending in the group.
func (c *Consumer) Run(ctx context.Context, drain bool) (Stats, error) {
	var total Stats
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		block := c.cfg.Block
		if drain {
			block = 200 * time.Millisecond
		}
		st, err := c.Step(ctx, block)
		total.add(st)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.log.Error("step failed; retrying", "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if drain && st.Read == 0 && st.Claimed == 0 {
			n, err := c.Pending(ctx)
			if err != nil {
				return total, err
			}
			if n == 0 {
				return total, nil
			}
		}
	}
	return total, nil
}

// handleOrderEvent is the example's business logic. A real handler changes
// the consumer's own state with tx; this one only insists on a JSON object,
// which makes a malformed entry a poison message for the tests.
func handleOrderEvent(_ context.Context, _ *sql.Tx, ev Event) error {
	var payload map[string]any
	if err := json.Unmarshal([]byte(ev.Payload), &payload); err != nil {
		return fmt.Errorf("payload of %s is not a JSON object: %w", ev.MessageID, err)
	}
	return nil
}

func toEvent(stream string, m redis.XMessage) Event {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	return Event{
		Stream: stream, EntryID: m.ID,
		MessageID: s("message_id"), AggregateType: s("aggregate_type"), AggregateID: s("aggregate_id"),
		EventType: s("event_type"), Payload: s("payload"), OccurredAt: s("occurred_at"), Headers: s("headers"),
	}
}

// redisErrorCode reports whether err is a Redis error reply with the code.
func redisErrorCode(err error, code string) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return len(msg) >= len(code) && msg[:len(code)] == code && (len(msg) == len(code) || msg[len(code)] == ' ')
}

func main() {
	var cfg Config
	dsn := flag.String("mysql-dsn", envOr("EXAMPLE_MYSQL_DSN", "app:app@tcp(127.0.0.1:3306)/app"), "go-sql-driver DSN of the database with processed_messages [$EXAMPLE_MYSQL_DSN]")
	redisURL := flag.String("redis-url", envOr("EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis the relay appends to [$EXAMPLE_REDIS_URL]")
	flag.StringVar(&cfg.Stream, "stream", DefaultStream, "stream to read")
	flag.StringVar(&cfg.Group, "group", DefaultGroup, "consumer group")
	flag.StringVar(&cfg.Consumer, "consumer", "", "consumer name, stable across restarts (default hostname-pid)")
	flag.StringVar(&cfg.DeadLetterStream, "dead-letter-stream", DefaultDeadLetterStream, "where entries go after --max-deliveries failed deliveries")
	flag.Int64Var(&cfg.MaxDeliveries, "max-deliveries", DefaultMaxDeliveries, "deliveries before an entry is dead-lettered")
	flag.DurationVar(&cfg.MinIdle, "min-idle", DefaultMinIdle, "how long an entry stays pending before another consumer claims it")
	flag.Int64Var(&cfg.Count, "count", DefaultCount, "most entries per read")
	drain := flag.Bool("drain", false, "exit once nothing new arrives and nothing is pending (for scripts and tests)")
	verbose := flag.Bool("v", false, "log every processed entry")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		fatal(err)
	}
	defer db.Close()
	opts, err := redis.ParseURL(*redisURL)
	if err != nil {
		fatal(fmt.Errorf("--redis-url: %w", err))
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	c := NewConsumer(db, rdb, cfg, handleOrderEvent, log)
	if err := c.EnsureGroup(ctx); err != nil {
		fatal(err)
	}
	st, err := c.Run(ctx, *drain)
	fmt.Printf("processed=%d duplicates=%d failed=%d dead_lettered=%d claimed=%d\n", st.Processed, st.Duplicates, st.Failed, st.DeadLettered, st.Claimed)
	if err != nil {
		fatal(err)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "go-consumer:", err)
	os.Exit(1)
}
