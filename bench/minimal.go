package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
)

// minimalRelay is the ceiling of the live workloads: go-mysql decoding the
// rows of the table and pipelining one XADD per row into the same Redis the
// moment the row is decoded, with the same fields as the relay's entries. It
// keeps no transactions, no batches and no position: it is what the relay
// would cost with nothing of its own.
type minimalRelay struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startMinimalRelay reads the binlog from t.from and appends every row of
// t.table it decodes to stream, until stop.
func startMinimalRelay(ctx context.Context, t binlogTarget, serverID uint32, flavor string, rdb *redis.Client, stream string) (*minimalRelay, error) {
	syncer := replication.NewBinlogSyncer(ceilingSyncerConfig(t, serverID, flavor))
	streamer, err := syncer.StartSync(t.from.mysql())
	if err != nil {
		syncer.Close()
		return nil, fmt.Errorf("minimal relay: start sync: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &minimalRelay{cancel: cancel, done: make(chan error, 1)}
	entries := make(chan []any, 4096)
	sent := make(chan error, 1)
	go func() { sent <- pipelineEntries(ctx, rdb, stream, entries) }()
	go func() {
		defer syncer.Close()
		err := decodeEntries(ctx, streamer, t.table, entries)
		close(entries)
		if serr := <-sent; err == nil || errors.Is(err, context.Canceled) {
			err = serr
		}
		m.done <- err
	}()
	return m, nil
}

// stop ends the minimal relay and returns what made it fail, if anything.
// Calls after the first return the same.
func (m *minimalRelay) stop() error {
	m.once.Do(func() {
		m.cancel()
		if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
			m.err = err
		}
	})
	return m.err
}

// decodeEntries turns each inserted row of table into the field/value
// arguments of its XADD, by the column names of the table map.
func decodeEntries(ctx context.Context, streamer *replication.BinlogStreamer, table string, out chan<- []any) error {
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return err
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || re.Table == nil || string(re.Table.Table) != table || re.Type() != replication.EnumRowsEventTypeInsert {
			continue
		}
		col := map[string]int{}
		for i, n := range re.Table.ColumnNameString() {
			col[strings.ToLower(n)] = i
		}
		for _, row := range re.Rows {
			// Copies: decoded values alias the packet buffer, which the
			// syncer reuses while the pipeline still holds them.
			v := func(name string) any {
				i, ok := col[name]
				if !ok {
					return ""
				}
				switch x := row[i].(type) {
				case string:
					return strings.Clone(x)
				case []byte:
					return bytes.Clone(x)
				case nil:
					return ""
				default:
					return x
				}
			}
			id, _ := v("id").(int64)
			entry := []any{
				entry.FieldMessageID, v("message_id"), entry.FieldAggregateType, v("aggregate_type"),
				entry.FieldAggregateID, v("aggregate_id"), entry.FieldEventType, v("event_type"),
				entry.FieldPayload, v("payload"), entry.FieldOccurredAt, v("occurred_at"),
				entry.FieldOutboxID, strconv.FormatInt(id, 10), entry.FieldHeaders, v("headers"),
			}
			select {
			case out <- entry:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// pipelineEntries appends what decodeEntries produced: it sends whatever is
// waiting in one pipeline the moment the previous one is answered, so an
// entry waits at most for the round trip before it.
func pipelineEntries(ctx context.Context, rdb *redis.Client, stream string, in <-chan []any) error {
	for {
		vals, ok := <-in
		if !ok {
			return nil
		}
		pipe := rdb.Pipeline()
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: vals})
	more:
		for pipe.Len() < DefaultBatch {
			select {
			case vals, ok := <-in:
				if !ok {
					break more
				}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: vals})
			default:
				break more
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("minimal relay: %w", err)
		}
	}
}
