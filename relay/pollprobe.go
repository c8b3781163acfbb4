package relay

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/poller"
)

// probeChunk is the most tables one probe statement reads: 1,000 tables
// take 4 statements of about 25 kB each, far below max_allowed_packet, and
// one slow table delays a quarter of them, not all.
const probeChunk = 250

// probeSet is the running pollers as the probe reads them: a statement per
// chunk of tables, each table answering with its poller's tag.
type probeSet struct {
	gen        uint64
	statements []string
	byTag      map[int]*tablePoller
}

// probePlan returns the probe statements of the running pollers, rendered
// again only when the tables changed since the last call.
func (s *pollSet) probePlan() *probeSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plan != nil && s.plan.gen == s.gen {
		return s.plan
	}
	tps := make([]*tablePoller, 0, len(s.running))
	for _, tp := range s.running {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b *tablePoller) int { return a.tag - b.tag })
	plan := &probeSet{gen: s.gen, byTag: make(map[int]*tablePoller, len(tps))}
	for chunk := range slices.Chunk(tps, probeChunk) {
		parts := make([]string, len(chunk))
		for i, tp := range chunk {
			parts[i] = "(" + tp.p.ProbeQuery(tp.tag) + ")"
			plan.byTag[tp.tag] = tp
		}
		plan.statements = append(plan.statements, "/* binlog-outbox */ "+strings.Join(parts, " UNION ALL "))
	}
	s.plan = plan
	return plan
}

// probe returns the pollers whose tables hold an unsent row, in one
// non-locking statement per probeChunk tables. A row committed after a
// statement began is found by the next probe: nothing is ever skipped for
// good, since the probe keeps no mark of what it saw.
func (s *pollSet) probe(ctx context.Context, db *sql.DB) ([]*tablePoller, error) {
	plan := s.probePlan()
	var out []*tablePoller
	for _, q := range plan.statements {
		rs, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("probe the outbox tables for unsent rows: %w", err)
		}
		for rs.Next() {
			var tag int
			if err := rs.Scan(&tag); err != nil {
				rs.Close()
				return nil, fmt.Errorf("probe the outbox tables for unsent rows: %w", err)
			}
			if tp := plan.byTag[tag]; tp != nil {
				out = append(out, tp)
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return nil, fmt.Errorf("probe the outbox tables for unsent rows: %w", err)
		}
	}
	return out, nil
}

// probeLoop probes every table every interval and wakes the pollers of the
// tables that hold unsent rows; the others stay parked (poller.Config.Wake).
// So idle tables cost a few statements per probe in all, not a round each:
// an unsent row waits at most one interval and the time of a probe for its
// poller's round. When the probe fails (a table dropped or its SELECT
// revoked before the next listing retires it) every poller is woken once
// per poll interval, as each polled on its own before the probe, until it
// succeeds again.
func (s *pollSet) probeLoop(ctx context.Context, interval time.Duration) {
	policy := retry.New(s.log, retry.Config{Message: "probing the outbox tables for unsent rows failed; every table runs its rounds meanwhile", MaxWait: interval})
	t := time.NewTicker(interval)
	defer t.Stop()
	var wokeAll time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		found, err := s.probe(ctx, s.db)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			_, _ = policy.Failed(err) // logged; every poller is woken instead
			found = nil
			// At most once per poll interval (two probes), as the
			// pollers polled on their own before the probe.
			if time.Since(wokeAll) >= 2*interval-interval/4 {
				found, wokeAll = s.probePlan().all(), time.Now()
			}
		} else {
			policy.Progressed()
		}
		for _, tp := range found {
			select {
			case tp.wake <- struct{}{}:
			default: // woken already
			}
		}
	}
}

// all returns every poller of the plan.
func (p *probeSet) all() []*tablePoller {
	out := make([]*tablePoller, 0, len(p.byTag))
	for _, tp := range p.byTag {
		out = append(out, tp)
	}
	return out
}

// probeInterval is how often the probe runs: twice per poll interval, so
// that a row is relayed within about one --poll-interval, as a table of
// its own is polled.
func probeInterval(pollInterval time.Duration) time.Duration {
	if pollInterval <= 0 {
		pollInterval = poller.DefaultPollInterval
	}
	return max(pollInterval/2, time.Millisecond)
}
