package poller

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/eventrow"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
)

// MaxBacklogCount bounds the count of Backlog: counting a backlog of tens of
// millions of rows every few seconds would cost the server more than the
// number is worth.
const MaxBacklogCount = 1_000_000

// Backlog is what poll mode has yet to relay.
type Backlog struct {
	// Unsent counts the unsent rows, up to MaxBacklogCount (Capped then).
	Unsent int64
	Capped bool
	// Oldest is the occurred_at of the unsent row with the smallest id;
	// OldestKnown is false when no row is unsent, the table has no
	// occurred_at column, or the row's is NULL.
	Oldest      time.Time
	OldestKnown bool
}

// backlogQueries count the unsent rows and read the oldest one's time.
type backlogQueries struct {
	count  string
	oldest string // "" without an occurred_at column
}

// buildBacklog renders the backlog statements.
func buildBacklog(cfg Config) backlogQueries {
	count, oldest := outboxsql.Backlog(outboxTable(cfg, cfg.TableInfo), MaxBacklogCount)
	return backlogQueries{count: count, oldest: oldest}
}

// Backlog measures the unsent rows on db (a connection of the caller's, so
// that the measurement never waits for the rounds' pool).
func (p *Poller) Backlog(ctx context.Context, db *sql.DB) (Backlog, error) {
	var b Backlog
	if err := db.QueryRowContext(ctx, p.backlog.count).Scan(&b.Unsent); err != nil {
		return b, fmt.Errorf("poll: count unsent rows: %w", err)
	}
	if b.Unsent > MaxBacklogCount {
		b.Unsent, b.Capped = MaxBacklogCount, true
	}
	if b.Unsent == 0 || p.backlog.oldest == "" {
		return b, nil
	}
	var v any
	err := db.QueryRowContext(ctx, p.backlog.oldest).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return b, nil // sent since the count
	}
	if err != nil {
		return b, fmt.Errorf("poll: read the oldest unsent row: %w", err)
	}
	b.Oldest, b.OldestKnown = eventrow.ToTime(v)
	return b, nil
}
