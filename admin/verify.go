package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Defaults of VerifyOptions.
const (
	DefaultVerifyChunk = 10000
	DefaultVerifyWait  = time.Minute
	// DefaultVerifyPage is how many entries one XRANGE reads. Entries carry
	// their payloads (up to --max-payload-bytes each), which XRANGE cannot
	// leave out: a small page bounds the memory.
	DefaultVerifyPage = 256
	// verifyExamples is how many examples of each kind verify reports.
	verifyExamples = 5
)

// VerifyOptions say what Verify compares.
type VerifyOptions struct {
	DB *sql.DB
	// Table is the outbox table with its resolved mapping.
	Table   outboxsql.Table
	Redis   redis.UniversalClient
	Keys    redisstream.Keys
	Streams Streams
	Range   VerifyRange
	// Chunk is how many rows one SELECT reads, and how many entries one
	// index query; Page how many entries one XRANGE reads. Both positive.
	Chunk, Page int
	// DeleteRows says poll mode deletes the rows it relays (--on-sent
	// delete; a table without sent_at is taken as such too): the entries
	// of rows gone are not foreign then.
	DeleteRows bool
	// Wait bounds, in binlog mode, the wait for the stored position to pass
	// the snapshot; rows after it are reported as not yet relayed.
	Wait time.Duration
}

// Verify compares the outbox rows in the range, read in one consistent
// snapshot, with the entries of the streams: missing, duplicated and
// foreign entries. A report that is not Clean is no error.
func Verify(ctx context.Context, o VerifyOptions) (VerifyReport, error) {
	st, err := loadRelayState(ctx, o.Redis, o.Keys, "verify")
	if err != nil {
		return VerifyReport{}, err
	}
	if !st.Recorded && st.Position == nil {
		// Poll mode's rows marked sent are all it could compare, and a
		// binlog relay marks none: "clean" would say nothing.
		return VerifyReport{}, outbox.WithHint(fmt.Errorf("verify: nothing in Redis says how %s.%s is relayed (no mode at %s, no position or relay record at %s): Redis lost its data, or no relay ran here",
			o.Table.Database, o.Table.Name, o.Keys.Mode, o.Keys.Position),
			"after Redis lost its data, `binlog-outbox repair --mode binlog` (or --mode poll) compares every row with the streams and `--apply` appends the missing ones once (docs/incidents.md)")
	}
	r := &VerifyReport{Mode: st.Mode, Table: o.Table.Database + "." + o.Table.Name, Range: o.Range.String(), CaughtUp: true}
	v := newVerifier(o.DB, o.Table, o.Chunk, st.Mode == mode.Poll, r)
	v.rng, v.deleteMode = o.Range, o.DeleteRows || !o.Table.Mapping.Has(schema.ColSentAt)

	// The snapshot first: every row it shows committed before it, so before
	// the binlog end read next, and (poll mode) before the stream scan.
	conn, err := o.DB.Conn(ctx)
	if err != nil {
		return *r, fmt.Errorf("verify: connect: %w", err)
	}
	defer conn.Close()
	if err := beginSnapshot(ctx, conn); err != nil {
		return *r, fmt.Errorf("verify: %w", err)
	}
	defer endSnapshot(conn)
	if st.Mode == mode.Binlog {
		r.CaughtUp, err = waitPastSnapshot(ctx, o.DB, conn, st.Sink, o.Wait)
		if err != nil {
			return *r, err
		}
		if !r.CaughtUp {
			r.Warnings = append(r.Warnings, fmt.Sprintf("the stored position did not pass the snapshot within --wait %s: rows without an entry are counted as not yet relayed, not missing (see `binlog-outbox status`)", o.Wait))
		}
	}
	idx := newEntryIndex(o.Redis, o.Keys, o.Page)
	defer idx.drop()
	if r.Streams, r.Entries, err = idx.addAll(ctx, o.Streams, o.Range); err != nil {
		return *r, err
	}
	if err := v.walk(ctx, conn, idx); err != nil {
		return *r, err
	}
	if o.Table.Mapping.Has(schema.ColMessageID) {
		if err := sharedMessageIDs(ctx, conn, o, r); err != nil {
			return *r, err
		}
	}
	return *r, nil
}

// sharedMessageIDs counts, in the snapshot conn holds, the message ids that
// more than one row in range holds, with the first examples.
func sharedMessageIDs(ctx context.Context, conn *sql.Conn, o VerifyOptions, r *VerifyReport) error {
	examples, count, args := outboxsql.NewVerify(o.Table).SharedMessageIDs(o.Range.FromID, o.Range.Since, verifyExamples)
	if err := conn.QueryRowContext(ctx, count, args...).Scan(&r.SharedIDs); err != nil {
		return fmt.Errorf("verify: count shared message ids: %w", err)
	}
	if r.SharedIDs == 0 {
		return nil
	}
	rows, err := conn.QueryContext(ctx, examples, args...)
	if err != nil {
		return fmt.Errorf("verify: read shared message ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s SharedID
		if err := rows.Scan(&s.MessageID, &s.Rows, &s.FirstID, &s.LastID); err != nil {
			return fmt.Errorf("verify: read shared message ids: %w", err)
		}
		r.Examples.SharedIDs = append(r.Examples.SharedIDs, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: read shared message ids: %w", err)
	}
	return nil
}

// VerifyRange says which rows and entries verify compares.
type VerifyRange struct {
	// FromID, when positive, limits both to outbox ids >= FromID.
	FromID uint64
	// Since, when not zero, limits both to occurred_at >= Since.
	Since time.Time
}

// NewVerifyRange is the range of verify's --since (how far back from now;
// sinceGiven says it was given) or --from-id (0 for all rows), refusing both
// at once and a --since that is not positive.
func NewVerifyRange(now time.Time, since time.Duration, sinceGiven bool, fromID uint64, fromIDGiven bool) (VerifyRange, error) {
	rng := VerifyRange{FromID: fromID}
	switch {
	case sinceGiven && fromIDGiven:
		return rng, outbox.NewConfigError("give --since or --from-id, not both")
	case since > 0:
		rng.Since = now.Add(-since).UTC()
	case sinceGiven:
		return rng, outbox.NewConfigError(fmt.Sprintf("--since %s: want a positive duration, e.g. 24h", since))
	}
	return rng, nil
}

// entryInRange reports whether an entry with outbox id id and the
// occurred_at field occurred belongs to the range.
func (r VerifyRange) entryInRange(id uint64, occurred string) bool {
	if id < r.FromID {
		return false
	}
	if r.Since.IsZero() {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, occurred)
	// An entry whose time does not parse is compared rather than dropped:
	// leaving it out could hide a foreign entry.
	return err != nil || !t.Before(r.Since)
}

// VerifyExample is one row or entry verify reports.
type VerifyExample struct {
	OutboxID  uint64   `json:"outbox_id"`
	MessageID string   `json:"message_id"`
	Entries   []string `json:"entries,omitempty"` // stream/entry-id
}

// VerifyReport is what Verify found; its JSON is `verify --json`.
type VerifyReport struct {
	Mode    string `json:"mode"`
	Table   string `json:"table"`
	Range   string `json:"range"`
	Streams int    `json:"streams"`
	Rows    int    `json:"rows"`
	Entries int    `json:"entries"`
	// Matched rows have exactly one entry.
	Matched int `json:"matched"`
	// Pending rows are unsent rows of poll mode without entry.
	Pending int `json:"pending"`
	// NotYetRelayed rows are binlog mode's rows the stored position has
	// not passed, without entry.
	NotYetRelayed int `json:"not_yet_relayed"`
	// CaughtUp says, in binlog mode, whether the stored position passed
	// the snapshot: when false, rows without entry are not yet relayed
	// rather than missing.
	CaughtUp bool `json:"caught_up"`
	// Later counts entries of rows committed after the snapshot; Deleted
	// entries of rows deleted since (poll mode --on-sent delete, or below
	// the table's lowest id): neither is foreign.
	Later   int `json:"committed_after_snapshot"`
	Deleted int `json:"rows_deleted"`

	Missing    int `json:"missing"`
	Duplicated int `json:"duplicated"`
	Foreign    int `json:"foreign"`
	// SharedIDs counts the message ids that more than one row in the range
	// holds (a table without a unique key on message_id): each row's event
	// is relayed, and consumers that deduplicate by message_id drop all
	// but the first.
	SharedIDs int            `json:"shared_message_ids"`
	Examples  VerifyExamples `json:"examples"`
	Warnings  []string       `json:"warnings,omitempty"`
}

// VerifyExamples holds the first examples of each problem.
type VerifyExamples struct {
	Missing    []VerifyExample `json:"missing"`
	Duplicated []VerifyExample `json:"duplicated"`
	Foreign    []VerifyExample `json:"foreign"`
	SharedIDs  []SharedID      `json:"shared_message_ids"`
}

// SharedID is a message id that more than one row holds.
type SharedID struct {
	MessageID string `json:"message_id"`
	Rows      int    `json:"rows"`
	// FirstID and LastID are the lowest and highest ids of its rows.
	FirstID uint64 `json:"first_id"`
	LastID  uint64 `json:"last_id"`
}

// Clean reports whether verify found nothing wrong.
func (r *VerifyReport) Clean() bool { return r.Missing+r.Duplicated+r.Foreign+r.SharedIDs == 0 }

// String describes the range for the report.
func (r VerifyRange) String() string {
	var parts []string
	if r.FromID > 0 {
		parts = append(parts, fmt.Sprintf("id >= %d", r.FromID))
	}
	if !r.Since.IsZero() {
		parts = append(parts, "occurred_at >= "+r.Since.Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "all rows"
	}
	return strings.Join(parts, " and ")
}

// waitPastSnapshot waits until the stored position reaches the end of the
// binlog as of the snapshot conn holds: every row the snapshot shows is
// then relayed. It returns false when the wait ran out or the position
// cannot be compared.
func waitPastSnapshot(ctx context.Context, db *sql.DB, conn *sql.Conn, sink *redisstream.Sink, wait time.Duration) (bool, error) {
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return false, fmt.Errorf("verify: %w", err)
	}
	end, err := srv.SnapshotEnd(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("verify: %w", err)
	}
	passed, _, err := waitPassed(ctx, sink, end, wait)
	return passed, err
}

// parseOutboxID returns the outbox_id field of an entry, if it has one.
func parseOutboxID(v any) (uint64, bool) {
	s, _ := v.(string)
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

// errIDTooLarge stops verify on ids a sorted-set score cannot hold exactly.
var errIDTooLarge = outbox.WithHint(errors.New("verify: an outbox_id above 2^53 cannot be indexed exactly"),
	"verify a range of smaller ids with --from-id, or compare the rows and entries another way")
