package main

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// groupHealthMetrics follows the series of the group billing of
// outbox:order, none of whose 10 entries it read yet: it holds back
// trimming; then its consumer c1 reads 2 entries, the first is claimed 3
// times, an undelivered entry is deleted (XINFO GROUPS lag then unknown),
// and c1 goes idle; once the group is done with every entry, it holds
// nothing back.
func groupHealthMetrics(t *testing.T, s scraper, env *relaytest.Env, group string) {
	t.Helper()
	ctx := context.Background()
	const key = "outbox:order"
	is := func(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
	s.waitValue("binlog_outbox_group_holds_back_trim"+group, "= 1: nothing read yet", is(1))
	s.waitValue("binlog_outbox_group_trim_held_age_seconds"+group, "> 0", func(v float64) bool { return v > 0 })
	res, err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{key, ">"}, Count: 2, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := env.RDB.XClaim(ctx, &redis.XClaimArgs{Stream: key, Group: "billing", Consumer: "c1", Messages: []string{res[0].Messages[0].ID}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	all := env.RDB.XRange(ctx, key, "-", "+").Val()
	env.RDB.XDel(ctx, key, all[5].ID)
	s.waitValue("binlog_outbox_group_lag"+group, "= 7 after reading 2 and deleting 1", is(7))
	s.waitValue("binlog_outbox_group_pending"+group, "= 2", is(2))
	s.waitValue("binlog_outbox_group_oldest_pending_deliveries"+group, "= 4 after 3 claims", is(4))
	s.waitValue("binlog_outbox_group_oldest_pending_age_seconds"+group, "> 0", func(v float64) bool { return v > 0 && v < 600 })
	s.waitValue("binlog_outbox_group_consumers"+group, "= 1", is(1))
	s.waitValue("binlog_outbox_group_idle_consumers"+group, "= 1 once c1 is idle", is(1))
	// The deleted event back, for the test's count of the delivered ones.
	if err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: all[5].Values}).Err(); err != nil {
		t.Fatal(err)
	}
	env.RDB.XAck(ctx, key, "billing", res[0].Messages[0].ID, res[0].Messages[1].ID)
	if err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "c1", Streams: []string{key, ">"}, Count: 100, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	env.RDB.XGroupSetID(ctx, key, "billing", "$")
	pend := env.RDB.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "billing", Start: "-", End: "+", Count: 100}).Val()
	for _, p := range pend {
		env.RDB.XAck(ctx, key, "billing", p.ID)
	}
	s.waitValue("binlog_outbox_group_holds_back_trim"+group, "= 0 once all is acknowledged", is(0))
	s.waitValue("binlog_outbox_group_lag"+group, "= 0", is(0))
}
