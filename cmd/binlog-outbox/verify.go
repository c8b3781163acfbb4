package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Defaults of the verify flags.
const (
	defaultVerifyChunk = 10000
	defaultVerifyWait  = time.Minute
	// verifyExamples is how many examples of each kind verify prints.
	verifyExamples = 5
)

func verifyCommand() *cli.Command {
	flags := append(streamFlags(), positionKeyFlag(), onSentFlag(),
		&cli.DurationFlag{
			Name:  "since",
			Usage: "verify the rows whose occurred_at is within this duration, e.g. 24h (and the entries whose occurred_at is)",
		},
		&cli.Uint64Flag{
			Name:  "from-id",
			Usage: "verify the rows with id >= N (and the entries whose outbox_id is)",
		},
		&cli.BoolFlag{
			Name:  "json",
			Usage: "print the result as JSON",
		},
		&cli.DurationFlag{
			Name:  "wait",
			Usage: "binlog mode: how long to wait for the relay's stored position to pass the snapshot verify reads; rows after it are reported as not yet relayed",
			Value: defaultVerifyWait,
		},
		&cli.IntFlag{
			Name:  "chunk-rows",
			Usage: "rows read per SELECT, and entries read per index query",
			Value: defaultVerifyChunk,
		},
		&cli.IntFlag{
			Name:  "page-entries",
			Usage: "stream entries read per XRANGE (each carries its payload)",
			Value: xrangePage,
		})
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the outbox rows in the table with the stream entries: missing, duplicated and foreign entries",
		Description: "Reads the rows in the range (--since or --from-id; all rows without either) in one consistent snapshot\n" +
			"and every entry of the streams the --stream template names and of the dead-letter stream, and matches\n" +
			"them by outbox_id and message_id. Missing: a committed row the relay should have appended has no entry.\n" +
			"Duplicated: a row has more than one entry. Foreign: an entry in the range names no row (e.g. a rolled-\n" +
			"back transaction's). Poll mode's unsent rows are pending; binlog mode's rows after the stored position\n" +
			"are not yet relayed. Exits 0 when clean, 1 when not. The entries are indexed in a temporary Redis\n" +
			"sorted set (about 100 bytes per entry, deleted at the end, expiring after an hour): see docs/operations.md.",
		Flags:  flags,
		Action: runVerify,
	}
}

// verifyRange says which rows and entries verify compares.
type verifyRange struct {
	// FromID, when positive, limits both to outbox ids >= FromID.
	FromID uint64
	// Since, when not zero, limits both to occurred_at >= Since.
	Since time.Time
}

// entryInRange reports whether an entry with outbox id id and the
// occurred_at field occurred belongs to the range.
func (r verifyRange) entryInRange(id uint64, occurred string) bool {
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

// verifyExample is one row or entry verify reports.
type verifyExample struct {
	OutboxID  uint64   `json:"outbox_id"`
	MessageID string   `json:"message_id"`
	Entries   []string `json:"entries,omitempty"` // stream/entry-id
}

// verifyResult is what verify found.
type verifyResult struct {
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

	Missing    int              `json:"missing"`
	Duplicated int              `json:"duplicated"`
	Foreign    int              `json:"foreign"`
	Examples   verifyExampleSet `json:"examples"`
	Warnings   []string         `json:"warnings,omitempty"`
}

// verifyExampleSet holds the first examples of each problem.
type verifyExampleSet struct {
	Missing    []verifyExample `json:"missing"`
	Duplicated []verifyExample `json:"duplicated"`
	Foreign    []verifyExample `json:"foreign"`
}

// Clean reports whether verify found nothing wrong.
func (r *verifyResult) Clean() bool { return r.Missing+r.Duplicated+r.Foreign == 0 }

// errVerifyFound is verify's result when it found missing, duplicated or
// foreign entries: the command exits 1.
type errVerifyFound struct{ missing, duplicated, foreign int }

func (e errVerifyFound) Error() string {
	return fmt.Sprintf("verify: %d missing, %d duplicated, %d foreign", e.missing, e.duplicated, e.foreign)
}

func runVerify(c *cli.Context) error {
	ctx := c.Context
	rng := verifyRange{FromID: c.Uint64("from-id")}
	if c.IsSet("since") && c.IsSet("from-id") {
		return usageError{errors.New("give --since or --from-id, not both")}
	}
	if d := c.Duration("since"); d > 0 {
		rng.Since = time.Now().Add(-d).UTC()
	} else if c.IsSet("since") {
		return usageError{fmt.Errorf("--since %s: want a positive duration, e.g. 24h", d)}
	}
	chunk, page := c.Int("chunk-rows"), c.Int("page-entries")
	if chunk < 1 || page < 1 {
		return usageError{errors.New("--chunk-rows and --page-entries must be positive")}
	}
	onSent := strings.ToLower(c.String("on-sent"))
	if onSent != poller.OnSentMark && onSent != poller.OnSentDelete {
		return usageError{fmt.Errorf("--on-sent %q: want mark or delete", c.String("on-sent"))}
	}
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	db, _, err := openUsableTable(ctx, &cfg, "verify")
	if err != nil {
		return err
	}
	defer db.Close()
	if !cfg.Mapping.Has(schema.ColSentAt) {
		onSent = poller.OnSentDelete
	}
	tmpl, client, err := openStreams(c, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	keys := redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key"))
	st, err := loadRelayState(ctx, client, keys, "verify")
	if err != nil {
		return err
	}
	relayMode := st.Mode

	r := &verifyResult{Mode: relayMode, Table: cfg.Database + "." + cfg.Table, Range: rng.String(), CaughtUp: true}
	v := &verifier{db: db, rng: rng, chunk: chunk, res: r, poll: relayMode == mode.Poll, deleteMode: onSent == poller.OnSentDelete}
	v.buildQueries(cfg)

	// The snapshot first: every row it shows committed before it, so before
	// the binlog end read next, and (poll mode) before the stream scan.
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("verify: connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET /* binlog-outbox */ SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return fmt.Errorf("verify: set isolation: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "START /* binlog-outbox */ TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return fmt.Errorf("verify: start the snapshot: %w", err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK /* binlog-outbox */") //nolint:errcheck // read only
	if relayMode == mode.Binlog {
		r.CaughtUp, err = waitPastSnapshot(ctx, db, conn, st.Sink, c.Duration("wait"))
		if err != nil {
			return err
		}
		if !r.CaughtUp {
			r.Warnings = append(r.Warnings, fmt.Sprintf("the stored position did not pass the snapshot within --wait %s: rows without an entry are counted as not yet relayed, not missing (see `binlog-outbox status`)", c.Duration("wait")))
		}
	}

	streams, err := streamKeys(ctx, client, tmpl.Glob(), c.String("dead-letter-stream"))
	if err != nil {
		return err
	}
	idx := newEntryIndex(client, keys, page)
	defer idx.drop()
	for _, key := range streams {
		n, err := idx.add(ctx, key, rng)
		if err != nil {
			return err
		}
		r.Streams++
		r.Entries += n
	}
	if err := v.walk(ctx, conn, idx); err != nil {
		return err
	}
	if err := printVerify(c.App.Writer, r, c.Bool("json")); err != nil {
		return err
	}
	if !r.Clean() {
		return errVerifyFound{r.Missing, r.Duplicated, r.Foreign}
	}
	return nil
}

// String describes the range for the report.
func (r verifyRange) String() string {
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

func printVerify(w io.Writer, r *verifyResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s mode), %s: %d rows, %d entries in %d streams\n", r.Table, r.Mode, r.Range, r.Rows, r.Entries, r.Streams)
	fmt.Fprintf(&b, "  matched:         %d\n", r.Matched)
	if r.Mode == mode.Poll {
		fmt.Fprintf(&b, "  pending:         %d (unsent rows)\n", r.Pending)
	} else {
		fmt.Fprintf(&b, "  not yet relayed: %d\n", r.NotYetRelayed)
	}
	fmt.Fprintf(&b, "  missing:         %d\n", r.Missing)
	for _, e := range r.Examples.Missing {
		fmt.Fprintf(&b, "    row id=%d message_id=%s has no entry\n", e.OutboxID, e.MessageID)
	}
	fmt.Fprintf(&b, "  duplicated:      %d\n", r.Duplicated)
	for _, e := range r.Examples.Duplicated {
		fmt.Fprintf(&b, "    row id=%d message_id=%s has %d entries: %s\n", e.OutboxID, e.MessageID, len(e.Entries), strings.Join(e.Entries, ", "))
	}
	fmt.Fprintf(&b, "  foreign:         %d\n", r.Foreign)
	for _, e := range r.Examples.Foreign {
		fmt.Fprintf(&b, "    entry %s (outbox_id=%d message_id=%s) names no row\n", strings.Join(e.Entries, ", "), e.OutboxID, e.MessageID)
	}
	if r.Later+r.Deleted > 0 {
		fmt.Fprintf(&b, "  not compared:    %d entries of rows committed after the snapshot, %d of rows deleted since\n", r.Later, r.Deleted)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if r.Clean() {
		b.WriteString("clean\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
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
