package admin

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// indexTTL bounds how long the index of a verify run that died outlives it.
const indexTTL = time.Hour

// maxExactScore is the largest id a sorted-set score (a float64) holds exactly.
const maxExactScore = 1 << 53

// entryIndex is a temporary Redis sorted set of the stream entries in the
// range, scored by outbox_id. Streams are in commit order and rows in id
// order, so matching them needs an index; this one lives in Redis, which
// holds the entries anyway, so verify's own memory stays bounded by a chunk
// of ids whatever the streams' length. Each member is
// message_id NUL stream NUL entry-id.
type entryIndex struct {
	client redis.UniversalClient
	key    string
	page   int64
}

func newEntryIndex(client redis.UniversalClient, keys redisstream.Keys, page int) *entryIndex {
	var b [8]byte
	_, _ = rand.Read(b[:])
	// Under the relay's prefix, so operators know whose key it is.
	key := strings.Replace(keys.Mode, redisstream.KeyPrefix+"mode:", redisstream.KeyPrefix+"verify:", 1) + ":" + hex.EncodeToString(b[:])
	return &entryIndex{client: client, key: key, page: int64(page)}
}

// drop deletes the index; it runs after the command's context may be done.
func (x *entryIndex) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x.client.Del(ctx, x.key)
}

// add indexes the entries of stream key in the range, a page at a time, and
// returns how many it indexed.
func (x *entryIndex) add(ctx context.Context, key string, rng VerifyRange) (int, error) {
	n := 0
	// own is an error of the indexing, returned as is; an error of the
	// XRANGE gets the command's prefix.
	var own error
	err := redisadmin.RangeEntries(ctx, x.client, key, x.page, func(msgs []redis.XMessage) error {
		members := make([]redis.Z, 0, len(msgs))
		for _, msg := range msgs {
			id, ok := parseOutboxID(msg.Values[entry.FieldOutboxID])
			mid, _ := msg.Values[entry.FieldMessageID].(string)
			if !ok {
				// A delayed symfony-doctrine message that Messenger moved
				// from its delayed set keeps only the headers naming its row.
				message, _ := msg.Values[entry.FieldMessage].(string)
				var err error
				if id, mid, ok, err = entry.DoctrineRow(message); err != nil {
					own = fmt.Errorf("verify: entry %s of %s: %w", msg.ID, key, err)
					return own
				} else if !ok {
					// Not an entry of this relay: nothing to compare.
					continue
				}
			}
			occurred, _ := msg.Values[entry.FieldOccurredAt].(string)
			if !rng.entryInRange(id, occurred) {
				continue
			}
			if id > maxExactScore {
				own = errIDTooLarge
				return own
			}
			members = append(members, redis.Z{Score: float64(id), Member: mid + "\x00" + key + "\x00" + msg.ID})
		}
		if len(members) == 0 {
			return nil
		}
		pipe := x.client.Pipeline()
		pipe.ZAdd(ctx, x.key, members...)
		pipe.Expire(ctx, x.key, indexTTL)
		if _, err := pipe.Exec(ctx); err != nil {
			own = fmt.Errorf("verify: index the entries of %s in %s (ZADD, EXPIRE): %w", key, x.key, redisconn.Classify(err))
			return own
		}
		n += len(members)
		return nil
	})
	if err != nil && own == nil {
		return n, fmt.Errorf("verify: %w", err)
	}
	return n, err
}

// addAll indexes the delayed sets and then the streams of streams (with
// the dead-letter stream), and returns how many streams and entries it
// indexed. The sets come first: Messenger's consumer moves due members from
// a set to its stream, never back.
func (x *entryIndex) addAll(ctx context.Context, streams Streams, rng VerifyRange) (nStreams, nEntries int, err error) {
	var sets []string
	if streams.DelayedSets {
		if sets, err = redisadmin.ScanDelayedSets(ctx, x.client, streams.Glob); err != nil {
			return 0, 0, fmt.Errorf("verify: %w", err)
		}
	}
	for _, key := range sets {
		n, err := x.addDelayed(ctx, key, rng)
		if err != nil {
			return nStreams, nEntries, err
		}
		nEntries += n
	}
	keys, err := streams.list(ctx, x.client)
	if err != nil {
		return nStreams, nEntries, err
	}
	for _, key := range keys {
		n, err := x.add(ctx, key, rng)
		if err != nil {
			return nStreams, nEntries, err
		}
		nStreams++
		nEntries += n
	}
	return nStreams, nEntries, nil
}

// addDelayed indexes the members of a delayed set (a symfony-doctrine
// stream's messages not yet due, entry.DelayedSetSuffix) in the
// range, named key/"delayed", and returns how many it indexed. ZSCAN
// returns every member that stays in the set throughout, while Messenger's
// consumer pops due ones to the stream; verify reads the sets before the
// streams, so a member moved meanwhile is found in its stream.
func (x *entryIndex) addDelayed(ctx context.Context, key string, rng VerifyRange) (int, error) {
	n := 0
	iter := x.client.ZScan(ctx, key, 0, "", x.page).Iterator()
	var members []redis.Z
	for iter.Next(ctx) {
		member := iter.Val()
		if !iter.Next(ctx) { // the score
			break
		}
		id, mid, ok, err := entry.DoctrineRow(member)
		if err != nil {
			return n, fmt.Errorf("verify: a member of the delayed set %s: %w", key, err)
		}
		if !ok || !rng.entryInRange(id, "") {
			continue
		}
		if id > maxExactScore {
			return n, errIDTooLarge
		}
		members = append(members, redis.Z{Score: float64(id), Member: mid + "\x00" + key + "\x00delayed"})
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("verify: read the delayed set %s (ZSCAN): %w", key, redisconn.Classify(err))
	}
	for chunk := range slices.Chunk(members, max(int(x.page), 1)) {
		pipe := x.client.Pipeline()
		pipe.ZAdd(ctx, x.key, chunk...)
		pipe.Expire(ctx, x.key, indexTTL)
		if _, err := pipe.Exec(ctx); err != nil {
			return n, fmt.Errorf("verify: index the members of %s in %s (ZADD, EXPIRE): %w", key, x.key, redisconn.Classify(err))
		}
		n += len(chunk)
	}
	return n, nil
}

// indexed is one entry of the index.
type indexed struct {
	id              uint64
	messageID, name string // name is stream/entry-id
}

// between calls fn with the indexed entries whose outbox_id is in (lo, hi],
// a page at a time; hi math.MaxUint64 is unbounded.
func (x *entryIndex) between(ctx context.Context, lo, hi uint64, fn func(indexed) error) error {
	max := "+inf"
	if hi != math.MaxUint64 {
		max = strconv.FormatUint(hi, 10)
	}
	for off := int64(0); ; {
		zs, err := x.client.ZRangeByScoreWithScores(ctx, x.key, &redis.ZRangeBy{
			Min: "(" + strconv.FormatUint(lo, 10), Max: max, Offset: off, Count: x.page,
		}).Result()
		if err != nil {
			return fmt.Errorf("verify: read the index %s (ZRANGEBYSCORE): %w", x.key, redisconn.Classify(err))
		}
		for _, z := range zs {
			m, _ := z.Member.(string)
			parts := strings.Split(m, "\x00")
			n := len(parts)
			e := indexed{id: uint64(z.Score)}
			if n >= 3 {
				e.messageID = strings.Join(parts[:n-2], "\x00")
				e.name = parts[n-2] + "/" + parts[n-1]
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if int64(len(zs)) < x.page {
			return nil
		}
		off += int64(len(zs))
	}
}

// verifier walks the rows in id order, a chunk at a time, and matches each
// chunk with the indexed entries of its id range.
type verifier struct {
	db         *sql.DB
	rng        VerifyRange
	chunk      int
	res        *VerifyReport
	poll       bool
	deleteMode bool
	// minID is the table's lowest id in the snapshot; entries below it are
	// of rows deleted (cleaned up), not foreign.
	minID   uint64
	hasRows bool
	q       *outboxsql.Verify
	// idOnly matches rows and entries by outbox id alone: a table without
	// a message_id column has no message id of its own to compare, only
	// what the format made of the id (the row's id as text, or
	// "messenger_messages:<id>" of symfony-doctrine).
	idOnly bool
	// onMissing, when set, gets every missing row (repair appends them).
	onMissing func(id uint64, messageID string)
}

// newVerifier is the verifier of table's rows that puts what it finds in res.
func newVerifier(db *sql.DB, table outboxsql.Table, chunk int, poll bool, res *VerifyReport) *verifier {
	return &verifier{db: db, chunk: chunk, res: res, poll: poll, q: outboxsql.NewVerify(table), idOnly: !table.Mapping.Has(schema.ColMessageID)}
}

// verifyRow is one row of a chunk with the entries naming it.
type verifyRow struct {
	id        uint64
	messageID string
	unsent    bool
	entries   []string
}

// walk compares every chunk of rows in the snapshot conn shows, then the
// entries above the last row.
func (v *verifier) walk(ctx context.Context, conn *sql.Conn, idx *entryIndex) error {
	var minID sql.NullInt64
	if err := conn.QueryRowContext(ctx, v.q.MinID()).Scan(&minID); err != nil {
		return fmt.Errorf("verify: read the lowest id: %w", err)
	}
	v.minID, v.hasRows = uint64(minID.Int64), minID.Valid
	var last uint64
	if v.rng.FromID > 0 {
		last = v.rng.FromID - 1
	}
	for {
		rows, err := v.readChunk(ctx, conn, last)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			break
		}
		hi := rows[len(rows)-1].id
		if err := v.compare(ctx, idx, rows, last, hi); err != nil {
			return err
		}
		last = hi
		if len(rows) < v.chunk {
			break
		}
	}
	return v.compare(ctx, idx, nil, last, math.MaxUint64)
}

func (v *verifier) readChunk(ctx context.Context, conn *sql.Conn, after uint64) ([]verifyRow, error) {
	query, args := v.q.Rows(after, v.rng.Since, v.chunk)
	q, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("verify: read rows: %w", err)
	}
	defer q.Close()
	var rows []verifyRow
	for q.Next() {
		var r verifyRow
		var mid sql.NullString
		if err := q.Scan(&r.id, &mid, &r.unsent); err != nil {
			return nil, fmt.Errorf("verify: read rows: %w", err)
		}
		r.messageID = mid.String
		rows = append(rows, r)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("verify: read rows: %w", err)
	}
	return rows, nil
}

// compare matches rows (ids in (lo, hi], in id order) with the entries of
// that id range and counts what it finds.
func (v *verifier) compare(ctx context.Context, idx *entryIndex, rows []verifyRow, lo, hi uint64) error {
	r := v.res
	byID := make(map[uint64]int, len(rows))
	for i := range rows {
		byID[rows[i].id] = i
	}
	var cand []indexed
	err := idx.between(ctx, lo, hi, func(e indexed) error {
		if i, ok := byID[e.id]; ok && (v.idOnly || rows[i].messageID == e.messageID) {
			rows[i].entries = append(rows[i].entries, e.name)
			return nil
		}
		cand = append(cand, e)
		if len(cand) >= v.chunk {
			err := v.recheck(ctx, cand)
			cand = cand[:0]
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := v.recheck(ctx, cand); err != nil {
		return err
	}
	for _, row := range rows {
		r.Rows++
		switch n := len(row.entries); {
		case n == 1:
			r.Matched++
		case n > 1:
			r.Duplicated++
			if len(r.Examples.Duplicated) < verifyExamples {
				r.Examples.Duplicated = append(r.Examples.Duplicated, VerifyExample{OutboxID: row.id, MessageID: row.messageID, Entries: row.entries})
			}
		case v.poll && row.unsent:
			r.Pending++
		case !v.poll && !r.CaughtUp:
			r.NotYetRelayed++
		default:
			r.Missing++
			if v.onMissing != nil {
				v.onMissing(row.id, row.messageID)
			}
			if len(r.Examples.Missing) < verifyExamples {
				r.Examples.Missing = append(r.Examples.Missing, VerifyExample{OutboxID: row.id, MessageID: row.messageID})
			}
		}
	}
	return nil
}

// recheck reads the rows of entries that matched no row of the snapshot, as
// they are now: a row committed after the snapshot began has its entry
// already, and is no phantom.
func (v *verifier) recheck(ctx context.Context, cand []indexed) error {
	if len(cand) == 0 {
		return nil
	}
	r := v.res
	ids := make([]uint64, 0, len(cand))
	for _, e := range cand {
		ids = append(ids, e.id)
	}
	q, err := v.db.QueryContext(ctx, v.q.Recheck(ids))
	if err != nil {
		return fmt.Errorf("verify: read rows: %w", err)
	}
	defer q.Close()
	now := make(map[uint64]string, len(cand))
	for q.Next() {
		var id uint64
		var mid sql.NullString
		if err := q.Scan(&id, &mid); err != nil {
			return fmt.Errorf("verify: read rows: %w", err)
		}
		now[id] = mid.String
	}
	if err := q.Err(); err != nil {
		return fmt.Errorf("verify: read rows: %w", err)
	}
	for _, e := range cand {
		mid, exists := now[e.id]
		switch {
		case exists && (v.idOnly || mid == e.messageID):
			r.Later++
		case !exists && (v.poll && v.deleteMode || v.hasRows && e.id < v.minID):
			// Poll mode --on-sent delete deletes what it relayed, and a
			// clean-up job deletes the oldest rows: their entries cannot
			// be told from phantoms, so they are not called foreign.
			r.Deleted++
		default:
			r.Foreign++
			if len(r.Examples.Foreign) < verifyExamples {
				r.Examples.Foreign = append(r.Examples.Foreign, VerifyExample{OutboxID: e.id, MessageID: e.messageID, Entries: []string{e.name}})
			}
		}
	}
	return nil
}
