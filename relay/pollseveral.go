package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/metrics"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// pollPoolSize is the most connections the pollers of several tables share.
// A round holds one connection from BEGIN to COMMIT, the Redis append
// included; more pollers than connections wait for one in turn, which only
// delays idle rounds, while a connection per table would cost the server a
// thread per tenant.
const pollPoolSize = 8

// DefaultPollListInterval is how often a relay of several tables in poll
// mode lists the tables again (--poll-list-interval): a tenant signing up
// waits at most this long for its first event, and each listing costs one
// information_schema query per --table value.
const DefaultPollListInterval = 5 * time.Second

// runPollSeveral relays several tables (more than one --table, or a
// pattern) in poll mode: one poller per table, each with its own rounds and
// its own sink on the shared Redis client, and a listing every
// --poll-list-interval that starts pollers for tables created since and
// stops those of tables gone. Each table's progress is in its own rows, so
// no position key is needed.
func runPollSeveral(ctx context.Context, o Options, cfg settings.Config, rep preflight.Report, requested string, db *sql.DB, client redis.UniversalClient) error {
	interval := o.PollListInterval
	if interval <= 0 {
		return fmt.Errorf("%w: --poll-list-interval %s must be positive", outbox.ErrConfig, interval)
	}
	db.SetMaxOpenConns(pollPoolSize)
	appends := metrics.NewAppends(mode.Poll)
	ps := make(schema.Patterns, len(cfg.Sources))
	for i, s := range cfg.Sources {
		ps[i] = s.Pattern
	}
	set := &pollSet{
		requested: requested,
		db:        db,
		patterns:  ps,
		sources:   cfg.Sources,
		extra:     cfg.Extra,
		shape:     rep.Mapping(),
		log:       cfg.Logger,
		running:   map[schema.Name]*tablePoller{},
		waiting:   map[schema.Name]bool{},
		failed:    make(chan error, 1),
		store: func(n schema.Name) mode.Store {
			return redisstream.NewModeStore(client, redisstream.KeysFor(n.Database, n.Table, "").Mode)
		},
		build: func(n schema.Name, res schema.Resolution, wake <-chan struct{}) (*poller.Poller, error) {
			tcfg := cfg
			tcfg.Mapping = res.Mapping
			// A sink per table: a sink's buffers serve one append at a
			// time, and the pollers append concurrently.
			sink, err := newSink(o, tcfg, client, nil)
			if err != nil {
				return nil, err
			}
			pcfg := pollerConfig(o, tcfg, rep.Server, n.Database, n.Table, res.Table)
			pcfg.Wake = wake
			return poller.New(db, appends.Publisher(sink), pcfg, cfg.Logger.With(keyPollTable, n.String()))
		},
	}
	stop, err := startPollMonitor(ctx, o, cfg, client, set.backlog, set.stats, appends)
	if err != nil {
		return err
	}
	defer stop()
	return set.run(ctx, rep.Tables, interval, probeInterval(o.PollInterval))
}

// keyPollTable is the log attribute that names the table a poller of
// several polls.
const keyPollTable = "poll_table"

// pollSet runs the pollers of a relay of several tables in poll mode.
type pollSet struct {
	requested string
	db        *sql.DB
	patterns  schema.Patterns
	sources   []schema.Source
	extra     []schema.ExtraColumn
	// shape is the mapping of the tables found at start, whose optional
	// columns (aggregate_type, headers) shape every entry: a table found
	// later must agree with it, as the preflight makes those at start.
	// Without a table at start, the first one found sets it.
	shape schema.Mapping
	log   *slog.Logger
	store func(schema.Name) mode.Store
	// build makes the poller of a table, parked when idle until a value
	// on wake (see probeLoop).
	build func(schema.Name, schema.Resolution, <-chan struct{}) (*poller.Poller, error)
	// failed receives the first error a poller stops with.
	failed chan error
	wg     sync.WaitGroup

	// waiting are the tables that fail their checks while they hold no
	// row (a migration half done): warned of once, looked at again at
	// every listing. Only run's goroutine uses it.
	waiting map[schema.Name]bool

	mu      sync.Mutex
	running map[schema.Name]*tablePoller
	// gen counts the changes to running, so that plan, the probe's
	// statements, is rendered again only after one; nextTag is the tag of
	// the next poller started.
	gen     uint64
	plan    *probeSet
	nextTag int
	// retired sums the counters of the pollers stopped (tables dropped),
	// so that the metrics' counters never go back.
	retired poller.Stats
}

// tablePoller is one table's poller and how to stop it.
type tablePoller struct {
	p *poller.Poller
	// tag names the poller in the probe's rows; wake unparks it.
	tag    int
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// run starts a poller per table of initial, lists the tables again every
// interval until ctx is cancelled, then lets every poller finish its round
// in flight (--shutdown-grace) and returns nil. A poller that stops with an
// error (one retrying cannot fix) stops them all, and run returns it; so
// does a table found since the start that cannot be polled (run says why).
func (s *pollSet) run(ctx context.Context, initial []preflight.TableMatch, interval, probeEvery time.Duration) error {
	pollCtx, stopAll := context.WithCancel(ctx)
	probing := make(chan struct{})
	defer func() {
		stopAll()
		<-probing
		s.wg.Wait()
	}()
	go func() {
		defer close(probing)
		s.probeLoop(pollCtx, probeEvery)
	}()
	for _, t := range initial {
		if err := s.start(pollCtx, t.Name, t.Resolution); err != nil {
			return err
		}
	}
	s.log.Info("polling several outbox tables", "tables", len(initial), "list_interval", interval)
	policy := retry.New(s.log, retry.Config{Message: "listing the outbox tables failed; the tables found are still polled", MaxWait: interval})
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.failed:
			return err
		case <-tick.C:
		}
		err := s.relist(pollCtx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			policy.Progressed()
		default:
			if _, final := policy.Failed(err); final != nil {
				return final
			}
		}
	}
}

// start runs a poller of table n, resolved as res.
func (s *pollSet) start(ctx context.Context, n schema.Name, res schema.Resolution) error {
	wake := make(chan struct{}, 1)
	p, err := s.build(n, res, wake)
	if err != nil {
		return fmt.Errorf("poller of %s: %w", n, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	tp := &tablePoller{p: p, wake: wake, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	tp.tag = s.nextTag
	s.nextTag++
	s.running[n] = tp
	s.gen++
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(tp.done)
		if err := p.Run(ctx); err != nil {
			select {
			case s.failed <- fmt.Errorf("poll %s: %w", n, err):
			default: // another poller's error stops the relay already
			}
		}
	}()
	return nil
}

// relist lists the tables again: a new one is checked and polled, one no
// longer listed (dropped, renamed, or the relay lost its SELECT on it) has
// its poller stopped.
func (s *pollSet) relist(ctx context.Context) error {
	matches, err := listPatterns(ctx, s.db, s.patterns)
	if err != nil {
		return err
	}
	seen := make(map[schema.Name]bool, len(matches))
	for _, m := range matches {
		seen[m.Name] = true
		s.mu.Lock()
		_, ok := s.running[m.Name]
		s.mu.Unlock()
		if ok {
			continue
		}
		if err := s.add(ctx, m); err != nil {
			return err
		}
	}
	for n := range s.waiting {
		if !seen[n] {
			delete(s.waiting, n)
		}
	}
	s.mu.Lock()
	var gone []schema.Name
	for n := range s.running {
		if !seen[n] {
			gone = append(gone, n)
		}
	}
	s.mu.Unlock()
	for _, n := range gone {
		s.retire(n)
	}
	return nil
}

// add checks a table found since the start as the start checks its tables,
// claims its mode key for poll mode and polls it. A table that fails the
// checks stops the relay with the reason, as binlog mode stops at the rows
// of such a table: skipping it would leave its events unsent without a
// word. Only while it holds no row at all (created, its columns still being
// added) does it wait for the next listing, with a warning.
func (s *pollSet) add(ctx context.Context, m schema.Match) error {
	src := s.sources[m.Pattern]
	res, err := schema.Resolve(ctx, s.db, m.Database, m.Table, src.Mapping, src.Declared, s.extra)
	if err != nil {
		return fmt.Errorf("inspect the outbox table %s: %w", m, err)
	}
	if res.Table == nil {
		return nil // dropped since the listing
	}
	unfit := schema.ProblemsError(m.String(), res.Problems)
	if unfit == nil {
		unfit = s.checkShape(m.Name, res.Mapping)
	}
	if unfit != nil {
		empty, err := tableEmpty(ctx, s.db, m.Name)
		if err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("a table found since the start cannot be polled: %w", unfit)
		}
		if !s.waiting[m.Name] {
			s.waiting[m.Name] = true
			s.log.Warn("outbox table found, not polled yet: it fails the checks and holds no row; it is looked at again at every listing, and the relay stops if rows arrive before it is fixed",
				"table", m.String(), logging.KeyError, unfit, logging.KeyHint, outbox.HintOf(unfit))
		}
		return nil
	}
	delete(s.waiting, m.Name)
	for _, p := range res.Problems {
		s.log.Warn("outbox table", "table", m.String(), "problem", p.Message)
	}
	if err := mode.ResolveAdded(ctx, s.log, s.requested, mode.Poll, s.store(m.Name)); err != nil {
		return err
	}
	s.log.Info("polling an outbox table found since the start", "table", m.String(), "columns", res.Mapping.String())
	return s.start(ctx, m.Name, res)
}

// checkShape refuses a table that differs from those found at start in the
// optional columns every entry has a field for or not (checkEntryShape of
// the preflight): one relay writes entries of one shape.
func (s *pollSet) checkShape(n schema.Name, m schema.Mapping) error {
	if s.shape == nil {
		s.shape = m
		return nil
	}
	for _, col := range []string{schema.ColAggregateType, schema.ColHeaders} {
		if m.Has(col) != s.shape.Has(col) {
			has, other := "has no", "have one"
			if m.Has(col) {
				has, other = "has a", "have none"
			}
			return outbox.WithHint(fmt.Errorf("%w: %s %s %s column, and the tables relayed since the start %s", outbox.ErrConfig, n, has, col, other),
				"give the table the same optional columns as the others, or leave the column out of every table's entries with --column %s=- and restart", col)
		}
	}
	return nil
}

// retire stops the poller of a table no longer listed, and waits for its
// round in flight.
func (s *pollSet) retire(n schema.Name) {
	s.mu.Lock()
	tp := s.running[n]
	s.mu.Unlock()
	tp.cancel()
	<-tp.done
	st := tp.p.Stats()
	s.mu.Lock()
	delete(s.running, n)
	s.gen++
	addStats(&s.retired, st)
	s.mu.Unlock()
	s.log.Warn("outbox table no longer listed: stopped polling it; the other tables are polled on", "table", n.String(),
		logging.KeyHint, "if it was dropped, nothing is lost but its unsent rows; if the relay user lost SELECT on it, grant it again: it is polled again at the next listing, its unsent rows first")
}

// stats sums the pollers' counters, those stopped included; Retrying names
// the first table whose rounds fail.
func (s *pollSet) stats() poller.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.retired
	sum.Retrying = ""
	for n, tp := range s.running {
		st := tp.p.Stats()
		addStats(&sum, st)
		if st.Retrying != "" && sum.Retrying == "" {
			sum.Retrying = n.String() + ": " + st.Retrying
		}
	}
	return sum
}

func addStats(sum *poller.Stats, st poller.Stats) {
	sum.Rounds += st.Rounds
	sum.Events += st.Events
	sum.DeadLetters += st.DeadLetters
	sum.Oversize += st.Oversize
	sum.Duplicates += st.Duplicates
	sum.Deferred += st.Deferred
	sum.Errors += st.Errors
	if st.LastRelay.After(sum.LastRelay) {
		sum.LastRelay = st.LastRelay
	}
}

// backlog sums what the tables have yet to relay: the unsent rows of all,
// and the oldest of their oldest unsent rows. The probe picks the tables
// that hold any first, so that idle tables cost no count each.
func (s *pollSet) backlog(ctx context.Context, db *sql.DB) (poller.Backlog, error) {
	var sum poller.Backlog
	found, err := s.probe(ctx, db)
	if err != nil {
		return sum, err
	}
	for _, tp := range found {
		b, err := tp.p.Backlog(ctx, db)
		if err != nil {
			return sum, err
		}
		sum.Unsent += b.Unsent
		sum.Capped = sum.Capped || b.Capped
		if b.OldestKnown && (!sum.OldestKnown || b.Oldest.Before(sum.Oldest)) {
			sum.Oldest, sum.OldestKnown = b.Oldest, true
		}
	}
	return sum, nil
}

// listPatterns lists the tables the patterns match, each belonging to the
// first pattern that matches it, as schema.ListMatching does, except that a
// plain name whose table is gone matches nothing instead of failing the
// listing: the table was dropped while the relay ran.
func listPatterns(ctx context.Context, db *sql.DB, ps schema.Patterns) ([]schema.Match, error) {
	var out []schema.Match
	for i, p := range ps {
		ms, err := schema.ListMatching(ctx, db, schema.Patterns{p})
		if errors.Is(err, schema.ErrTableNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if ps.Index(m.Database, m.Table, m.LowerCaseTableNames) == i {
				m.Pattern = i
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// tableEmpty reports whether table n holds no row, sent or not.
func tableEmpty(ctx context.Context, db *sql.DB, n schema.Name) (bool, error) {
	var one int
	err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ 1 FROM "+schema.QuoteIdent(n.Database)+"."+schema.QuoteIdent(n.Table)+" LIMIT 1").Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("look for rows in %s: %w", n, err)
	}
	return false, nil
}
