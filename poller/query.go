package poller

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/eventrow"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// queries are what a round needs of the table, built once from the mapping
// and the table: the statements (package outboxsql) and the shape of the
// rows they return.
type queries struct {
	// isolation of the round's transaction: READ COMMITTED, or REPEATABLE
	// READ where the binlog is statement-based.
	isolation sql.IsolationLevel
	sql       *outboxsql.Poll
	// Which optional columns the fetch returns, in its column order.
	hasMessageID, hasAggregateType, hasHeaders bool
	// fields are the columns carried as fields of their own, which the
	// fetch returns last, in this order (schema.FieldColumns).
	fields []schema.ExtraColumn
	// fieldsSize is what their fields add to a row's size beside their
	// values' lengths (outbox.FieldSize), counting every one, NULL or not.
	fieldsSize int64
	// layout builds an event from a fetched row (eventrow.Layout.Fill).
	layout eventrow.Layout
	// payloadJSON: dead-letter rows whose payload is not valid JSON.
	payloadJSON bool
}

// prepare checks that the server has SKIP LOCKED and that the table fits the
// mapping, and builds the statements.
func (p *Poller) prepare(ctx context.Context) (*queries, error) {
	srv := p.cfg.Server
	if srv.Flavor == "" {
		var err error
		if srv, err = mysqlserver.Detect(ctx, p.db); err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
	}
	if err := srv.SkipLocked(); err != nil {
		return nil, err
	}
	tbl := p.cfg.TableInfo
	if tbl == nil {
		t, problems, err := schema.Validate(ctx, p.db, p.cfg.Database, p.cfg.Table, p.cfg.Mapping)
		if err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		problems = append(problems, t.CheckExtra(p.cfg.Extra)...)
		if err := schema.ProblemsError(p.cfg.Table, problems); err != nil {
			return nil, err
		}
		for _, pr := range problems {
			p.log.Warn("outbox table", "problem", pr.Message)
		}
		tbl = t
	}
	q := buildQueries(p.cfg, tbl)
	// READ COMMITTED cannot write a statement-based binlog (error 1665), and
	// binlog_format=STATEMENT is a reason shops end up in poll mode. Then
	// the round runs at REPEATABLE READ: correct, only without re-looks
	// for rows another relay is about to commit (see filter).
	var logBin, format sql.NullString
	if err := p.db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ @@GLOBAL.log_bin, @@SESSION.binlog_format").Scan(&logBin, &format); err != nil {
		return nil, fmt.Errorf("poll: read binlog_format: %w", err)
	}
	q.isolation = sql.LevelReadCommitted
	if (logBin.String == "1" || strings.EqualFold(logBin.String, "ON")) && strings.EqualFold(format.String, "STATEMENT") {
		q.isolation = sql.LevelRepeatableRead
		p.log.Info("binlog_format is STATEMENT: polling at REPEATABLE READ (READ COMMITTED cannot be logged as statements)")
	}
	return q, nil
}

// buildQueries renders the statements for cfg and the inspected table.
func buildQueries(cfg Config, tbl *schema.Table) *queries {
	m := cfg.Mapping
	q := &queries{
		hasMessageID:     m.Has(schema.ColMessageID),
		hasAggregateType: m.Has(schema.ColAggregateType),
		hasHeaders:       m.Has(schema.ColHeaders),
		fields:           schema.FieldColumns(m, cfg.Extra),
		payloadJSON:      cfg.PayloadJSON,
	}
	for _, f := range q.fields {
		q.fieldsSize += outbox.FieldSize(f.Field, 0)
	}
	q.layout = eventrow.Layout{MessageID: q.hasMessageID, AggregateType: q.hasAggregateType, Fields: schema.FieldNames(q.fields)}
	if tbl != nil {
		if c, ok := tbl.Column(m[schema.ColPayload]); ok && c.JSON && tbl.MariaDB {
			q.payloadJSON = true
		}
	}
	q.sql = outboxsql.NewPoll(outboxTable(cfg, tbl), outboxsql.PollOptions{
		DeleteRows: cfg.OnSent == OnSentDelete, MaxPayloadBytes: cfg.MaxPayloadBytes, Fields: q.fields,
	})
	return q
}

// outboxTable is the outbox table as package outboxsql names it.
func outboxTable(cfg Config, tbl *schema.Table) outboxsql.Table {
	return outboxsql.Table{Database: cfg.Database, Name: cfg.Table, Mapping: cfg.Mapping, Info: tbl}
}

// row is one locked row. lockBatch fills the id, the aggregate and the sizes;
// fetch fills the rest of ev for the rows that go out this round.
type row struct {
	ev outbox.Event
	// key identifies the aggregate: aggregate_type NUL aggregate_id.
	key string
	// payloadLen is LENGTH(payload), -1 for NULL.
	payloadLen int64
	// size is about what the event holds in memory once fetched
	// (outbox.EventSize): the payload fetch reads, the other columns, and
	// after the fetch the entry format's envelope.
	size     int
	oversize bool
}

// lockBatch locks the next batch of unsent rows no other relay holds, in id
// order, and reads their ids, aggregates and sizes only. The payloads are
// read by fetch for the rows that fit MaxBatchBytes: reading them here would
// hold up to BatchSize payloads of MaxPayloadBytes (1000 x 1 MiB by default)
// before the byte budget could cut the batch.
func (p *Poller) lockBatch(ctx context.Context, tx *sql.Tx, limit int) ([]row, error) {
	rs, err := tx.QueryContext(ctx, p.q.sql.Lock(limit))
	if err != nil {
		return nil, fmt.Errorf("poll: lock batch: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			r            row
			aggType, agg sql.NullString
			payloadLen   sql.NullInt64
			other        int64
		)
		if err := rs.Scan(&r.ev.OutboxID, &aggType, &agg, &payloadLen, &other); err != nil {
			return nil, fmt.Errorf("poll: lock batch: %w", err)
		}
		r.ev.AggregateType, r.ev.AggregateID = aggType.String, agg.String
		r.key = r.ev.AggregateType + "\x00" + r.ev.AggregateID
		r.payloadLen = -1
		read := int64(0)
		if payloadLen.Valid {
			r.payloadLen = payloadLen.Int64
			if r.payloadLen <= int64(p.cfg.MaxPayloadBytes) || p.cfg.OnSent == OnSentDelete {
				read = r.payloadLen
			}
		}
		// The dead-letter reason is not known before the fetch: reasonReserve
		// stands for it.
		r.size = outbox.EventSize(read + other + int64(len(r.ev.AggregateType)+len(r.ev.AggregateID)) + p.q.fieldsSize + reasonReserve)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("poll: lock batch: %w", err)
	}
	return out, nil
}

// reasonReserve is what a locked row's size estimate counts for the
// dead-letter reason (Event.Invalid) the fetch may give it.
const reasonReserve = 128

// fetch reads the full rows of the batch whose ok is set and decodes their
// events. It returns the payload and header bytes it read.
func (p *Poller) fetch(ctx context.Context, tx *sql.Tx, rows []row, ok []bool) (int, error) {
	want := make(map[uint64]int, len(rows))
	ids := make([]uint64, 0, len(rows))
	for i := range rows {
		if ok[i] {
			ids = append(ids, rows[i].ev.OutboxID)
			want[rows[i].ev.OutboxID] = i
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	rs, err := tx.QueryContext(ctx, p.q.sql.Fetch(ids))
	if err != nil {
		return 0, fmt.Errorf("poll: read batch: %w", err)
	}
	defer rs.Close()
	var (
		id                                uint64
		messageID, aggType, aggID, evType sql.NullString
		payload, headers                  []byte
		occurred                          any
		fields                            = make([]sql.NullString, len(p.q.fields))
		dest                              = []any{&id}
	)
	if p.q.hasMessageID {
		dest = append(dest, &messageID)
	}
	if p.q.hasAggregateType {
		dest = append(dest, &aggType)
	}
	dest = append(dest, &aggID, &evType, &payload)
	if p.q.hasHeaders {
		dest = append(dest, &headers)
	}
	dest = append(dest, &occurred)
	for i := range fields {
		dest = append(dest, &fields[i])
	}
	read, got := 0, 0
	for rs.Next() {
		// Scan into fresh slices: the events keep them.
		payload, headers = nil, nil
		if err := rs.Scan(dest...); err != nil {
			return read, fmt.Errorf("poll: read batch: %w", err)
		}
		i, found := want[id]
		if !found {
			return read, fmt.Errorf("poll: read batch: row %d was not asked for", id)
		}
		read += len(payload) + len(headers)
		got++
		rows[i].ev, rows[i].oversize = p.decode(id, messageID, aggType, aggID, evType, payload, rows[i].payloadLen, headers, occurred, fields)
		p.pub.Prepare(&rows[i].ev)
		rows[i].size += len(rows[i].ev.Envelope)
	}
	if err := rs.Err(); err != nil {
		return read, fmt.Errorf("poll: read batch: %w", err)
	}
	// The rows are locked by this transaction: each must be there.
	if got != len(want) {
		return read, fmt.Errorf("poll: read batch: %d of %d locked rows read", got, len(want))
	}
	return read, nil
}

// decode builds the event of a row, by the rules of package eventrow.
// Problems with the content make the event a dead letter with the reason, as
// in binlog mode, instead of failing the round: a bad row must neither block
// the ones behind it nor vanish.
//
// payloadLen is the payload's length as lockBatch read it (-1 for NULL): with
// OnSentMark an oversize payload is not fetched at all.
func (p *Poller) decode(id uint64, messageID, aggType, aggID, evType sql.NullString, payload []byte, payloadLen int64,
	headers []byte, occurred any, fields []sql.NullString) (e outbox.Event, oversize bool) {
	var b eventrow.Builder
	p.q.layout.Fill(&b, &eventrow.Scanned{
		ID: id, MessageID: messageID, AggregateType: aggType, AggregateID: aggID, EventType: evType,
		Payload: payload, HasPayload: payloadLen >= 0, Headers: headers, Fields: fields,
	})
	switch {
	case payloadLen < 0:
	case payloadLen > int64(p.cfg.MaxPayloadBytes):
		oversize = true
		reason := fmt.Sprintf("payload has %d bytes, more than the limit of %d (--max-payload-bytes)", payloadLen, p.cfg.MaxPayloadBytes)
		if p.cfg.OnSent == OnSentMark {
			// The row keeps the payload; the dead-letter stream need not.
			b.Payload(nil, true)
			reason += "; the payload is left out here and kept in the table row"
		}
		b.Problem(reason)
	case p.q.payloadJSON && !json.Valid(payload):
		b.Problem("payload is not valid JSON")
	}
	b.OccurredAt(occurred)
	e = b.Event()
	e.Database, e.Table = p.cfg.Database, p.cfg.Table
	return e, oversize
}

// foreign is an unsent row below the batch's largest id.
type foreign struct {
	id  uint64
	key string
}

// unsentBelow lists the unsent rows with an id below the largest of the
// batch mine that are not in it, with a non-locking read. At READ COMMITTED it sees every row committed up to now,
// including rows another relay holds locked (their last committed version,
// so a row another relay marked but has not committed yet is still unsent)
// and rows whose producers committed after lockBatch.
//
// The range is small: below the batch's largest id, every unsent row is in
// the batch, locked by another relay, or committed after lockBatch.
func (p *Poller) unsentBelow(ctx context.Context, tx *sql.Tx, mine []row) ([]foreign, error) {
	// The batch's own rows are left out by the server: in the common case
	// of one relay, nothing comes back.
	ids := make([]uint64, len(mine))
	for i := range mine {
		ids[i] = mine[i].ev.OutboxID
	}
	rs, err := tx.QueryContext(ctx, p.q.sql.UnsentBelow(ids[len(ids)-1], ids))
	if err != nil {
		return nil, fmt.Errorf("poll: read unsent rows: %w", err)
	}
	defer rs.Close()
	var out []foreign
	for rs.Next() {
		var f foreign
		var typ, agg sql.NullString
		if err := rs.Scan(&f.id, &typ, &agg); err != nil {
			return nil, fmt.Errorf("poll: read unsent rows: %w", err)
		}
		f.key = typ.String + "\x00" + agg.String
		out = append(out, f)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("poll: read unsent rows: %w", err)
	}
	return out, nil
}

// publishable decides which locked rows (in id order) may be published now:
// for each aggregate, the rows below the smallest unsent id of that aggregate
// that the batch does not hold. Another relay holds that row, or its
// producer committed it after the batch was locked; either way publishing a
// later event of the aggregate first would reorder the aggregate. The rows
// left out stay unsent and are retried in a later round.
func publishable(locked []row, unsent []foreign) []bool {
	mine := make(map[uint64]struct{}, len(locked))
	for i := range locked {
		mine[locked[i].ev.OutboxID] = struct{}{}
	}
	firstForeign := map[string]uint64{}
	for _, f := range unsent {
		if _, ok := mine[f.id]; ok {
			continue
		}
		if cur, ok := firstForeign[f.key]; !ok || f.id < cur {
			firstForeign[f.key] = f.id
		}
	}
	ok := make([]bool, len(locked))
	for i := range locked {
		f, blocked := firstForeign[locked[i].key]
		ok[i] = !blocked || locked[i].ev.OutboxID < f
	}
	return ok
}

// capBytes clears ok for every row after the publishable rows reach max
// bytes, keeping at least one, and reports whether it cleared any. Cutting
// the id-ordered batch at one point keeps each aggregate's published rows a
// prefix of its rows; the rows cut stay locked and unsent until the COMMIT,
// and a later round (this relay's or another's) takes them in id order.
func capBytes(rows []row, ok []bool, max int) bool {
	total := 0
	for i := range rows {
		if !ok[i] {
			continue
		}
		if total > 0 && total+rows[i].size > max {
			for j := i; j < len(ok); j++ {
				ok[j] = false
			}
			return true
		}
		total += rows[i].size
	}
	return false
}

// markSent marks or deletes the relayed rows.
func (p *Poller) markSent(ctx context.Context, tx *sql.Tx, ids []uint64) error {
	res, err := tx.ExecContext(ctx, p.q.sql.Mark(ids))
	if err != nil {
		return fmt.Errorf("poll: %s sent rows: %w", p.cfg.OnSent, err)
	}
	// The rows are locked by this transaction: each must be affected.
	if n, err := res.RowsAffected(); err == nil && n != int64(len(ids)) {
		return fmt.Errorf("poll: %s sent rows: %d of %d rows affected", p.cfg.OnSent, n, len(ids))
	}
	return nil
}
