package outboxsql

import (
	"fmt"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

func TestBackfill_Rows(t *testing.T) {
	since, until := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		b            *Backfill
		since, until time.Time
		want         string
		args         []any
	}{
		{
			name: "default mapping, no window",
			b:    NewBackfill(Table{Database: "shop", Name: "outbox", Mapping: schema.DefaultMapping()}, nil),
			want: "SELECT /* binlog-outbox */ `id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, `occurred_at` FROM `shop`.`outbox` WHERE `id` > ? AND `id` <= ? ORDER BY `id` LIMIT ?",
			args: []any{uint64(3), uint64(90), 100},
		},
		{
			name:  "DATETIME window",
			b:     NewBackfill(Table{Name: "outbox", Mapping: schema.DefaultMapping()}, nil),
			since: since, until: until,
			want: "SELECT /* binlog-outbox */ `id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, `occurred_at` FROM `outbox` WHERE `id` > ? AND `id` <= ? AND `occurred_at` >= ? AND `occurred_at` < ? ORDER BY `id` LIMIT ?",
			args: []any{uint64(3), uint64(90), since, until, 100},
		},
		{
			name:  "mapped, TIMESTAMP, carried column, since only",
			b:     NewBackfill(mapped(t), []schema.ExtraColumn{{Column: "tenant_id", Field: "tenant"}}),
			since: since,
			want:  "SELECT /* binlog-outbox */ `event_id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, UNIX_TIMESTAMP(`created_at`), `tenant_id` FROM `shop`.`events` WHERE `event_id` > ? AND `event_id` <= ? AND `created_at` >= FROM_UNIXTIME(?) ORDER BY `event_id` LIMIT ?",
			args:  []any{uint64(3), uint64(90), float64(since.UnixMicro()) / 1e6, 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, args := tt.b.Rows(3, 90, tt.since, tt.until, 100)
			if got != tt.want || fmt.Sprint(args) != fmt.Sprint(tt.args) {
				t.Errorf("Rows:\n got %s %v\nwant %s %v", got, args, tt.want, tt.args)
			}
		})
	}
	if got, want := NewBackfill(mapped(t), nil).MaxID(), "SELECT /* binlog-outbox */ MAX(`event_id`) FROM `shop`.`events`"; got != want {
		t.Errorf("MaxID:\n got %s\nwant %s", got, want)
	}
}
