package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// The outbox tables of the Laravel articles this project grew from, which the
// relay must take with no more than the --column flags that rename.
const (
	// seedTableTyped has `type` for event_type and no aggregate_type or
	// headers column.
	seedTableTyped = "CREATE TABLE outbox (" +
		"id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
		"message_id CHAR(36) NOT NULL UNIQUE, " +
		"aggregate_id VARCHAR(255) NOT NULL, " +
		"type VARCHAR(255) NOT NULL, " +
		"payload JSON NOT NULL, " +
		"occurred_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), " +
		"sent_at DATETIME(6) NULL, " +
		"KEY (sent_at, id)) ENGINE=InnoDB"
	// seedTableMessages is outbox_messages: no message_id, and Laravel's
	// timestamps() (created_at, updated_at) instead of occurred_at.
	seedTableMessages = "CREATE TABLE outbox_messages (" +
		"id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
		"aggregate_type VARCHAR(255) NOT NULL, " +
		"aggregate_id VARCHAR(255) NOT NULL, " +
		"event_type VARCHAR(255) NOT NULL, " +
		"payload JSON NOT NULL, " +
		"headers JSON NULL, " +
		"sent_at TIMESTAMP NULL, " +
		"created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP, " +
		"updated_at TIMESTAMP NULL, " +
		"KEY (sent_at, id)) ENGINE=InnoDB"
)

type seedTable struct {
	name, table, ddl, insert string
	args                     []string
	stream                   string   // where the entries go
	lacks                    []string // fields the entries must not have
	checkSays                string   // what check says the entries lack
}

var seedTables = []seedTable{
	{
		name: "type, no aggregate_type", table: "outbox", ddl: seedTableTyped,
		insert: "INSERT INTO outbox (message_id, aggregate_id, type, payload) VALUES (UUID(), ?, 'order.paid', '{\"n\":1}')",
		args:   []string{"--column", "event_type=type"},
		stream: "outbox", lacks: []string{"aggregate_type", "schema_version", "headers"},
		checkSays: "entries have no aggregate_type, schema_version or headers field",
	},
	{
		name: "outbox_messages", table: "outbox_messages", ddl: seedTableMessages,
		insert:    "INSERT INTO outbox_messages (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', ?, 'order.paid', '{\"n\":1}')",
		args:      []string{"--table", "outbox_messages", "--column", "occurred_at=created_at"},
		stream:    "outbox:order",
		checkSays: "message_id is the row id",
	},
}

// newSeedEnv replaces the default outbox table of a fresh environment by tt's.
func newSeedEnv(t *testing.T, tt seedTable) *relaytest.Env {
	t.Helper()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	if _, err := env.DB.Exec("DROP TABLE outbox"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.DB.Exec(tt.ddl); err != nil {
		t.Fatal(err)
	}
	env.Table = tt.table
	return env
}

func TestCheck_SeedTables(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, tt := range seedTables {
		t.Run(tt.name, func(t *testing.T) {
			env := newSeedEnv(t, tt)
			global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
			out, errOut, code := run(t, append(append(global, tt.args...), "check")...)
			if code != 0 || !strings.Contains(out, "binlog mode: ready") || !strings.Contains(out, "poll mode: ready") {
				t.Fatalf("check %v: exit %d, want both modes ready\n%s%s", tt.args, code, out, errOut)
			}
			if !strings.Contains(out, tt.checkSays) {
				t.Errorf("check does not say %q:\n%s", tt.checkSays, out)
			}
			// A column the user names explicitly must exist.
			out, _, code = run(t, append(append(global, tt.args...), "--column", "headers=hdrs", "check")...)
			if code == 0 || !strings.Contains(out, "FAIL  outbox table") || !strings.Contains(out, "hdrs") {
				t.Errorf("check with --column headers=hdrs: exit %d, want the missing column to fail\n%s", code, out)
			}
		})
	}
}

func TestRun_SeedTables(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, tt := range seedTables {
		for _, m := range []string{mode.Binlog, mode.Poll} {
			t.Run(tt.name+"/"+m, func(t *testing.T) {
				env := newSeedEnv(t, tt)
				ctx := context.Background()
				p := startRelay(t, env, append([]string{"--mode", m}, tt.args...)...)
				if m == mode.Binlog {
					waitStoredPosition(t, env, "binlog-outbox:position:"+env.Database+"."+tt.table)
				}
				const n = 5
				tx, err := env.DB.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if _, err := tx.Exec(tt.insert, "agg-"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				relaytest.WaitFor(t, 30*time.Second, "the entries", func() bool {
					return env.RDB.XLen(ctx, tt.stream).Val() >= n || p.Exited()
				})
				if p.Exited() {
					t.Fatalf("relay exited:\n%s", p.Out.String())
				}
				msgs, err := env.RDB.XRange(ctx, tt.stream, "-", "+").Result()
				if err != nil || len(msgs) != n {
					t.Fatalf("%s holds %d entries (%v), want %d", tt.stream, len(msgs), err, n)
				}
				for i, m := range msgs {
					if m.Values["aggregate_id"] != "agg-"+strconv.Itoa(i) || m.Values["event_type"] != "order.paid" || m.Values["message_id"] == "" {
						t.Errorf("entry %d = %v, want aggregate_id agg-%d, event_type order.paid and a message_id", i, m.Values, i)
					}
					if _, err := time.Parse(time.RFC3339Nano, m.Values["occurred_at"].(string)); err != nil {
						t.Errorf("entry %d: occurred_at %q: %v", i, m.Values["occurred_at"], err)
					}
					for _, f := range tt.lacks {
						if _, ok := m.Values[f]; ok {
							t.Errorf("entry %d has field %s, which the table has no column for: %v", i, f, m.Values)
						}
					}
					if tt.table == "outbox_messages" && m.Values["message_id"] != m.Values["outbox_id"] {
						t.Errorf("entry %d: message_id %v, want the row id %v", i, m.Values["message_id"], m.Values["outbox_id"])
					}
				}
				// Written before the first append; its copy into p.Out may lag.
				if !p.Said("outbox table has no column for", 10*time.Second) {
					t.Errorf("the start-up log does not say which columns the table lacks:\n%s", relaytest.TailLines(p.Out.String(), 20))
				}
				if m == mode.Binlog {
					// The switch to poll mode takes these tables too: it
					// finds the rows of every entry the relay appended.
					args := append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}, tt.args...)
					out, errOut, code := run(t, append(args, "mark-appended")...)
					if code != 0 {
						t.Fatalf("mark-appended: exit %d\n%s%s", code, out, errOut)
					}
					var unsent int
					if err := env.DB.QueryRow("SELECT COUNT(*) FROM `" + tt.table + "` WHERE sent_at IS NULL").Scan(&unsent); err != nil || unsent != 0 {
						t.Errorf("after mark-appended %d rows unsent (%v), want 0\n%s", unsent, err, out)
					}
				}
			})
		}
	}
}
