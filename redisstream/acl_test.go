package redisstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestSink_RefusedCommandWritesNothing: a user whose ACL lacks one command
// the append script runs gets one final error naming the command and the
// key, and the script writes nothing before it: no dedupe key (which would
// make the retry skip the entry), no group, no position, no entry.
func TestSink_RefusedCommandWritesNothing(t *testing.T) {
	r := testsvc.StartRedis(t, testsvc.RedisOptions{})
	admin := r.Client(t, r.URL(0))
	ctx := context.Background()
	tests := []struct {
		name     string
		drop     string
		position bool
		want     string
	}{
		{"append without +xadd", "+xadd", true, "may not run XADD on outbox:order: grant it +xadd"},
		{"publish without +xgroup|create", "+xgroup|create", false, "may not run XGROUP CREATE on outbox:order: grant it +xgroup|create"},
		{"append without +set", "+set", true, "may not run SET on binlog-outbox:test:position"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := "u" + string(rune('a'+i))
			r.SetUser(t, user, "pw", redisconn.ACLRules, tt.drop)
			admin.FlushDB(ctx)
			s, _ := newSink(t, "redis://"+user+":pw@"+r.Addr()+"/0", Config{Groups: []string{"g"}, Dedupe: Dedupe{Window: time.Minute}})
			batch := []outbox.Event{event(1, "order", "o-1")}
			var err error
			if tt.position {
				err = s.Append(ctx, batch, nil, []byte("p1"))
			} else {
				_, err = s.Publish(ctx, batch)
			}
			if !errors.Is(err, redisconn.ErrPermission) || !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want a final redisconn.ErrPermission saying %q", err, tt.want)
			}
			if hint := outbox.HintOf(err); !strings.Contains(hint, redisconn.ACLRules) {
				t.Errorf("hint %q, want the rules", hint)
			}
			if keys := admin.Keys(ctx, "*").Val(); len(keys) != 0 {
				t.Errorf("the refused script wrote %v, want nothing", keys)
			}
		})
	}
}
