package canal

import (
	"fmt"
	"slices"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// Cuts tells the reader where batches must end. A sink whose parts may
// hold the appends up to a point past its stored position implements it
// (redisstream.Sink on Redis Cluster, whose hash slots do): such a part
// skips whole batches up to its point, so a batch across the point would be
// half appended there already.
type Cuts interface {
	// CutPoints returns the points past the position the sink's Position
	// returned last at which a batch must end, in any order; none when no
	// part of the sink is ahead. The reader asks at the start of each
	// session, after Position.
	CutPoints() []position.Point
}

// sessionCuts returns the points past start at which the session must end a
// batch (Config.Cuts), in binlog order.
func (r *Reader) sessionCuts(start position.Point) []position.Point {
	if r.cfg.Cuts == nil {
		return nil
	}
	var cuts []position.Point
	for _, p := range r.cfg.Cuts.CutPoints() {
		if o, err := position.Order(p, start); err != nil || o <= 0 {
			continue
		}
		cuts = append(cuts, p)
	}
	slices.SortFunc(cuts, func(a, b position.Point) int {
		o, _ := position.Order(a, b)
		return o
	})
	if len(cuts) > 0 {
		r.log.Info("some hash slots are ahead of the stored position; their batches are cut where they stand and skipped there", "start", start.String(), "cuts", len(cuts), "last", cuts[len(cuts)-1].String())
	}
	return cuts
}

// atCut reports whether the pending batch ends at the next cut, which it
// then drops: the batch must be handed over now. A batch that went past a
// cut without ending there fails the session: the binlog read again is not
// the one the cut was written from.
func (m *machine) atCut() (bool, error) {
	if len(m.cuts) == 0 {
		return false, nil
	}
	o, err := position.Order(m.pending.at, m.cuts[0])
	if err != nil {
		return false, fmt.Errorf("compare %s with a cut point: %w", m.pending.at, err)
	}
	switch {
	case o < 0:
		return false, nil
	case o == 0:
		m.cuts = m.cuts[1:]
		return true, nil
	}
	return false, outbox.WithHint(fmt.Errorf("the binlog read again passed %s, where a part of the sink's appends ends, without a transaction boundary there", m.cuts[0]),
		"the binlog differs from the one the position was written from (a failover to a server with another history?); check `binlog-outbox position show` and the server")
}
