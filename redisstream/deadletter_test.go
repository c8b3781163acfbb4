package redisstream

import (
	"context"
	"errors"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestConfig_ValidateDeadLetterStream: a template that names the
// dead-letter stream whatever the rows hold is refused at start; one that
// names it only for some rows is not (Prepare guards those).
func TestConfig_ValidateDeadLetterStream(t *testing.T) {
	for _, tt := range []struct {
		stream     string
		partitions int
		dead       string
		refused    bool
	}{
		{"outbox:dead-letter", 1, "", true},
		{"dlq", 1, "dlq", true},
		{"orders:{partition}", 4, "orders:3", true},
		{"orders:{partition}", 4, "orders:4", false},
		{"outbox", 1, "", false},
		{entry.DefaultStream, 1, "", false},
		{"outbox:{event_type}", 1, "outbox:dead-letter", false},
	} {
		err := Config{Stream: tt.stream, Partitions: tt.partitions, DeadLetterStream: tt.dead}.Validate()
		if got := err != nil; got != tt.refused {
			t.Errorf("Validate(--stream %s --partitions %d --dead-letter-stream %q) = %v, want refused %v", tt.stream, tt.partitions, tt.dead, err, tt.refused)
		}
		if err != nil && (!errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "") {
			t.Errorf("--stream %s: %v (hint %q), want a configuration error with a hint", tt.stream, err, outbox.HintOf(err))
		}
	}
}

// TestSink_EventNamedAsDeadLetterStream: an event whose aggregate type makes
// the default template name the dead-letter stream goes there as a dead
// letter with the reason, in both modes, and its neighbours as events.
func TestSink_EventNamedAsDeadLetterStream(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	for _, binlog := range []bool{true, false} {
		s, c := newSink(t, r.NewDB(t), Config{PositionKey: "pos"})
		events := []outbox.Event{event(1, "dead-letter", "d-1"), event(2, "order", "o-1")}
		var err error
		if binlog {
			err = s.Append(ctx, events, nil, []byte("p"))
		} else {
			_, err = s.Publish(ctx, events)
		}
		if err != nil {
			t.Fatal(err)
		}
		dead := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
		if len(dead) != 1 || !strings.Contains(dead[0].Values[entry.FieldReason].(string), "is the dead-letter stream") {
			t.Errorf("binlog %v: dead letters %v, want one with the reason", binlog, dead)
		}
		if n := c.XLen(ctx, "outbox:order").Val(); n != 1 {
			t.Errorf("binlog %v: outbox:order has %d entries, want 1", binlog, n)
		}
	}
}
