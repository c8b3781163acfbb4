package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

const orderChangedClass = `App\Message\OrderChanged`

// TestRun_MessengerFormat relays in the symfony-messenger format in both
// modes: mapped event types become Messenger messages on the one stream, an
// unmapped one a dead letter that the metrics count.
func TestRun_MessengerFormat(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, mode := range []string{"binlog", "poll"} {
		t.Run(mode, func(t *testing.T) {
			env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
			ctx := context.Background()
			port := closedPort(t)
			p := startRelay(t, env, "--mode", mode, "--format", entry.FormatMessenger, "--messenger-class", "order.changed="+orderChangedClass,
				"--stream", "messages", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
			if mode == "binlog" {
				waitStoredPosition(t, env, posKey(env))
			}
			rec := relaytest.NewProduced()
			for i := range 3 {
				insertEvent(t, env.DB, rec, "o-1", i+1)
			}
			if _, err := env.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES ('unmapped-1', 'order', 'o-1', 'order.refunded', '{}', UTC_TIMESTAMP(6))"); err != nil {
				t.Fatal(err)
			}
			relaytest.WaitFor(t, 30*time.Second, "3 messages and 1 dead letter", func() bool {
				return env.RDB.XLen(ctx, "messages").Val() == 3 && env.RDB.XLen(ctx, redisstream.DefaultDeadLetterStream).Val() == 1
			})

			for _, m := range env.RDB.XRange(ctx, "messages", "-", "+").Val() {
				id, _ := m.Values[entry.FieldMessageID].(string)
				var env struct {
					Body    string            `json:"body"`
					Headers map[string]string `json:"headers"`
				}
				if err := json.Unmarshal([]byte(m.Values[entry.FieldMessage].(string)), &env); err != nil {
					t.Fatalf("entry %s: message is no envelope: %v", m.ID, err)
				}
				var body map[string]any
				if err := json.Unmarshal([]byte(env.Body), &body); err != nil || int(body["seq"].(float64)) != rec.Committed[id].Seq {
					t.Errorf("entry %s: body %s is not the payload of %s", m.ID, env.Body, id)
				}
				if env.Headers["type"] != orderChangedClass || env.Headers["message_id"] != id || env.Headers["Content-Type"] != "application/json" {
					t.Errorf("entry %s: headers %v", m.ID, env.Headers)
				}
				if _, ok := m.Values[entry.FieldPayload]; ok {
					t.Errorf("entry %s carries the payload twice", m.ID)
				}
			}
			dead := env.RDB.XRange(ctx, redisstream.DefaultDeadLetterStream, "-", "+").Val()[0].Values
			if dead[entry.FieldMessageID] != "unmapped-1" || !strings.Contains(dead[entry.FieldReason].(string), "--messenger-class order.refunded=") {
				t.Errorf("dead letter %v: want the unmapped event with the reason", dead)
			}

			want := fmt.Sprintf(`binlog_outbox_dead_letters_total{mode=%q} 1`, mode)
			var body string
			relaytest.WaitFor(t, 10*time.Second, "the dead letter in the metrics", func() bool {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
				if err != nil {
					return false
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(out)
				return strings.Contains(body, want)
			})
			p.Signal(t, syscall.SIGTERM)
			p.Wait(t, 15*time.Second)
		})
	}
}

func TestCheck_ReportsEntryFormat(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	messenger := []string{"--mode", "binlog", "--format", entry.FormatMessenger, "--messenger-class", `order.placed=\App\Message\OrderPlaced`, "--messenger-stamp", `App\Messenger\OutboxStamp`}
	out, code := applyAndCheck(t, testsvc.SharedMariaDB(t), messenger...)
	if code != 0 {
		t.Errorf("exit %d, want 0: a stream per aggregate type only warns", code)
	}
	for _, want := range []string{
		"WARN  " + preflight.NameFormat,
		`symfony-messenger: order.placed → App\Message\OrderPlaced; other event types → dead-letter stream; outbox fields in stamp App\Messenger\OutboxStamp`,
		"--stream outbox:{aggregate_type} names many streams",
		"fix: set a fixed --stream",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	out, _ = applyAndCheck(t, testsvc.SharedMariaDB(t), append(messenger, "--stream", "messages")...)
	if !strings.Contains(out, "PASS  "+preflight.NameFormat) {
		t.Errorf("check with a fixed stream does not pass the entry format:\n%s", out)
	}

	_, errOut, code := run(t, "--mysql-dsn", "u:p@tcp(127.0.0.1:1)/app", "check", "--format", entry.FormatMessenger)
	if code != exitUsage || !strings.Contains(errOut, "maps no event type") || !strings.Contains(errOut, "hint: map each event type") {
		t.Errorf("check --format symfony-messenger without classes: exit %d\n%s", code, errOut)
	}
}
