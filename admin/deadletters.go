package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/eventrow"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// deadLetterPage is how many dead letters one XRANGE reads; they carry
// their payloads.
const deadLetterPage = 200

// replayBatch is how many rows one SELECT of replay reads.
const replayBatch = 100

// DeadLettersOptions say which dead-letter stream the dead-letters commands
// read, and how the relay renders streams.
type DeadLettersOptions struct {
	Redis redis.UniversalClient
	// Sink is built with run's stream and format flags (no position key):
	// its template names an old entry's stream, its format encodes a
	// replayed row.
	Sink *redisstream.Sink
	// Database and Table fill the template's {database} and {table}.
	Database, Table string
}

// DeadLetterInfo is one dead letter as `dead-letters list` shows it.
type DeadLetterInfo struct {
	// ID is the entry's ID in the dead-letter stream.
	ID string `json:"id"`
	// OutboxID is null for an entry without a usable outbox_id.
	OutboxID  *uint64 `json:"outbox_id"`
	MessageID string  `json:"message_id"`
	Reason    string  `json:"reason"`
	// Stream is the stream the row was meant for: the entry's
	// target_stream, or for an entry written before dead letters carried
	// it, what the current --stream renders (StreamFromTemplate).
	Stream             string    `json:"stream"`
	StreamFromTemplate bool      `json:"stream_from_template,omitempty"`
	Time               time.Time `json:"time"`
	AgeSeconds         float64   `json:"age_seconds"`
}

// DeadLettersReport is what ListDeadLetters found; its JSON is
// `dead-letters list --json`.
type DeadLettersReport struct {
	Stream  string           `json:"stream"`
	Entries []DeadLetterInfo `json:"entries"`
}

// ListDeadLetters lists the entries of the dead-letter stream, oldest first.
func ListDeadLetters(ctx context.Context, o DeadLettersOptions) (DeadLettersReport, error) {
	r := DeadLettersReport{Stream: o.Sink.DeadLetterStream(), Entries: []DeadLetterInfo{}}
	now := time.Now()
	err := redisadmin.RangeEntries(ctx, o.Redis, r.Stream, deadLetterPage, func(msgs []redis.XMessage) error {
		for _, m := range msgs {
			d := redisadmin.ParseDeadLetter(m)
			info := DeadLetterInfo{ID: d.ID, MessageID: d.MessageID, Reason: d.Reason, Stream: d.TargetStream,
				Time: d.Time, AgeSeconds: now.Sub(d.Time).Seconds()}
			if d.HasOutboxID {
				id := d.OutboxID
				info.OutboxID = &id
			}
			if info.Stream == "" {
				info.Stream, info.StreamFromTemplate = o.Sink.StreamOf(o.eventOf(d)), true
			}
			r.Entries = append(r.Entries, info)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("dead-letters list: %w", err)
	}
	return r, nil
}

// eventOf is the event a dead letter's fields describe, enough to render
// its stream.
func (o DeadLettersOptions) eventOf(d redisadmin.DeadLetter) *outbox.Event {
	str := func(name string) string { s, _ := d.Values[name].(string); return s }
	return &outbox.Event{OutboxID: d.OutboxID, MessageID: d.MessageID, AggregateType: str(entry.FieldAggregateType),
		AggregateID: str(entry.FieldAggregateID), EventType: str(entry.FieldEventType), Database: o.Database, Table: o.Table}
}

// PurgeDeadLetters deletes the dead letters older than olderThan and
// returns how many it deleted.
func PurgeDeadLetters(ctx context.Context, o DeadLettersOptions, olderThan time.Duration) (int64, error) {
	n, err := redisadmin.PurgeDeadLetters(ctx, o.Redis, o.Sink.DeadLetterStream(), time.Now().Add(-olderThan))
	if err != nil {
		return 0, fmt.Errorf("dead-letters purge: %w", err)
	}
	return n, nil
}

// ReplayOptions say which dead letters ReplayDeadLetters replays.
type ReplayOptions struct {
	DeadLettersOptions
	DB *sql.DB
	// Table is the outbox table with its resolved mapping and inspection.
	Table outboxsql.Table
	// Extra are the --extra-column columns.
	Extra []schema.ExtraColumn
	// IDs select dead letters by outbox id, message_id or entry ID; All
	// takes every one.
	IDs []string
	All bool
}

// Outcomes of a replayed row (ReplayRow.Outcome).
const (
	ReplayDelivered = "delivered"
	ReplayStays     = "stays"
	ReplayGone      = "gone"
)

// ReplayRow is what replay did with one row.
type ReplayRow struct {
	// OutboxID is 0 for a dead letter without a usable outbox_id.
	OutboxID  uint64 `json:"outbox_id"`
	MessageID string `json:"message_id"`
	// DeadLetters are the row's entries in the dead-letter stream.
	DeadLetters []string `json:"dead_letters"`
	// Outcome is delivered, stays, or gone (a replay or purge that ran
	// meanwhile removed the entries; nothing was written).
	Outcome string `json:"outcome"`
	// Stream and EntryID are where the row's entry is now (delivered, or
	// requeued with a new reason).
	Stream  string `json:"stream,omitempty"`
	EntryID string `json:"entry_id,omitempty"`
	// Reason is why a row stays.
	Reason string `json:"reason,omitempty"`
	// target is the stream the dead letter says the row was meant for
	// (target_stream), "" when it does not say.
	target string
}

// ReplayReport is what ReplayDeadLetters did; its JSON is `dead-letters
// replay --json`.
type ReplayReport struct {
	DeadLetterStream string      `json:"dead_letter_stream"`
	Rows             []ReplayRow `json:"rows"`
	Delivered        int         `json:"delivered"`
	Stay             int         `json:"stay"`
	Gone             int         `json:"gone"`
	// Unmatched are the IDs no dead letter matched.
	Unmatched []string `json:"unmatched,omitempty"`
}

// ReplayDeadLetters reads the rows of the chosen dead letters again from
// the outbox table, builds their events under the current mapping and
// format (the rules of package eventrow, the entry encoding of run's sink),
// and appends each to its stream while deleting its dead letters, in one
// step per row (redisstream.Sink.Replay, which proves it exactly once). A
// row still undeliverable stays: with a new reason its dead letter is
// replaced by one that says it, with the same reason it is left as it is.
// A row no longer in the table stays as well.
//
// A replayed event lands after the events the relay appended meanwhile,
// later events of its aggregate included: consumers that need the order
// see it from the outbox_id, and deduplicate by message_id.
func ReplayDeadLetters(ctx context.Context, o ReplayOptions) (ReplayReport, error) {
	r := ReplayReport{DeadLetterStream: o.Sink.DeadLetterStream(), Rows: []ReplayRow{}}
	rows, err := o.chosen(ctx, &r)
	if err != nil {
		return r, err
	}
	q := outboxsql.NewReplay(o.Table, schema.FieldColumns(o.Table.Mapping, o.Extra))
	for start := 0; start < len(rows); start += replayBatch {
		batch := rows[start:min(start+replayBatch, len(rows))]
		if err := o.replayBatch(ctx, q, batch); err != nil {
			// Each row's step stands on its own: say what is done, so
			// that the operator knows a run again finishes the rest.
			n := 0
			for _, row := range rows {
				if row.Outcome == ReplayDelivered {
					n++
				}
			}
			return r, outbox.WithHint(fmt.Errorf("dead-letters replay: %d rows delivered, then: %w", n, err),
				"fix the cause and run the replay again: what it delivered is no longer in the dead-letter stream, so nothing is appended twice%s", hintSuffix(err))
		}
	}
	for _, row := range rows {
		switch row.Outcome {
		case ReplayDelivered:
			r.Delivered++
		case ReplayGone:
			r.Gone++
		default:
			r.Stay++
		}
		r.Rows = append(r.Rows, *row)
	}
	return r, nil
}

// chosen reads the dead letters the options select, one row per outbox id
// (a row dead-lettered twice has two entries, replayed once).
func (o ReplayOptions) chosen(ctx context.Context, r *ReplayReport) ([]*ReplayRow, error) {
	matched := map[string]bool{}
	byID := map[uint64]*ReplayRow{}
	var rows []*ReplayRow
	err := redisadmin.RangeEntries(ctx, o.Redis, r.DeadLetterStream, deadLetterPage, func(msgs []redis.XMessage) error {
		for _, m := range msgs {
			d := redisadmin.ParseDeadLetter(m)
			if !o.All && !o.matches(d, matched) {
				continue
			}
			if row, ok := byID[d.OutboxID]; ok && d.HasOutboxID {
				row.DeadLetters = append(row.DeadLetters, d.ID)
				continue
			}
			row := &ReplayRow{OutboxID: d.OutboxID, MessageID: d.MessageID, DeadLetters: []string{d.ID}, Outcome: ReplayStays, Reason: d.Reason, target: d.TargetStream}
			if !d.HasOutboxID {
				row.Reason = "the dead letter has no outbox id, so the row cannot be read again: " + d.Reason
			} else {
				byID[d.OutboxID] = row
			}
			rows = append(rows, row)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letters replay: %w", err)
	}
	for _, id := range o.IDs {
		if !matched[id] {
			r.Unmatched = append(r.Unmatched, id)
		}
	}
	return rows, nil
}

// matches reports whether d is one of the IDs, recording which matched.
func (o ReplayOptions) matches(d redisadmin.DeadLetter, matched map[string]bool) bool {
	hit := false
	for _, id := range o.IDs {
		if id == d.ID || id == d.MessageID || (d.HasOutboxID && id == strconv.FormatUint(d.OutboxID, 10)) {
			matched[id], hit = true, true
		}
	}
	return hit
}

// replayBatch reads the rows of batch and replays each.
func (o ReplayOptions) replayBatch(ctx context.Context, q *outboxsql.Replay, batch []*ReplayRow) error {
	want := map[uint64]*ReplayRow{}
	var ids []uint64
	for _, row := range batch {
		if row.OutboxID > 0 {
			ids = append(ids, row.OutboxID)
			want[row.OutboxID] = row
		}
	}
	if len(ids) == 0 {
		return nil
	}
	events, err := o.readRows(ctx, q, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		row := want[id]
		e, ok := events[id]
		if !ok {
			row.Reason = fmt.Sprintf("row %d is no longer in the outbox table (deleted by cleanup or --on-sent delete); the dead letter holds what is left of it", id)
			continue
		}
		if err := o.replayRow(ctx, row, e); err != nil {
			return err
		}
	}
	return nil
}

// replayRow replays one row whose event e was read from the table.
func (o ReplayOptions) replayRow(ctx context.Context, row *ReplayRow, e outbox.Event) error {
	o.Sink.Prepare(&e)
	if e.Invalid != "" && e.Invalid == row.Reason {
		return nil // still a dead letter for the same reason: nothing to change
	}
	if s := o.Sink.StreamOf(&e); e.Invalid == "" && row.target != "" && s != row.target {
		// The relay's template named another stream than the one in force
		// here: its consumers read that one.
		row.Reason = fmt.Sprintf("the dead letter was meant for %s, but --stream %s names %s for the row; replay with the relay's --stream (leave it out: the relay's record gives it)",
			row.target, o.Sink.Template(), s)
		return nil
	}
	outcome, entry, err := o.Sink.Replay(ctx, &e, row.DeadLetters)
	if err != nil {
		return err
	}
	row.MessageID = e.MessageID
	switch outcome {
	case redisstream.ReplayDelivered:
		row.Outcome, row.Stream, row.EntryID, row.Reason = ReplayDelivered, o.Sink.StreamOf(&e), entry, ""
	case redisstream.ReplayRequeued:
		row.Stream, row.EntryID, row.Reason = o.Sink.DeadLetterStream(), entry, e.Invalid
	default:
		row.Outcome, row.Reason = ReplayGone, ""
	}
	return nil
}

// readRows reads the rows ids and builds their events.
func (o ReplayOptions) readRows(ctx context.Context, q *outboxsql.Replay, ids []uint64) (map[uint64]outbox.Event, error) {
	rs, err := o.DB.QueryContext(ctx, q.Rows(ids))
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	defer rs.Close()
	d := newRowDecoder(o.Table, o.Extra)
	out := map[uint64]outbox.Event{}
	for rs.Next() {
		d.reset()
		if err := rs.Scan(d.dest...); err != nil {
			return nil, fmt.Errorf("read rows: %w", err)
		}
		e := d.event()
		e.Database, e.Table = o.Database, o.Table.Name
		out[e.OutboxID] = e
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	return out, nil
}

// rowDecoder scans the columns of outboxsql.Replay.Rows and builds an event
// by the rules of package eventrow, as poll mode's decode does.
type rowDecoder struct {
	hasMessageID, hasAggregateType, hasHeaders, payloadJSON bool
	fields                                                  []schema.ExtraColumn
	layout                                                  eventrow.Layout

	id                                uint64
	messageID, aggType, aggID, evType sql.NullString
	payload, headers                  []byte
	occurred                          any
	values                            []sql.NullString
	dest                              []any
}

func newRowDecoder(t outboxsql.Table, extra []schema.ExtraColumn) *rowDecoder {
	m := t.Mapping
	d := &rowDecoder{
		hasMessageID: m.Has(schema.ColMessageID), hasAggregateType: m.Has(schema.ColAggregateType), hasHeaders: m.Has(schema.ColHeaders),
		fields: schema.FieldColumns(m, extra),
	}
	if t.Info != nil {
		if c, ok := t.Info.Column(m[schema.ColPayload]); ok && c.JSON {
			d.payloadJSON = true
		}
	}
	d.layout = eventrow.Layout{MessageID: d.hasMessageID, AggregateType: d.hasAggregateType, Fields: schema.FieldNames(d.fields)}
	d.values = make([]sql.NullString, len(d.fields))
	d.dest = []any{&d.id}
	if d.hasMessageID {
		d.dest = append(d.dest, &d.messageID)
	}
	if d.hasAggregateType {
		d.dest = append(d.dest, &d.aggType)
	}
	d.dest = append(d.dest, &d.aggID, &d.evType, &d.payload)
	if d.hasHeaders {
		d.dest = append(d.dest, &d.headers)
	}
	d.dest = append(d.dest, &d.occurred)
	for i := range d.values {
		d.dest = append(d.dest, &d.values[i])
	}
	return d
}

// reset makes the next Scan fill fresh slices: the events keep them.
func (d *rowDecoder) reset() { d.payload, d.headers = nil, nil }

func (d *rowDecoder) event() outbox.Event {
	var b eventrow.Builder
	d.layout.Fill(&b, &eventrow.Scanned{
		ID: d.id, MessageID: d.messageID, AggregateType: d.aggType, AggregateID: d.aggID, EventType: d.evType,
		Payload: d.payload, HasPayload: d.payload != nil, Headers: d.headers, Fields: d.values,
	})
	if d.payload != nil && d.payloadJSON && !json.Valid(d.payload) {
		b.Problem("payload is not valid JSON")
	}
	b.OccurredAt(d.occurred)
	return b.Event()
}

// hintSuffix is the hint of err, if any, as a second sentence.
func hintSuffix(err error) string {
	if h := outbox.HintOf(err); h != "" {
		return "; " + h
	}
	return ""
}
