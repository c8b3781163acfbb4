package redisadmin

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
)

func TestParseDeadLetter(t *testing.T) {
	tests := []struct {
		name   string
		in     redis.XMessage
		wantID uint64
		wantOK bool
		want   DeadLetter
	}{
		{"every field", redis.XMessage{ID: "1700000000123-0", Values: map[string]any{
			entry.FieldOutboxID: "7", entry.FieldMessageID: "m-7", entry.FieldReason: "payload is NULL",
			entry.FieldTargetStream: "outbox:order",
		}}, 7, true, DeadLetter{MessageID: "m-7", Reason: "payload is NULL", TargetStream: "outbox:order", Time: time.UnixMilli(1700000000123).UTC()}},
		{"an id that is no unsigned integer", redis.XMessage{ID: "5-1", Values: map[string]any{entry.FieldOutboxID: "-3"}}, 0, false, DeadLetter{Time: time.UnixMilli(5).UTC()}},
		{"written before target_stream", redis.XMessage{ID: "9-0", Values: map[string]any{entry.FieldOutboxID: "12"}}, 12, true, DeadLetter{Time: time.UnixMilli(9).UTC()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ParseDeadLetter(tt.in)
			if d.ID != tt.in.ID || d.OutboxID != tt.wantID || d.HasOutboxID != tt.wantOK {
				t.Errorf("id %s, outbox id %d (%v); want %s, %d (%v)", d.ID, d.OutboxID, d.HasOutboxID, tt.in.ID, tt.wantID, tt.wantOK)
			}
			if d.MessageID != tt.want.MessageID || d.Reason != tt.want.Reason || d.TargetStream != tt.want.TargetStream || !d.Time.Equal(tt.want.Time) {
				t.Errorf("got %+v, want %+v", d, tt.want)
			}
		})
	}
}
