package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

const (
	// markChunk is how many rows one SELECT and UPDATE of mark-appended
	// covers.
	markChunk = 1000
	// xrangePage is how many entries one XRANGE reads. Entries carry their
	// payloads (up to --max-payload-bytes each), which XRANGE cannot leave
	// out: a small page bounds the memory.
	xrangePage = 256
)

func markAppendedCommand() *cli.Command {
	flags := append(streamFlags(), onSentFlag(),
		&cli.BoolFlag{
			Name:  "allow-trimmed",
			Usage: "go on when a stream lost entries (XTRIM, MAXLEN, XDEL): the rows of the lost entries stay unsent and poll mode appends them again",
		})
	return &cli.Command{
		Name:  "mark-appended",
		Usage: "mark sent (or delete) every unsent outbox row whose event is in a stream: the switch from binlog to poll mode",
		Description: "Binlog mode marks no row. Before poll mode takes over a table, the rows binlog mode appended must be\n" +
			"marked, or poll mode appends them again. This reads every entry of the streams the --stream template\n" +
			"names and of the dead-letter stream, and marks (--on-sent mark) or deletes (--on-sent delete) each\n" +
			"unsent row whose outbox_id and message_id the entry carries; rows of other tables are left alone.\n" +
			"It needs no assumption about the order of ids: binlog mode appends in commit order, which is not\n" +
			"id order. Run it after the binlog relay stopped, or while it runs with --dedupe-window\n" +
			"(docs/switching-modes.md).",
		Flags:  flags,
		Action: markAppended,
	}
}

// markStats counts what mark-appended did.
type markStats struct {
	streams, entries, marked, alreadySent, foreign int
}

func markAppended(c *cli.Context) error {
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	onSent := strings.ToLower(c.String("on-sent"))
	if onSent != poller.OnSentMark && onSent != poller.OnSentDelete {
		return usageError{fmt.Errorf("--on-sent %q: want mark or delete", c.String("on-sent"))}
	}
	ctx := c.Context
	db, res, err := openUsableTable(ctx, &cfg, "mark-appended")
	if err != nil {
		return err
	}
	defer db.Close()
	if onSent == poller.OnSentMark && !cfg.Mapping.Has(schema.ColSentAt) {
		return outbox.WithHint(fmt.Errorf("%w: --on-sent mark needs the sent_at column, which the table lacks", outbox.ErrConfig),
			"run with --on-sent delete, as poll mode will")
	}
	tmpl, client, err := openStreams(c, cfg)
	if err != nil {
		return err
	}
	defer client.Close()

	keys, err := streamKeys(ctx, client, tmpl.Glob(), c.String("dead-letter-stream"))
	if err != nil {
		return err
	}
	m := newMarker(db, cfg, onSent, res.Table != nil && res.Table.MariaDB)
	var st markStats
	// Every stream is checked before any row is marked: a refusal leaves
	// the table as it was.
	for _, key := range keys {
		info, err := client.XInfoStream(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("mark-appended: XINFO STREAM %s: %w", key, redisstream.Classify(err))
		}
		switch {
		case info.EntriesAdded > info.Length && !c.Bool("allow-trimmed"):
			// The rows of the lost entries cannot be told from rows
			// never appended: guessing would lose or repeat events.
			return outbox.WithHint(fmt.Errorf("mark-appended: stream %s lost %d of the %d entries ever added to it (trimmed or deleted), so their rows cannot be found",
				key, info.EntriesAdded-info.Length, info.EntriesAdded),
				"mark the rows of the lost entries yourself if you know them, then run again with --allow-trimmed; or run with --allow-trimmed and let poll mode append those rows again (consumers deduplicate by message_id)")
		case info.EntriesAdded > info.Length:
			fmt.Fprintf(c.App.ErrWriter, "warning: stream %s lost %d entries; their rows stay unsent and poll mode appends them again\n", key, info.EntriesAdded-info.Length)
		case info.EntriesAdded == 0 && info.Length > 0:
			fmt.Fprintf(c.App.ErrWriter, "warning: Redis before 7.0 does not say whether stream %s was trimmed; rows of trimmed entries stay unsent\n", key)
		}
	}
	for _, key := range keys {
		if err := m.stream(ctx, client, key, &st); err != nil {
			return err
		}
	}
	if _, err = fmt.Fprintf(c.App.Writer, "%d streams, %d entries: %d rows %s; %d were sent already; %d entries name no unsent row of %s.%s (other tables, or rows gone)\n",
		st.streams, st.entries, st.marked, map[string]string{poller.OnSentMark: "marked sent", poller.OnSentDelete: "deleted"}[onSent],
		st.alreadySent, st.foreign, cfg.Database, cfg.Table); err != nil {
		return err
	}
	return prepareSwitch(ctx, c.App.Writer, client, db, cfg, mode.Poll)
}

// streamKeys lists the streams matching glob (on every master of a Redis
// Cluster), and the dead-letter stream.
func streamKeys(ctx context.Context, client redis.UniversalClient, glob, deadLetter string) ([]string, error) {
	keys, err := redisstream.ScanStreams(ctx, client, glob)
	if err != nil {
		return nil, err
	}
	typ, err := client.Type(ctx, deadLetter).Result()
	if err != nil {
		return nil, fmt.Errorf("TYPE %s: %w", deadLetter, redisstream.Classify(err))
	}
	if typ == "stream" && !slices.Contains(keys, deadLetter) {
		keys = append(keys, deadLetter)
		sort.Strings(keys)
	}
	return keys, nil
}

// marker marks the rows named by stream entries, a chunk at a time.
type marker struct {
	db      *sql.DB
	selectQ string // SELECT id, message_id, unsent; without the id list
	markQ   string // UPDATE or DELETE, without the id list
}

func newMarker(db *sql.DB, cfg config, onSent string, mariaDB bool) *marker {
	q := columnsOf(cfg)
	table, id, messageID, unsent := q.table, q.id, q.messageID, q.unsent
	m := &marker{db: db}
	m.selectQ = "SELECT /* binlog-outbox */ " + id + ", " + messageID + ", " + unsent + " FROM " + table + " WHERE " + id + " IN ("
	if onSent == poller.OnSentDelete {
		m.markQ = "DELETE /* binlog-outbox */ FROM " + table + " WHERE " + id + " IN ("
	} else {
		sentAt, _ := cfg.Mapping.Physical(schema.ColSentAt)
		m.markQ = "UPDATE /* binlog-outbox */ " + table + " SET " + schema.QuoteIdent(sentAt) + " = NOW(6) WHERE " + id + " IN ("
		if mariaDB {
			// As poll mode marks: MariaDB checks every CHECK of a row on
			// UPDATE, also the json_valid one a dead letter's payload
			// breaks, and setting sent_at cannot break a constraint.
			m.markQ = "SET STATEMENT check_constraint_checks=0 FOR " + m.markQ
		}
	}
	return m
}

// stream reads every entry of key and marks the rows they name.
func (m *marker) stream(ctx context.Context, client redis.UniversalClient, key string, st *markStats) error {
	st.streams++
	pending := map[uint64]string{} // outbox_id -> message_id
	start := "-"
	for {
		msgs, err := client.XRangeN(ctx, key, start, "+", xrangePage).Result()
		if err != nil {
			return fmt.Errorf("mark-appended: XRANGE %s: %w", key, redisstream.Classify(err))
		}
		for _, msg := range msgs {
			st.entries++
			raw, _ := msg.Values[redisstream.FieldOutboxID].(string)
			id, err := strconv.ParseUint(raw, 10, 64)
			if err != nil {
				// Not an entry of this relay: nothing to mark.
				st.foreign++
				continue
			}
			mid, _ := msg.Values[redisstream.FieldMessageID].(string)
			if prev, dup := pending[id]; dup && prev != mid {
				// Two tables share the stream and an id: each entry is
				// checked against the row on its own.
				if err := m.flush(ctx, pending, st); err != nil {
					return err
				}
			}
			pending[id] = mid
			if len(pending) >= markChunk {
				if err := m.flush(ctx, pending, st); err != nil {
					return err
				}
			}
		}
		if len(msgs) < xrangePage {
			break
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
	return m.flush(ctx, pending, st)
}

// flush marks the unsent rows among pending whose message_id matches their
// entry's, in one transaction, and empties pending.
func (m *marker) flush(ctx context.Context, pending map[uint64]string, st *markStats) error {
	if len(pending) == 0 {
		return nil
	}
	defer clear(pending)
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, strconv.FormatUint(id, 10))
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark-appended: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := tx.QueryContext(ctx, m.selectQ+strings.Join(ids, ",")+") FOR UPDATE")
	if err != nil {
		return fmt.Errorf("mark-appended: read rows: %w", err)
	}
	var match []string
	sent := 0
	for rows.Next() {
		var id uint64
		var mid sql.NullString
		var unsent bool
		if err := rows.Scan(&id, &mid, &unsent); err != nil {
			rows.Close()
			return fmt.Errorf("mark-appended: read rows: %w", err)
		}
		switch {
		case mid.String != pending[id]:
			// Another table's row with the same id.
		case unsent:
			match = append(match, strconv.FormatUint(id, 10))
		default:
			sent++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mark-appended: read rows: %w", err)
	}
	if len(match) > 0 {
		res, err := tx.ExecContext(ctx, m.markQ+strings.Join(match, ",")+")")
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
	st.marked += len(match)
	st.alreadySent += sent
	st.foreign += len(pending) - len(match) - sent
	return nil
}
