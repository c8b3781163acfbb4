package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// NaiveRelay relays up to limit rows (0: all) of table the way polling
// relays are commonly written, the baseline poll mode is measured against:
// select 100 unsent rows without locking them, append each with its own
// XADD, mark each with its own autocommit UPDATE. It returns the rows
// relayed.
func NaiveRelay(ctx context.Context, db *sql.DB, rdb *redis.Client, table, streamPrefix string, limit int) (int, error) {
	total := 0
	q := "SELECT /* binlog-outbox */ id, message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at FROM " +
		schema.QuoteIdent(table) + " WHERE sent_at IS NULL ORDER BY id LIMIT 100"
	upd := "UPDATE /* binlog-outbox */ " + schema.QuoteIdent(table) + " SET sent_at = NOW(6) WHERE id = ?"
	type row struct {
		id                uint64
		msg, typ, agg, ev string
		pay, head         []byte
		at                time.Time
	}
	for limit == 0 || total < limit {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return total, err
		}
		var batch []row
		for rows.Next() {
			var x row
			if err := rows.Scan(&x.id, &x.msg, &x.typ, &x.agg, &x.ev, &x.pay, &x.head, &x.at); err != nil {
				rows.Close()
				return total, err
			}
			batch = append(batch, x)
		}
		rows.Close()
		if len(batch) == 0 {
			return total, nil
		}
		for _, x := range batch {
			err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: streamPrefix + x.typ, Values: []any{
				entry.FieldMessageID, x.msg, entry.FieldAggregateType, x.typ, entry.FieldAggregateID, x.agg,
				entry.FieldEventType, x.ev, entry.FieldPayload, x.pay,
				entry.FieldOccurredAt, x.at.UTC().Format(entry.OccurredAtLayout),
				entry.FieldOutboxID, strconv.FormatUint(x.id, 10), entry.FieldHeaders, x.head,
			}}).Err()
			if err != nil {
				return total, err
			}
			if _, err := db.ExecContext(ctx, upd, x.id); err != nil {
				return total, err
			}
			total++
			if limit > 0 && total >= limit {
				break
			}
		}
	}
	return total, nil
}

// binlogTarget says where to read and for which rows.
type binlogTarget struct {
	host      string
	port      uint16
	user, pwd string
	database  string
	table     string
	from      binlogPos
	rows      int64
}

// ceilingSyncerConfig is a BinlogSyncer with the relay's settings that
// decodes the rows of t.table only.
func ceilingSyncerConfig(t binlogTarget, serverID uint32, flavor string) replication.BinlogSyncerConfig {
	cfg := replication.BinlogSyncerConfig{
		ServerID: serverID, Flavor: flavor, Host: t.host, Port: t.port, User: t.user, Password: t.pwd,
		DisableRetrySync: true, TimestampStringLocation: time.UTC, RenderJSONAsMySQLText: true,
		PayloadDecoderConcurrency: 1, FillZeroLogPos: flavor == mysql.MariaDBFlavor,
		Logger: discardLogger,
	}
	cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
		pos, err := ev.DecodeHeader(data)
		if err != nil {
			return err
		}
		if ev.Table == nil || string(ev.Table.Table) != t.table || string(ev.Table.Schema) != t.database {
			return nil
		}
		return ev.DecodeData(pos, data)
	}
	return cfg
}

// readDecodeCeiling is what go-mysql alone achieves: a BinlogSyncer with the
// relay's settings reads the binlog from t.from and decodes the rows of the
// table until it has seen t.rows of them. No Redis, no events built.
func readDecodeCeiling(ctx context.Context, t binlogTarget, serverID uint32, flavor string) (span, error) {
	syncer := replication.NewBinlogSyncer(ceilingSyncerConfig(t, serverID, flavor))
	defer syncer.Close()
	streamer, err := syncer.StartSync(t.from.mysql())
	if err != nil {
		return span{}, fmt.Errorf("go-mysql ceiling: start sync: %w", err)
	}
	// A context with a timer per event costs the ceiling a few per cent
	// of what it measures: a stall is noticed by a watcher instead.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var seen atomic.Int64
	go stallWatch(cctx, &seen, 30*time.Second, func() { cancel(errors.New("no binlog event for 30s")) })
	began := time.Now()
	var s span
	var n int64
	for n < t.rows {
		ev, err := streamer.GetEvent(cctx)
		seen.Add(1)
		if err != nil {
			if cause := context.Cause(cctx); cause != nil {
				err = cause
			}
			return s, fmt.Errorf("go-mysql ceiling: after %d rows: %w", n, err)
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || re.Table == nil || string(re.Table.Table) != t.table {
			continue
		}
		n += int64(len(re.Rows))
		if s.first.IsZero() {
			s.first, s.atFirst = time.Now(), n
		}
	}
	s.last, s.total = time.Now(), n
	if s.atFirst >= n {
		s.first, s.atFirst = began, 0
	}
	return s, nil
}

// selfCPU returns the CPU seconds (user+system) this process used so far;
// 0 when the system cannot say.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// stallWatch calls stop when seen has not moved for stall, and returns
// when ctx ends.
func stallWatch(ctx context.Context, seen *atomic.Int64, stall time.Duration, stop func()) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, since := seen.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n := seen.Load(); n != last {
				last, since = n, now
			} else if now.Sub(since) >= stall {
				stop()
				return
			}
		}
	}
}

// xaddCeiling is what go-redis alone achieves: the same entries (fields,
// payload size) appended with pipelined XADDs, batch entries per round trip.
func xaddCeiling(ctx context.Context, rdb *redis.Client, stream string, rows, batch, payloadBytes int) (span, error) {
	pay := []byte(payload(payloadBytes))
	at := time.Now().UTC().Format(entry.OccurredAtLayout)
	s := span{first: time.Now()}
	for done := 0; done < rows; {
		pipe := rdb.Pipeline()
		n := min(batch, rows-done)
		for j := range n {
			i := done + j
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
				entry.FieldMessageID, messageID("R", i), entry.FieldAggregateType, "order",
				entry.FieldAggregateID, "agg-" + strconv.Itoa(i%1000), entry.FieldEventType, "order.created",
				entry.FieldPayload, pay, entry.FieldOccurredAt, at,
				entry.FieldOutboxID, strconv.Itoa(i + 1), entry.FieldHeaders, "",
			}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return s, fmt.Errorf("go-redis ceiling: %w", err)
		}
		done += n
	}
	s.last, s.total = time.Now(), int64(rows)
	return s, nil
}
