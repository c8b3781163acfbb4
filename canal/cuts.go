package canal

import (
	"fmt"
	"slices"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// sessionCuts returns the points past start at which the session must end a
// batch (Config.Ahead), in binlog order. A part of the sink that holds the
// appends up to such a point (a Redis Cluster slot) skips whole batches up
// to it; a batch across it would be half appended there already.
func (r *Reader) sessionCuts(start position.Point) ([]position.Point, error) {
	if r.cfg.Ahead == nil {
		return nil, nil
	}
	var cuts []position.Point
	for _, raw := range r.cfg.Ahead() {
		b, err := position.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: a position a part of the sink holds: %v", outbox.ErrConfig, err)
		}
		p, err := b.Point()
		if err != nil {
			return nil, fmt.Errorf("%w: a position a part of the sink holds: %v", outbox.ErrConfig, err)
		}
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
	return cuts, nil
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
		return false, fmt.Errorf("compare %s with a slot's position: %w", m.pending.at, err)
	}
	switch {
	case o < 0:
		return false, nil
	case o == 0:
		m.cuts = m.cuts[1:]
		return true, nil
	}
	return false, outbox.WithHint(fmt.Errorf("the binlog read again passed %s, where a hash slot's position stands, without a transaction boundary there", m.cuts[0]),
		"the binlog differs from the one the position was written from (a failover to a server with another history?); check `binlog-outbox position show` and the server")
}
