package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRun_EnsureGroupSeesEveryEntry relays into fresh streams with two
// --ensure-group names, in both modes: each stream has both groups, and
// XREADGROUP of each group delivers every entry of the stream from the first.
func TestRun_EnsureGroupSeesEveryEntry(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, m := range []string{"binlog", "poll"} {
		t.Run(m, func(t *testing.T) {
			env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
			ctx := context.Background()
			rec := relaytest.NewProduced()
			p := startRelay(t, env, "--mode", m, "--ensure-group", "a", "--ensure-group", "b")
			if m == "binlog" {
				waitStoredPosition(t, env, posKey(env))
			}
			relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
			relaytest.WaitDelivered(t, env, rec, 30*time.Second)
			p.Signal(t, syscall.SIGTERM)
			if code := p.Wait(t, 15*time.Second); code != 0 {
				t.Fatalf("relay exit code %d, want 0", code)
			}
			relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})

			byStream := map[string][]string{}
			for _, e := range relaytest.ReadAll(ctx, t, env.RDB, "outbox:") {
				byStream[e.Stream] = append(byStream[e.Stream], e.ID)
			}
			if len(byStream) < 2 {
				t.Fatalf("entries in %d streams, want several", len(byStream))
			}
			for key, ids := range byStream {
				for _, g := range []string{"a", "b"} {
					res, err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: "c", Streams: []string{key, ">"}, Count: 100000, Block: -1}).Result()
					if err != nil {
						t.Fatalf("XREADGROUP %s %s: %v", key, g, err)
					}
					var got []string
					for _, m := range res[0].Messages {
						got = append(got, m.ID)
					}
					if len(got) != len(ids) || got[0] != ids[0] {
						t.Errorf("group %s of %s delivered %d entries from %v, want %d from %s", g, key, len(got), got[:min(1, len(got))], len(ids), ids[0])
					}
				}
			}
		})
	}
}

// TestRun_TrimAckedKeepsWhatAGroupNeeds runs the relay with --trim acked
// while two groups consume at different paces: the entries both acknowledged
// go, the ones group b has not read stay.
func TestRun_TrimAckedKeepsWhatAGroupNeeds(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 40, RollbackRatio: -1,
		AggregateTypes: []string{"order"}}, rec)
	p := startRelay(t, env, "--mode", "poll", "--ensure-group", "a", "--ensure-group", "b", "--trim", "acked", "--trim-interval", "100ms")
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	const key = "outbox:order"
	all := relaytest.ReadAll(ctx, t, env.RDB, key)
	if len(all) < 10 {
		t.Fatalf("%d entries, want at least 10", len(all))
	}
	consume := func(group string, n int) {
		res, err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: int64(n), Block: -1}).Result()
		if err != nil {
			t.Fatalf("XREADGROUP %s: %v", group, err)
		}
		for _, m := range res[0].Messages {
			env.RDB.XAck(ctx, key, group, m.ID)
		}
	}
	consume("a", len(all))
	half := len(all) / 2
	consume("b", half)
	relaytest.WaitFor(t, 10*time.Second, "the acknowledged entries trimmed", func() bool {
		return env.RDB.XLen(ctx, key).Val() == int64(len(all)-half)
	})
	left := relaytest.ReadAll(ctx, t, env.RDB, key)
	if left[0].ID != all[half].ID {
		t.Fatalf("oldest entry left %s, want %s, the first group b has not read", left[0].ID, all[half].ID)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code %d, want 0", code)
	}
}
