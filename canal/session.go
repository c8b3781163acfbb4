package canal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// session reads from the stored position until an error, as the data flows:
// where to start (begin), the binlog connection (openStream), its events
// through the transaction machine into batches (relay), and each batch with
// the position after it appended in one atomic step (the flusher).
// progressed reports whether anything was appended (the backoff is reset as
// appends happen, by recordBatch).
func (r *Reader) session(ctx context.Context) (progressed bool, err error) {
	r.mu.Lock()
	r.stats.Sessions++
	r.mu.Unlock()

	// Before any binlog connection, the layout proof's included.
	if err := r.claimServerID(ctx); err != nil {
		return false, err
	}
	start, prev, proof, err := r.begin(ctx)
	if err != nil {
		return false, err
	}
	st, sctx, err := r.openStream(ctx, start)
	if err != nil {
		return false, err
	}
	st.spawn(func() { r.renewServerID(sctx, st.cancel) })
	// While sessions keep failing, the failure lines say enough.
	level := slog.LevelInfo
	if r.retry.Failing() {
		level = slog.LevelDebug
	}
	r.log.Log(ctx, level, "reading binlog", "position", start.String(), "server_id", r.cfg.ServerID)

	f := newFlusher(r.sink, prev, r.encode, r.recordBatch, st.cancel)
	st.spawn(func() { f.loop(sctx) })
	l := &relayLoop{r: r, st: st, f: f, m: r.newMachine(start, proof, f), lastFlush: time.Now()}
	defer func() {
		st.close()
		progressed = f.appended > 0
		if r.needLayout {
			r.carried = l.m.tables.proven()
		}
	}()
	l.m.cuts = r.sessionCuts(start)
	l.m.walkRest = st.q.walkRest
	return false, l.run(sctx)
}

// begin decides where the session starts. prev is the stored position the
// first append must find; proof the column layout, when the binlog needs one.
func (r *Reader) begin(ctx context.Context) (start position.Point, prev []byte, proof layoutProof, err error) {
	if err := r.resolveSources(ctx); err != nil {
		return start, nil, proof, err
	}
	if r.collations, err = binlogrow.ReadCollations(ctx, r.db); err != nil {
		return start, nil, proof, err
	}
	var converted bool
	start, prev, converted, err = r.resolveStart(ctx)
	if err != nil {
		return start, nil, proof, err
	}
	if prev == nil && r.hadPosition {
		// The position this relay read or wrote is gone: reset, or lost by
		// Redis (a failover to a replica that never received it). "now"
		// resolved again would skip every event since the relay started.
		return start, nil, proof, position.Compare(nil, r.writer, r.seq.Load()).Err()
	}
	r.hadPosition = true
	if prev == nil {
		// Store the start at once: "now" resolved again after a crash would
		// be later, and the events in between would be skipped.
		next := r.encode(start)
		if err := r.sink.Append(ctx, nil, nil, next); err != nil {
			return start, nil, proof, r.appendError(err)
		}
		prev = next
		r.log.Info("stored the start position", "position", start.String())
	} else if converted {
		// At once, as a first start: the GTID position then holds even
		// when no transaction moves the binlog before a failover.
		next := r.encode(start)
		if err := r.sink.Append(ctx, nil, prev, next); err != nil {
			return start, nil, proof, r.appendError(err)
		}
		prev = next
		r.log.Info("stored the converted position", "position", start.String())
	}
	if r.cfg.Recorder != nil && !r.recorded {
		if err := r.cfg.Recorder(ctx); err != nil {
			return start, nil, proof, fmt.Errorf("record the relay: %w", err)
		}
		r.recorded = true
	}
	r.mu.Lock()
	r.stats.Stored = start
	r.mu.Unlock()
	if r.needLayout {
		proof, err = r.proveLayout(ctx, start, r.layoutTable, r.carried)
		r.carried = nil
		if err != nil {
			return start, nil, proof, err
		}
	}
	return start, prev, proof, nil
}

// stream is the binlog connection of one session: go-mysql's syncer, the
// queue its events arrive in, the watchdog that closes it when it falls
// silent, and the session's goroutines.
type stream struct {
	syncer *replication.BinlogSyncer
	q      *eventQueue
	wd     *watchdog
	// cancel ends the session's context: the goroutines, a wait for an
	// event, an append in progress.
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// lk dials the session's connections; killWait bounds the KILL
	// connection go-mysql's Close dials (see close).
	lk       *link
	killWait time.Duration
}

// openStream connects and starts the binlog dump at start. sctx, derived from
// ctx, lives until the session ends (stream.close) or the flusher aborts it.
func (r *Reader) openStream(ctx context.Context, start position.Point) (st *stream, sctx context.Context, err error) {
	lk := &link{}
	st = &stream{
		q:  newEventQueue(r.cfg.EventCacheCount, int64(r.cfg.EventCacheBytes), &r.eventBytesHigh),
		wd: &watchdog{bytes: &lk.bytes},
		lk: lk, killWait: r.cfg.ReadTimeout,
	}
	// go-mysql reads from the connection once it parsed what it read
	// before: the events held back go to the reader then, and a read the
	// reader paused waits there.
	lk.beforeRead = st.q.beforeRead
	st.syncer = replication.NewBinlogSyncer(r.syncerConfig(lk, st.q))
	sctx, st.cancel = context.WithCancel(ctx)
	st.spawn(func() {
		st.wd.watch(sctx, r.cfg.ReadTimeout, func() {
			r.log.Warn("nothing received on the binlog connection for too long; closing it", "read_timeout", r.cfg.ReadTimeout)
			lk.kill()
			st.q.close()
			st.syncer.Close()
		})
	})

	var streamer *replication.BinlogStreamer
	st.wd.waiting.Store(true)
	if !start.GTIDSet.IsZero() {
		streamer, err = st.syncer.StartSyncGTID(start.GTIDSet.GoMySQL())
	} else {
		streamer, err = st.syncer.StartSync(mysql.Position{Name: start.File, Pos: start.Pos})
	}
	if err != nil {
		st.close()
		return nil, nil, r.streamError(fmt.Errorf("start binlog dump at %s: %w", start, r.deadConnection(st, err)), !start.GTIDSet.IsZero())
	}
	st.spawn(func() { st.q.watch(sctx, streamer) })
	return st, sctx, nil
}

// spawn runs fn on a goroutine of the session; close waits for it.
func (st *stream) spawn(fn func()) {
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		fn()
	}()
}

// close ends the session: its goroutines first, then the queue (go-mysql's
// reading goroutine may wait for room in it) and the connection.
func (st *stream) close() {
	st.cancel()
	st.wg.Wait()
	st.q.close()
	// The KILL connection Close dials gets ReadTimeout, what a live link
	// answers well within: on a link that died silently its handshake
	// would wait for ever.
	st.lk.closing(st.killWait)
	st.syncer.Close()
}

// deadConnection names the cause of err when the watchdog closed the
// connection: the error go-mysql saw then only says it was closed.
func (r *Reader) deadConnection(st *stream, err error) error {
	if st.wd.fired.Load() {
		return fmt.Errorf("%w: nothing received within %s", errDeadConnection, r.cfg.ReadTimeout)
	}
	return err
}

// newMachine sets up the transaction machine at the session's start, filling
// a batch of the flusher's.
func (r *Reader) newMachine(start position.Point, proof layoutProof, f *flusher) *machine {
	m := &machine{
		tables:     newTableSet(r.sources, proof, r.collations),
		log:        r.log,
		maxTxBytes: r.cfg.MaxTxBytes, maxBatchEvents: r.cfg.MaxBatchEvents, maxBatchBytes: r.cfg.MaxBatchBytes,
		file: start.File, boundary: start, gset: start.GTIDSet, pending: f.take(), prepare: r.sink.Prepare,
		updates: r.updates,
	}
	m.pending.at = start
	if r.chunkNext || start.TxRows > 0 {
		m.chunked, m.skip = true, start.TxRows
		r.chunkNext = false
	}
	m.flushTo(f)
	return m
}

// flushTo makes m hand its full batches to f, filling the next one f gives
// back.
func (m *machine) flushTo(f *flusher) {
	m.flush = func(ctx context.Context) error {
		b, err := f.handOff(ctx, m.pending)
		if err != nil {
			return err
		}
		m.pending = b
		return nil
	}
}

// relayLoop moves one session's events from the stream through the machine
// into batches for the flusher. It runs on the reader's goroutine.
type relayLoop struct {
	r         *Reader
	st        *stream
	f         *flusher
	m         *machine
	lastFlush time.Time // when a batch was last handed over
	// large: an event larger than the whole read-ahead budget was
	// handled, and its rows may still be held; largeOpen: its transaction
	// is still open; paused: go-mysql's reads wait until its rows are
	// appended (resumeAfterLarge). largest is the largest such event
	// since reads last went on after its transaction.
	large, largeOpen, paused bool
	largest                  int64
}

// collectBefore is the event size from which garbage is collected twice
// per event: once go-mysql has read it (eventQueue.HandleEvent), and before
// go-mysql reads on after its rows are appended (resumeAfterLarge).
// go-mysql reads an event over 16 MiB into a buffer that doubles, and
// MariaDB sends the statement of a row (annotate event) before it, as large
// when its values are literals; collecting at both points, which costs
// little beside reading such an event, keeps each buffer go-mysql
// allocates from landing beside the garbage of the last one
// (binlog-outbox-bench --workloads giant).
const collectBefore = 8 << 20

// run relays events until an error; ctx is the session's.
func (l *relayLoop) run(ctx context.Context) error {
	for {
		// While reads are paused the reader waits for the flusher, not
		// the server: the watchdog must not count the silence.
		l.st.wd.waiting.Store(!l.paused)
		// Events already received join the pending batch before it is
		// handed over (offer): waiting is for events still to come.
		waiting := (len(l.m.pending.events) > 0 && !l.st.q.ready()) || l.paused
		ev, err := l.f.nextEvent(ctx, l.st.q, waiting)
		l.st.wd.waiting.Store(false)
		l.st.wd.seen.Add(1)
		if err != nil {
			if errors.Is(err, errHandOff) && !l.st.wd.fired.Load() && l.f.err() == nil && ctx.Err() == nil {
				// The flusher went idle while pending waited: hand it over.
				l.resumeAfterLarge()
				if len(l.m.pending.events) > 0 {
					if err := l.offer(ctx, true); err != nil {
						return err
					}
				}
				continue
			}
			return l.readFailed(ctx, err)
		}
		if err := l.event(ctx, ev); err != nil {
			return err
		}
		// After event returned: ev is no root for a collection any more.
		l.resumeAfterLarge()
	}
}

// readFailed is the session's error after reading an event failed.
func (l *relayLoop) readFailed(ctx context.Context, err error) error {
	err = l.r.deadConnection(l.st, err)
	if ferr := l.f.err(); ferr != nil {
		return l.r.appendError(ferr)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	err = l.r.streamError(fmt.Errorf("read binlog event: %w", err), !l.m.boundary.GTIDSet.IsZero())
	if errors.Is(err, outbox.ErrConfig) {
		return l.stopAfterPending(ctx, err)
	}
	return err
}

// event passes one event through the machine and offers the batch to the
// flusher once no transaction is open.
func (l *relayLoop) event(ctx context.Context, ev queued) error {
	m := l.m
	m.group = ev.group
	err := m.handle(ctx, ev.ev)
	// Handled: what the batch keeps of it is out of the budget's hands.
	l.st.q.release(ev.size)
	if ev.size > l.st.q.limit {
		l.large, l.largeOpen, l.largest = true, m.inTx, max(l.largest, ev.size)
	}
	if err != nil {
		return l.handleFailed(ctx, err)
	}
	if m.statementDML > 0 || m.rowsWalked > 0 {
		l.r.mu.Lock()
		l.r.stats.StatementDML += m.statementDML
		l.r.stats.RowsWalked += m.rowsWalked
		l.r.mu.Unlock()
		m.statementDML, m.rowsWalked = 0, 0
	}
	if !m.inTx && m.pending.dirty {
		return l.offer(ctx, false)
	}
	if _, ok := ev.ev.Event.(*replication.HeartbeatEvent); ok && !m.inTx && len(m.pending.events) == 0 && l.f.caughtUp() {
		// The server has nothing more to send and everything read is
		// stored: the session works. Appends report progress otherwise;
		// without this an idle relay that reconnected after an outage
		// would stay "retrying" (not ready) until the next event.
		l.r.retry.Progressed()
	}
	return nil
}

// resumeAfterLarge decides when go-mysql reads again after an event larger
// than the read-ahead budget, which paused its reads (eventQueue.HandleEvent):
// within that event's transaction at once, since its end is still to come;
// after it, once the flusher appended everything, since the rows of such an
// event are slices of it. Reading the next large event meanwhile held two
// at once: MariaDB's annotate event carrying the statement, then its row,
// or one transaction's row and the next one's (six 16 MiB rows peaked at
// 95 MB of live memory).
func (l *relayLoop) resumeAfterLarge() {
	if !l.large {
		return
	}
	if l.largeOpen && !l.m.inTx {
		// Its transaction ended; one that begins next (its first events
		// may be read already) is another, which does not resume reads.
		l.largeOpen = false
	}
	q := l.st.q
	if !l.largeOpen && (len(l.m.pending.events) > 0 || !l.f.caughtUp()) {
		q.pauseReads()
		l.paused = true
		return
	}
	if q.readsPaused() {
		if l.largest >= collectBefore {
			runtime.GC()
		}
		q.resumeReads()
	}
	l.paused = false
	if !l.largeOpen {
		l.large, l.largest = false, 0
	}
}

// handleFailed is the session's error after the machine refused an event.
func (l *relayLoop) handleFailed(ctx context.Context, err error) error {
	var restart *errChunkRestart
	var layoutRestart *errLayoutRestart
	if errors.As(err, &restart) || errors.As(err, &layoutRestart) {
		// Everything before the transaction is appended first, so the next
		// session can start exactly at it.
		if err := l.f.drain(ctx, l.m.pending); err != nil {
			return l.r.appendError(err)
		}
		return err
	}
	if errors.Is(err, outbox.ErrConfig) {
		return l.stopAfterPending(ctx, err)
	}
	if ferr := l.f.err(); ferr != nil {
		return l.r.appendError(ferr)
	}
	return err
}

// stopAfterPending appends the transactions read before one the relay cannot
// relay, then returns the error that stops it: a fix that starts at the
// stopping point (a file position) would otherwise skip them.
func (l *relayLoop) stopAfterPending(ctx context.Context, stop error) error {
	if err := l.f.drain(ctx, l.m.pending); err != nil {
		return l.r.appendError(err)
	}
	return stop
}

// offer hands the pending batch to the flusher when that is worth it: it has
// events, no more are received yet and the flusher is idle (no waiting under
// a light load), it is full (wait for the flusher: back-pressure), or only
// the position moved and the last store is IdleCheckpoint old.
func (l *relayLoop) offer(ctx context.Context, idle bool) error {
	b, cfg := l.m.pending, &l.r.cfg
	cut, err := l.m.atCut()
	if err != nil {
		return err
	}
	full := cut || len(b.events) >= cfg.MaxBatchEvents || b.bytes >= cfg.MaxBatchBytes
	if !full && !idle && len(b.events) > 0 && l.st.q.ready() {
		// Events received with this batch's last transaction come first.
		// A group commit of several producers arrives in one read:
		// handed over at its first transaction, the batch went alone and
		// the others waited for its whole append, two appends for most of
		// the group where reading them takes microseconds
		// (TestRelayLoop_TransactionsReceivedTogetherShareABatch).
		return nil
	}
	if !full && len(b.events) == 0 && !idle && time.Since(l.lastFlush) < cfg.IdleCheckpoint {
		return nil
	}
	var next *batch
	if full {
		next, err = l.f.handOff(ctx, b)
	} else {
		next, err = l.f.tryHandOff(b)
	}
	if err != nil {
		if ferr := l.f.err(); ferr != nil {
			return l.r.appendError(ferr)
		}
		return err
	}
	if next != nil {
		l.m.pending = next
		l.lastFlush = time.Now()
	}
	return nil
}
