package outboxsql

import (
	"testing"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

func TestReplay_Rows(t *testing.T) {
	tests := []struct {
		name string
		r    *Replay
		want string
	}{
		{
			name: "default mapping",
			r:    NewReplay(Table{Database: "shop", Name: "outbox", Mapping: schema.DefaultMapping()}, nil),
			want: "SELECT /* binlog-outbox */ `id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, `occurred_at` FROM `shop`.`outbox` WHERE `id` IN (3,7) ORDER BY 1",
		},
		{
			name: "mapped, TIMESTAMP, carried column",
			r:    NewReplay(mapped(t), []schema.ExtraColumn{{Column: "tenant_id", Field: "tenant"}}),
			want: "SELECT /* binlog-outbox */ `event_id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, UNIX_TIMESTAMP(`created_at`), `tenant_id` FROM `shop`.`events` WHERE `event_id` IN (3,7) ORDER BY 1",
		},
		{
			name: "no message_id",
			r:    NewReplay(bare(t), nil),
			want: "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, `occurred_at` FROM `outbox` WHERE `id` IN (3,7) ORDER BY 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Rows([]uint64{3, 7}); got != tt.want {
				t.Errorf("Rows:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
