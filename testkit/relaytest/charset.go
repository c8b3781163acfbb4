package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

func (s *suite) textCharsets(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	TextCharsets(t, env.Env, s.start)
}

// charsetText differs between ISO 8859-1 and MySQL's latin1 (Windows-1252):
// € and ™ are bytes 0x80 and 0x99 there, C1 controls in ISO 8859-1.
const charsetText = "café € ™"

// charsetRow is a row TextCharsets writes into one of its tables, and the
// fields its entry must carry, byte for byte.
type charsetRow struct {
	db                  *sql.DB
	messageID           string
	aggregateID, evType string
	payload, headers    any
	note                string
	want                map[string]string
	// hexColumn's stored bytes start with wantHex: the table holds the
	// bytes of its character set, not UTF-8.
	hexColumn, wantHex string
}

// TextCharsets relays rows of three tables of other character sets than
// utf8mb4 through start, in databases of env's server, and checks that each
// entry carries UTF-8 equal to the text written: a table converted to
// latin1 (a TEXT payload, as older PHP schemas have, and every other text
// column the relay carries: aggregate id, event type, headers, an extra
// column), a utf8mb4 table with one latin1 column, and a payload in a
// VARBINARY column, whose bytes (latin1's, here) pass untouched. Poll mode
// reads through a utf8mb4 connection and binlog mode converts the stored
// bytes: both must give these same entries.
func TextCharsets(t *testing.T, env *Env, start StartFunc) {
	t.Helper()
	ctx := context.Background()
	srv := env.MariaDB
	// The tables live in databases of their own, each relayed by a relay
	// of its own into env's Redis: one stream per aggregate type.
	latin1 := newTableEnv(t, srv)
	mixed := newTableEnv(t, srv)
	binary := newTableEnv(t, srv)
	for _, e := range []*Env{latin1, mixed, binary} {
		e.Redis, e.RedisURL, e.RDB, e.Cluster = env.Redis, env.RedisURL, env.RDB, env.Cluster
		e.Topology, e.Prefix = env.Topology, env.Prefix
		e.MySQLAddr = env.MySQLAddr
	}
	insertRaw(t, latin1.DB, "ALTER TABLE `outbox` CONVERT TO CHARACTER SET latin1, MODIFY payload TEXT NOT NULL, ADD note VARCHAR(64) NOT NULL DEFAULT ''")
	latin1.Extra = []schema.ExtraColumn{{Column: "note", Field: "note"}}
	insertRaw(t, mixed.DB, "ALTER TABLE `outbox` MODIFY aggregate_id VARCHAR(255) CHARACTER SET latin1 NOT NULL")
	insertRaw(t, binary.DB, "ALTER TABLE `outbox` MODIFY payload VARBINARY(1000) NOT NULL")

	rows := []charsetRow{
		{db: latin1.DB, messageID: "cs-latin1", aggregateID: "Zürich-€", evType: "prix™", note: charsetText,
			payload: `{"name":"` + charsetText + `"}`, headers: `{"mark":"™"}`, hexColumn: "payload", wantHex: "7B226E616D65223A22636166E920802099227D",
			want: map[string]string{"aggregate_id": "Zürich-€", "event_type": "prix™", "payload": `{"name":"` + charsetText + `"}`,
				"headers": `{"mark":"™"}`, "note": charsetText}},
		{db: mixed.DB, messageID: "cs-mixed", aggregateID: charsetText, evType: "naïve-utf8mb4", payload: `{"also":"` + charsetText + `"}`,
			hexColumn: "aggregate_id", wantHex: "636166E920802099",
			want: map[string]string{"aggregate_id": charsetText, "event_type": "naïve-utf8mb4", "payload": `{"also":"` + charsetText + `"}`}},
		{db: binary.DB, messageID: "cs-binary", aggregateID: "bin", evType: "raw", payload: []byte("caf\xe9 \x80 \x99"), hexColumn: "payload", wantHex: "636166E920802099",
			want: map[string]string{"aggregate_id": "bin", "event_type": "raw", "payload": "caf\xe9 \x80 \x99"}},
	}
	for _, e := range []*Env{latin1, mixed, binary} {
		stop := start(t, e)
		defer func() {
			if err := stop(); err != nil {
				t.Errorf("relay returned %v after a clean stop", err)
			}
		}()
	}
	for _, r := range rows {
		q := "INSERT INTO `outbox` (message_id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES (?, 'charset', ?, ?, ?, ?)"
		args := []any{r.messageID, r.aggregateID, r.evType, r.payload, r.headers}
		if r.note != "" {
			q = "INSERT INTO `outbox` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, note) VALUES (?, 'charset', ?, ?, ?, ?, ?)"
			args = append(args, r.note)
		}
		insertRaw(t, r.db, q, args...)
		var stored string
		if err := r.db.QueryRow("SELECT HEX("+r.hexColumn+") FROM `outbox` WHERE message_id = ?", r.messageID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if len(stored) < len(r.wantHex) || stored[:len(r.wantHex)] != r.wantHex {
			t.Fatalf("%s: the table stores the payload as %s, want %s…: the test does not test what it means to", r.messageID, stored, r.wantHex)
		}
	}
	stream := env.Prefix + "charset"
	WaitFor(t, deliveryTimeout, "the entries of every character set", func() bool {
		return env.Streams().XLen(ctx, stream).Val() >= int64(len(rows))
	})
	msgs := env.Streams().XRange(ctx, stream, "-", "+").Val()
	if len(msgs) != len(rows) {
		t.Errorf("%s holds %d entries, want %d", stream, len(msgs), len(rows))
	}
	got := map[string]map[string]any{}
	for _, m := range msgs {
		got[fmt.Sprint(m.Values["message_id"])] = m.Values
	}
	for _, r := range rows {
		e, ok := got[r.messageID]
		if !ok {
			t.Errorf("no entry for %s", r.messageID)
			continue
		}
		for f, want := range r.want {
			v, _ := e[f].(string)
			if v != want {
				t.Errorf("%s: field %s is %q, want %q byte for byte", r.messageID, f, v, want)
			}
			if r.db != binary.DB && !utf8.ValidString(v) {
				t.Errorf("%s: field %s is no UTF-8: %q", r.messageID, f, v)
			}
		}
	}
}
