package admin

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// PositionOptions say where the position commands find the position.
type PositionOptions struct {
	Redis redis.UniversalClient
	// Sink holds the position key.
	Sink *redisstream.Sink
	// Cluster says Redis is a Redis Cluster, with a position per hash slot
	// beside the position key.
	Cluster bool
}

// stored reads the stored position as is, not as Sink.Position judges it on
// a Redis Cluster (the relay refuses slot positions without a position
// key, for one): show must show, and reset repair, what the relay refuses.
// cp is the cluster's positions, nil when Redis is no cluster.
func (o PositionOptions) stored(ctx context.Context) (raw []byte, cp *redisadmin.ClusterPositions, err error) {
	if !o.Cluster {
		raw, err = o.Sink.Position(ctx)
		return raw, nil, err
	}
	c, err := redisadmin.ReadClusterPositions(ctx, o.Redis, o.Sink.PositionKey())
	if err != nil {
		return nil, nil, err
	}
	return c.Base, &c, nil
}

// PositionReport is the stored position as PositionShow reads it.
type PositionReport struct {
	Key string
	// Raw is the position as stored, nil when none is; Position decoded.
	Raw      []byte
	Position position.Binlog
	// Slots sums up the slot positions of a Redis Cluster; nil otherwise.
	Slots    *SlotsStatus
	Warnings []string
}

// PositionShow reads the stored position, and on a Redis Cluster sums up
// the slot positions, as they are: also those the relay would refuse.
func PositionShow(ctx context.Context, o PositionOptions) (PositionReport, error) {
	r := PositionReport{Key: o.Sink.PositionKey()}
	raw, cp, err := o.stored(ctx)
	if err != nil {
		return r, err
	}
	r.Raw = raw
	if cp != nil {
		r.Slots, r.Warnings = slotsStatus(*cp, nil)
	}
	if r.Raw != nil {
		if r.Position, err = position.Decode(r.Raw); err != nil {
			return r, fmt.Errorf("stored position at %s: %w", r.Key, err)
		}
		if r.Position.Repairing() {
			r.Warnings = append(r.Warnings, holdWarning(r.Position))
		}
	}
	return r, nil
}

// holdWarning is what status and position show say of a position b a
// repair marked as its own.
func holdWarning(b position.Binlog) string {
	return fmt.Sprintf("held by %s: relays refuse to start on it and stop at their next append; when that repair is gone (it died or was stopped), "+
		"`binlog-outbox repair --apply` finishes from it, or `binlog-outbox position set` replaces it", b.Repair)
}

// StartPositioner renders where a start of --start-from is in the binlog
// (canal.Reader).
type StartPositioner interface {
	// StartPosition returns the encoded position of s.
	StartPosition(ctx context.Context, s position.Start) ([]byte, error)
}

// PositionSetOptions say where PositionSet stores which start.
type PositionSetOptions struct {
	PositionOptions
	// Reader finds Start in the server's binlog.
	Reader StartPositioner
	Start  position.Start
}

// PositionSetReport is what PositionSet stored.
type PositionSetReport struct {
	Key string
	// Raw is the position stored, nil when none was; Stored decoded.
	Raw    []byte
	Stored position.Binlog
	// SlotsDeleted counts the slot positions deleted on a Redis Cluster;
	// -1 when none were (not a cluster, or a failure before).
	SlotsDeleted int
}

// ErrLiveHolder means a relay reads the position a command would change:
// it would stop, fenced, and its restart would have to guess.
var ErrLiveHolder = outbox.NewConfigError("a relay reads this position")

// refuseLiveHolder refuses to change the position at key while a relay
// reads it (redisadmin.Record.Reading): what refuses names it.
func refuseLiveHolder(ctx context.Context, client redis.UniversalClient, key, command string) error {
	rec, ok, err := redisadmin.ReadRecord(ctx, client, key)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if !ok {
		rec = redisadmin.Record{PositionKey: key}
	}
	holder, err := rec.Reading(ctx, client)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if holder == "" {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: %s: %s reads %s now", ErrLiveHolder, command, holder, key),
		"stop that relay (and its standbys) first, then run %s again: a relay whose position changes under it stops, fenced; "+
			"a relay that just died holds the lease until it expires (--lease-ttl, 5s by default)", command)
}

// PositionSet stores the position of start, and on a Redis Cluster then
// deletes every slot position: the position key alone says where the relay
// resumes. It refuses while a relay reads the position.
func PositionSet(ctx context.Context, o PositionSetOptions) (PositionSetReport, error) {
	r := PositionSetReport{Key: o.Sink.PositionKey(), SlotsDeleted: -1}
	if err := refuseLiveHolder(ctx, o.Redis, r.Key, "position set"); err != nil {
		return r, err
	}
	raw, err := o.Reader.StartPosition(ctx, o.Start)
	if err != nil {
		return r, err
	}
	if err := o.Sink.SetPosition(ctx, raw); err != nil {
		return r, err
	}
	r.Raw = raw
	r.Stored, _ = position.Decode(raw)
	if !o.Cluster {
		return r, nil
	}
	// After the position key, which fences a running relay's next store: a
	// stop in between leaves slots that the new position may be before,
	// and those skip only what they hold.
	n, err := redisstream.DeleteSlotPositions(ctx, o.Redis, r.Key)
	if err != nil {
		return r, outbox.WithHint(fmt.Errorf("position set: stored the position at %s, but deleting the slot positions failed: %w", r.Key, err),
			"run position set again before starting the relay: slots left ahead of the new position would skip what they hold")
	}
	r.SlotsDeleted = n
	return r, nil
}

// PositionResetReport is what PositionReset deleted.
type PositionResetReport struct {
	Key string
	// Previous is the position that was stored, nil when none was.
	Previous []byte
	// SlotsDeleted counts the slot positions deleted on a Redis Cluster;
	// -1 when none were (not a cluster, or a failure before).
	SlotsDeleted int
}

// PositionReset deletes the stored position and the relay's record, and on
// a Redis Cluster the slot positions first: a stop in between leaves the
// key without slots, from which the relay resumes, rather than slots
// without a key, which it refuses. The relay's record goes last: a relay
// of another position may then take its tables and streams, and a relay of
// this one refuses to guess where to start while the streams show its
// entries (repair, or position set). It refuses while a relay reads the
// position.
func PositionReset(ctx context.Context, o PositionOptions) (PositionResetReport, error) {
	r := PositionResetReport{Key: o.Sink.PositionKey(), SlotsDeleted: -1}
	if err := refuseLiveHolder(ctx, o.Redis, r.Key, "position reset"); err != nil {
		return r, err
	}
	raw, _, err := o.stored(ctx)
	if err != nil {
		return r, err
	}
	r.Previous = raw
	if o.Cluster {
		n, err := redisstream.DeleteSlotPositions(ctx, o.Redis, r.Key)
		if err != nil {
			return r, fmt.Errorf("position reset: %w", err)
		}
		r.SlotsDeleted = n
	}
	if err := o.Sink.DeletePosition(ctx); err != nil {
		return r, err
	}
	return r, redisadmin.DeleteRecord(ctx, o.Redis, r.Key)
}
