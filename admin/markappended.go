package admin

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// markChunk is how many rows one SELECT and UPDATE of mark-appended covers.
const markChunk = 1000

// MarkOptions say which rows MarkAppended marks.
type MarkOptions struct {
	DB *sql.DB
	// Table is the outbox table with its resolved mapping and its
	// inspection (which says whether the server is MariaDB).
	Table   outboxsql.Table
	Redis   redis.UniversalClient
	Streams Streams
	// DeleteRows deletes the rows instead of marking them sent, as poll
	// mode with --on-sent delete will.
	DeleteRows bool
	// AllowTrimmed goes on when a stream lost entries: the rows of the lost
	// entries stay unsent (and poll mode appends them again).
	AllowTrimmed bool
	// Page is how many entries one XRANGE reads (DefaultVerifyPage).
	Page int
}

// MarkReport counts what MarkAppended did.
type MarkReport struct {
	Streams, Entries int
	// Marked rows were marked sent (or deleted); AlreadySent were sent
	// before; Foreign entries name no unsent row of the table (other
	// tables, or rows gone).
	Marked, AlreadySent, Foreign int
	// Warnings say what MarkAppended could not tell (streams that lost
	// entries, with AllowTrimmed; Redis before 7.0).
	Warnings []string
}

// MarkAppended marks sent (or deletes) every unsent row whose event is in a
// stream, matched by outbox_id and message_id: the switch from binlog to
// poll mode. Every stream is checked before any row is marked, so that a
// refusal leaves the table as it was.
func MarkAppended(ctx context.Context, o MarkOptions) (MarkReport, error) {
	var r MarkReport
	if !o.DeleteRows && !o.Table.Mapping.Has(schema.ColSentAt) {
		return r, outbox.WithHint(fmt.Errorf("%w: --on-sent mark needs the sent_at column, which the table lacks", outbox.ErrConfig),
			"run with --on-sent delete, as poll mode will")
	}
	keys, err := o.Streams.list(ctx, o.Redis)
	if err != nil {
		return r, err
	}
	for _, key := range keys {
		info, err := o.Redis.XInfoStream(ctx, key).Result()
		if err != nil {
			return r, fmt.Errorf("mark-appended: XINFO STREAM %s: %w", key, redisconn.Classify(err))
		}
		switch {
		case info.EntriesAdded > info.Length && !o.AllowTrimmed:
			// The rows of the lost entries cannot be told from rows
			// never appended: guessing would lose or repeat events.
			return r, outbox.WithHint(fmt.Errorf("mark-appended: stream %s lost %d of the %d entries ever added to it (trimmed or deleted), so their rows cannot be found",
				key, info.EntriesAdded-info.Length, info.EntriesAdded),
				"mark the rows of the lost entries yourself if you know them, then run again with --allow-trimmed; or run with --allow-trimmed and let poll mode append those rows again (consumers deduplicate by message_id)")
		case info.EntriesAdded > info.Length:
			r.Warnings = append(r.Warnings, fmt.Sprintf("stream %s lost %d entries; their rows stay unsent and poll mode appends them again", key, info.EntriesAdded-info.Length))
		case info.EntriesAdded == 0 && info.Length > 0:
			r.Warnings = append(r.Warnings, fmt.Sprintf("Redis before 7.0 does not say whether stream %s was trimmed; rows of trimmed entries stay unsent", key))
		}
	}
	m := &marker{db: o.DB, q: outboxsql.NewMarker(o.Table, o.DeleteRows), page: int64(o.Page)}
	if m.page < 1 {
		m.page = DefaultVerifyPage
	}
	for _, key := range keys {
		if err := m.stream(ctx, o.Redis, key, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// marker marks the rows named by stream entries, a chunk at a time.
type marker struct {
	db   *sql.DB
	q    *outboxsql.Marker
	page int64
}

// stream reads every entry of key and marks the rows they name.
func (m *marker) stream(ctx context.Context, client redis.UniversalClient, key string, r *MarkReport) error {
	r.Streams++
	pending := map[uint64]string{} // outbox_id -> message_id
	// own is an error of the marking, returned as is; an error of the
	// XRANGE gets the command's prefix.
	var own error
	err := redisadmin.RangeEntries(ctx, client, key, m.page, func(msgs []redis.XMessage) error {
		for _, msg := range msgs {
			r.Entries++
			raw, _ := msg.Values[entry.FieldOutboxID].(string)
			id, err := strconv.ParseUint(raw, 10, 64)
			if err != nil {
				// Not an entry of this relay: nothing to mark.
				r.Foreign++
				continue
			}
			mid, _ := msg.Values[entry.FieldMessageID].(string)
			if prev, dup := pending[id]; dup && prev != mid {
				// Two tables share the stream and an id: each entry is
				// checked against the row on its own.
				if own = m.flush(ctx, pending, r); own != nil {
					return own
				}
			}
			pending[id] = mid
			if len(pending) >= markChunk {
				if own = m.flush(ctx, pending, r); own != nil {
					return own
				}
			}
		}
		return nil
	})
	switch {
	case own != nil:
		return own
	case err != nil:
		return fmt.Errorf("mark-appended: %w", err)
	}
	return m.flush(ctx, pending, r)
}

// flush marks the unsent rows among pending whose message_id matches their
// entry's, in one transaction, and empties pending.
func (m *marker) flush(ctx context.Context, pending map[uint64]string, r *MarkReport) error {
	if len(pending) == 0 {
		return nil
	}
	defer clear(pending)
	ids := make([]uint64, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark-appended: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	match, sent, err := m.unsent(ctx, tx, ids, pending)
	if err != nil {
		return err
	}
	if len(match) > 0 {
		res, err := tx.ExecContext(ctx, m.q.Mark(match))
		if err != nil {
			return fmt.Errorf("mark-appended: mark rows: %w", err)
		}
		// The rows are locked by this transaction: each must be affected.
		if n, err := res.RowsAffected(); err == nil && n != int64(len(match)) {
			return fmt.Errorf("mark-appended: mark rows: %d of %d rows affected", n, len(match))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mark-appended: commit: %w", err)
	}
	r.Marked += len(match)
	r.AlreadySent += sent
	r.Foreign += len(pending) - len(match) - sent
	return nil
}

// unsent locks the rows ids and returns those unsent whose message_id is
// their entry's (pending), and how many were sent already.
func (m *marker) unsent(ctx context.Context, tx *sql.Tx, ids []uint64, pending map[uint64]string) (match []uint64, sent int, err error) {
	rows, err := tx.QueryContext(ctx, m.q.Lock(ids))
	if err != nil {
		return nil, 0, fmt.Errorf("mark-appended: read rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		var mid sql.NullString
		var unsent bool
		if err := rows.Scan(&id, &mid, &unsent); err != nil {
			return nil, 0, fmt.Errorf("mark-appended: read rows: %w", err)
		}
		switch {
		case mid.String != pending[id]:
			// Another table's row with the same id.
		case unsent:
			match = append(match, id)
		default:
			sent++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("mark-appended: read rows: %w", err)
	}
	return match, sent, nil
}
