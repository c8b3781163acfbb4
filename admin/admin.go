// Package admin holds the commands that work beside the relay: status,
// verify, cleanup, mark-appended, the position commands and dead-letters
// list, replay and purge. Each is a function X(ctx, XOptions) (XReport,
// error) over clients the caller built
// (a *sql.DB, a Redis client, the resolved outbox table), so that the
// command line only turns flags into options and prints the report, and
// tests call them in-process.
//
// The statements over the outbox table come from package outboxsql; the
// Redis reads of streams from package redisstream.
package admin

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// Streams names the streams a relay writes.
type Streams struct {
	// Glob matches the streams of the relay's template
	// (entry.Template.Glob).
	Glob string
	// DeadLetter is the dead-letter stream.
	DeadLetter string
	// DelayedSets says the streams have delayed sets beside them
	// (entry.DelayedSetSuffix, format symfony-doctrine), whose
	// messages verify and repair read as entries.
	DelayedSets bool
	// Queues says the template names Laravel's queues (formats
	// laravel-queue and laravel-stream): status shows what waits on each.
	Queues bool
}

// list lists the streams that exist.
func (s Streams) list(ctx context.Context, client redis.UniversalClient) ([]string, error) {
	return redisadmin.ListStreams(ctx, client, s.Glob, s.DeadLetter)
}

// passedPoll is how often waitPassed reads the stored position again; the
// relay stores it at least every second while the binlog moves.
const passedPoll = 200 * time.Millisecond

// relayState is what the relay of a table recorded in Redis, as the
// commands that work beside it (verify, cleanup) read it.
type relayState struct {
	// Mode is binlog or poll. Without a recorded mode, a stored position
	// means binlog mode and its absence poll mode.
	Mode string
	// Recorded says a relay recorded the mode; with neither a mode nor a
	// position, no relay ran for these keys.
	Recorded bool
	// Sink reads the stored position.
	Sink *redisstream.Sink
	// Position is the stored position as is; nil when none is stored.
	Position []byte
}

// loadRelayState reads the mode and the position the relay stores under keys.
func loadRelayState(ctx context.Context, client redis.UniversalClient, keys redisstream.Keys, command string) (relayState, error) {
	m, err := redisstream.NewModeStore(client, keys.Mode).Load(ctx)
	if err != nil {
		return relayState{}, fmt.Errorf("%s: read the mode: %w", command, err)
	}
	// On a Redis Cluster too the position key alone is read: it is where a
	// relay started now resumes (written after every slot's script of a
	// batch, it is a lower bound of their positions), and waitPassed polls
	// it, which must not cost the 16384 GETs of the slot positions.
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: keys.Position})
	if err != nil {
		return relayState{}, err
	}
	raw, err := sink.Position(ctx)
	if err != nil {
		return relayState{}, err
	}
	st := relayState{Mode: m, Recorded: m != "", Sink: sink, Position: raw}
	if !st.Recorded {
		// A binlog relay's record outlives its position (a deleted or
		// evicted position key).
		_, recorded, err := redisadmin.ReadRecord(ctx, client, keys.Position)
		if err != nil {
			return relayState{}, fmt.Errorf("%s: %w", command, err)
		}
		st.Mode = mode.Poll
		if raw != nil || recorded {
			st.Mode, st.Recorded = mode.Binlog, recorded
		}
	}
	return st, nil
}

// waitPassed waits, up to wait, until the stored position has passed end
// (position.Binlog.Passed): the relay has then appended every transaction
// committed before end. When it has not by then, why says where the
// position stood; err is for failures to read it.
func waitPassed(ctx context.Context, sink *redisstream.Sink, end position.End, wait time.Duration) (passed bool, why string, err error) {
	deadline := time.Now().Add(wait)
	for {
		raw, err := sink.Position(ctx)
		if err != nil {
			return false, "", err
		}
		if raw == nil {
			why = "no position is stored at " + sink.PositionKey()
		} else {
			b, err := position.Decode(raw)
			if err != nil {
				return false, "", fmt.Errorf("stored position at %s: %w", sink.PositionKey(), err)
			}
			ok, incomparable := b.Passed(end)
			if ok {
				return true, "", nil
			}
			why = fmt.Sprintf("the stored position is %s", b)
			if incomparable != nil {
				why = incomparable.Error()
			}
		}
		if time.Now().After(deadline) {
			return false, why, nil
		}
		select {
		case <-ctx.Done():
			return false, "", ctx.Err()
		case <-time.After(passedPoll):
		}
	}
}

// beginSnapshot starts a consistent, read-only snapshot on conn, which the
// caller ends with endSnapshot. The isolation level is set without
// SESSION: for the next transaction only, whatever the DSN sets.
func beginSnapshot(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "SET /* binlog-outbox */ TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return fmt.Errorf("set isolation: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "START /* binlog-outbox */ TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return fmt.Errorf("start the snapshot: %w", err)
	}
	return nil
}

// endSnapshot ends the snapshot of beginSnapshot; it runs after the
// command's context may be done, and a read-only transaction has nothing
// to lose.
func endSnapshot(conn *sql.Conn) {
	conn.ExecContext(context.Background(), "ROLLBACK /* binlog-outbox */") //nolint:errcheck // read only
}
