package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRedisACL: a Redis user with exactly the documented rules
// (redisconn.ACLRules, which docs/redis-tls-acl.md shows) runs check, run in
// both modes with --ensure-group, --dedupe-window and --trim acked, status,
// verify, mark-appended, position show and dead-letters list, replay and
// purge. A user lacking a command or a key
// pattern makes run stop with one error that names the command, the key and
// the rules.
func TestRedisACL(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	doc, err := os.ReadFile("../../docs/redis-tls-acl.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), redisconn.ACLRules) {
		t.Errorf("docs/redis-tls-acl.md does not show the rules the relay is tested with:\n%s", redisconn.ACLRules)
	}
	rs := testsvc.StartRedis(t, testsvc.RedisOptions{})
	srv := testsvc.SharedMariaDB(t)
	ctx := context.Background()
	const pw = "acl-secret-9z"
	newEnv := func(t *testing.T, user string, drop ...string) (*relaytest.Env, []string) {
		env := relaytest.NewEnv(t, srv, rs)
		rs.SetUser(t, user, pw, redisconn.ACLRules, drop...)
		// The relay's commands go through the user; env.RDB stays the
		// test's own, unrestricted.
		env.RedisURL = userURL(env, user+":"+pw)
		return env, []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	}
	commands := func(t *testing.T, global []string, cmds ...[]string) {
		t.Helper()
		for _, args := range cmds {
			out, errOut, code := run(t, append(global, args...)...)
			if code != 0 || strings.Contains(out+errOut, "NOPERM") {
				t.Errorf("%v as the ACL user: exit %d, want 0 without a refusal\n%s%s", args, code, out, errOut)
			}
			if strings.Contains(out+errOut, pw) {
				t.Errorf("%v prints the password:\n%s%s", args, out, errOut)
			}
		}
	}

	t.Run("binlog mode, status, verify, mark-appended, position", func(t *testing.T) {
		env, global := newEnv(t, "relay-binlog")
		commands(t, global, []string{"check", "--mode", "binlog"})
		p := startRelay(t, env, "--mode", "binlog", "--ensure-group", "g")
		waitStoredPosition(t, env, posKey(env))
		rec := relaytest.NewProduced()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		// A consumer of g with an entry pending: status reads its
		// consumers, its oldest pending entry and counts the rest.
		for _, key := range []string{"outbox:order", "outbox:invoice"} {
			if env.RDB.XLen(ctx, key).Val() > 1 {
				if err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: 1, Block: -1}).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		commands(t, global, []string{"status"}, []string{"verify"})
		stopRelay(t, p)
		commands(t, global, []string{"position", "show"}, []string{"mark-appended"})

		// A dead letter of a row the table holds (its cause since fixed):
		// list, replay (which deletes it from the dead-letter stream) and
		// purge run as the ACL user too.
		var id, mid, aggType, aggID, evType string
		if err := env.DB.QueryRow("SELECT id, message_id, aggregate_type, aggregate_id, event_type FROM "+env.Table+" ORDER BY id LIMIT 1").Scan(&id, &mid, &aggType, &aggID, &evType); err != nil {
			t.Fatal(err)
		}
		env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: redisstream.DefaultDeadLetterStream, Values: []any{entry.FieldMessageID, mid, entry.FieldAggregateType, aggType,
			entry.FieldAggregateID, aggID, entry.FieldEventType, evType, entry.FieldOutboxID, id, entry.FieldReason, "fixed since"}})
		commands(t, global, []string{"dead-letters", "list"}, []string{"dead-letters", "replay", "--all"}, []string{"dead-letters", "purge", "--older-than", "1h"})
		if n := env.RDB.XLen(ctx, redisstream.DefaultDeadLetterStream).Val(); n != 0 {
			t.Errorf("%d dead letters after the ACL user's replay, want none", n)
		}
		// Nothing was refused on the way but check's CONFIG GET (which the
		// rules leave out: check then says the persistence is unknown),
		// not even what a client sends on its own when it connects
		// (go-redis's CLIENT SETINFO, which Redis 7.2 and later know).
		aclLog := redis.NewSliceCmd(ctx, "ACL", "LOG")
		if err := rs.Client(t, rs.URL(0)).Process(ctx, aclLog); err != nil {
			t.Fatal(err)
		}
		for _, e := range aclLog.Val() {
			if m, ok := e.(map[any]any); !ok || m["object"] != "config|get" {
				t.Errorf("Redis refused the ACL user: %v", e)
			}
		}
	})

	t.Run("poll mode with dedupe and trimming", func(t *testing.T) {
		env, _ := newEnv(t, "relay-poll")
		rec := relaytest.NewProduced()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 20, RollbackRatio: -1,
			AggregateTypes: []string{"order"}}, rec)
		p := startRelay(t, env, "--mode", "poll", "--ensure-group", "g", "--dedupe-window", "1m", "--trim", "acked", "--trim-interval", "100ms")
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		const key = "outbox:order"
		res, err := env.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: 1000, Block: -1}).Result()
		if err != nil {
			t.Fatalf("XREADGROUP: %v", err)
		}
		for _, m := range res[0].Messages {
			env.RDB.XAck(ctx, key, "g", m.ID)
		}
		relaytest.WaitFor(t, 15*time.Second, "the acknowledged entries trimmed by the ACL user", func() bool {
			return env.RDB.XLen(ctx, key).Val() == 0
		})
		stopRelay(t, p)
		if out := p.Out.String(); strings.Contains(out, "NOPERM") || strings.Contains(out, "trimmer stopped") {
			t.Errorf("the relay met a refusal:\n%s", out)
		}
	})

	tests := []struct {
		name string
		drop []string
		want []string
	}{
		{"without +xadd", []string{"+xadd"}, []string{"may not run XADD on outbox:order", "+xadd", "ACL SETUSER"}},
		{"without a key pattern for the streams", []string{"~outbox:*"}, []string{"the script's keys: outbox:order", "key patterns", "ACL SETUSER"}},
		{"without +evalsha", []string{"+evalsha"}, []string{"'evalsha'", "ACL SETUSER"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, global := newEnv(t, "relay-missing-"+string(rune('a'+i)), tt.drop...)
			insertEvent(t, env.DB, relaytest.NewProduced(), "a", 1)
			out, code := runProcess(t, append(global, "run", "--mode", "poll")...)
			if code == 0 || strings.Count("\n"+out, "\nerror: ") != 1 {
				t.Fatalf("run: exit %d, want one error\n%s", code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("run does not say %q:\n%s", w, out)
				}
			}
			// Redis's own words for a key it refuses: "this user has no
			// permissions to access one of the keys used as arguments"
			// before Redis 8 and Valkey 8, "No permissions to access a key"
			// since.
			if tt.drop[0] == "~outbox:*" && !strings.Contains(strings.ToLower(out), "no permissions to access") {
				t.Errorf("run does not pass on Redis's refusal of the key:\n%s", out)
			}
			if strings.Contains(out, pw) {
				t.Errorf("run prints the password:\n%s", out)
			}
			if n := env.RDB.XLen(ctx, "outbox:order").Val(); n != 0 {
				t.Errorf("%d entries appended by a refused run, want none", n)
			}
		})
	}
}
