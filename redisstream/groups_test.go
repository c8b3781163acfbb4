package redisstream

import (
	"context"
	"sort"
	"testing"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// groupNames returns the consumer groups of a stream, sorted.
func groupNames(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	gs, err := c.XInfoGroups(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("XINFO GROUPS %s: %v", key, err)
	}
	var names []string
	for _, g := range gs {
		names = append(names, g.Name)
	}
	sort.Strings(names)
	return names
}

// readGroup reads every entry a group has not been delivered yet.
func readGroup(t *testing.T, c *redis.Client, key, group string) []string {
	t.Helper()
	res, err := c.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{key, ">"}, Count: 1000, Block: -1}).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("XREADGROUP %s %s: %v", key, group, err)
	}
	var ids []string
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.Values[entry.FieldMessageID].(string))
		}
	}
	return ids
}

func TestSink_EnsureGroupsBeforeFirstEntry(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	for _, mode := range []string{"append", "publish"} {
		t.Run(mode, func(t *testing.T) {
			s, c := newSink(t, r.NewDB(t), Config{Groups: []string{"a", "b", "a"}})
			// A stream that exists without the groups gets them from its
			// first entry as well.
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:invoice", Values: []string{entry.FieldMessageID, "before"}}).Err(); err != nil {
				t.Fatal(err)
			}
			batches := [][]outbox.Event{
				{event(1, "order", "o-1"), event(2, "invoice", "i-1"), event(3, "order", "o-2")},
				{event(4, "order", "o-1"), event(5, "invoice", "i-1")},
			}
			batches[1][1].Invalid = "payload is not JSON"
			var pos []byte
			for i, b := range batches {
				var err error
				if mode == "append" {
					next := []byte{byte('1' + i)}
					err = s.Append(ctx, b, pos, next)
					pos = next
				} else {
					_, err = s.Publish(ctx, b)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want := map[string][]string{
				"outbox:order":   {event(1, "", "").MessageID, event(3, "", "").MessageID, event(4, "", "").MessageID},
				"outbox:invoice": {"before", event(2, "", "").MessageID},
			}
			for key, ids := range want {
				if got := groupNames(t, c, key); len(got) != 2 || got[0] != "a" || got[1] != "b" {
					t.Fatalf("%s groups = %v, want [a b]", key, got)
				}
				for _, g := range []string{"a", "b"} {
					if got := readGroup(t, c, key, g); len(got) != len(ids) || got[0] != ids[0] || got[len(got)-1] != ids[len(ids)-1] {
						t.Errorf("XREADGROUP %s %s = %v, want %v", key, g, got, ids)
					}
				}
			}
			if n, _ := c.Exists(ctx, DefaultDeadLetterStream).Result(); n != 1 {
				t.Fatalf("dead-letter stream missing")
			}
			if got := groupNames(t, c, DefaultDeadLetterStream); len(got) != 0 {
				t.Errorf("dead-letter stream groups = %v, want none", got)
			}
		})
	}
}
