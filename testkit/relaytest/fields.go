package relaytest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// carriedColumns: see CarriedColumns.
func (s *suite) carriedColumns(t *testing.T) {
	env := s.newEnv(t, envOptions{})
	CarriedColumns(t, env.Env, s.start)
}

// carriedRow is a row CarriedColumns writes and the fields its entry must
// carry beside the built-in ones.
type carriedRow struct {
	messageID, eventType string // eventType "" writes NULL: a dead letter
	version, tenant      any    // the values written; nil is NULL
	aggregateVersion     any
	want                 map[string]string
}

// CarriedColumns alters env's outbox table to have a renamed schema_version
// column (payload_version) and extra columns (a VARCHAR carried under
// another name, an INT UNSIGNED), relays rows through start, and checks that
// each entry carries exactly the fields it should: values as text, integers
// in decimal (above 2^31 too), an empty string kept, a NULL leaving its field
// out, and a dead letter keeping them. The canal package runs it on a server
// whose rows carry no column names too, where the columns are mapped by the
// proven layout.
func CarriedColumns(t *testing.T, env *Env, start StartFunc) {
	t.Helper()
	ctx := context.Background()
	table := "`" + env.Table + "`"
	insertRaw(t, env.DB, "ALTER TABLE "+table+" RENAME COLUMN schema_version TO payload_version, "+
		"ADD tenant_id VARCHAR(64) NULL AFTER id, ADD aggregate_version INT UNSIGNED NULL, MODIFY event_type VARCHAR(255) NULL")
	var err error
	if env.Mapping, err = schema.ParseMapping([]string{"schema_version=payload_version"}); err != nil {
		t.Fatal(err)
	}
	env.Extra = []schema.ExtraColumn{{Column: "tenant_id", Field: "tenant"}, {Column: "aggregate_version", Field: "aggregate_version"}}
	stop := start(t, env)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("relay returned %v after a clean stop", err)
		}
	}()

	rows := []carriedRow{
		{messageID: "cc-all", eventType: "order.placed", version: 2, tenant: "ünïcode-acme", aggregateVersion: uint64(4000000000),
			want: map[string]string{"schema_version": "2", "tenant": "ünïcode-acme", "aggregate_version": "4000000000"}},
		{messageID: "cc-nulls", eventType: "order.placed", tenant: "", want: map[string]string{"tenant": ""}},
		{messageID: "cc-dead", version: 1, tenant: "acme", aggregateVersion: 0,
			want: map[string]string{"schema_version": "1", "tenant": "acme", "aggregate_version": "0"}},
	}
	tx, err := env.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		var eventType any
		if r.eventType != "" {
			eventType = r.eventType
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (message_id, aggregate_type, aggregate_id, event_type, payload, payload_version, tenant_id, aggregate_version) "+
			"VALUES (?, 'order', 'cc', ?, '{}', ?, ?, ?)", r.messageID, eventType, r.version, r.tenant, r.aggregateVersion); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, deliveryTimeout, "the entries", func() bool {
		return env.Streams().XLen(ctx, env.Prefix+"order").Val() >= 2 && env.Streams().XLen(ctx, env.Prefix+"dead-letter").Val() >= 1
	})
	entries := map[string]map[string]any{}
	for _, stream := range []string{env.Prefix + "order", env.Prefix + "dead-letter"} {
		for _, m := range env.Streams().XRange(ctx, stream, "-", "+").Val() {
			entries[fmt.Sprint(m.Values["message_id"])] = m.Values
		}
	}
	builtin := []string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "occurred_at", "outbox_id", "headers"}
	for _, r := range rows {
		got, ok := entries[r.messageID]
		if !ok {
			t.Errorf("no entry for %s: %v", r.messageID, entries)
			continue
		}
		wantKeys := append(slices.Clone(builtin), slices.Collect(maps.Keys(r.want))...)
		if r.eventType == "" {
			wantKeys = append(wantKeys, "reason", "target_stream")
		}
		slices.Sort(wantKeys)
		if gotKeys := slices.Sorted(maps.Keys(got)); !slices.Equal(gotKeys, wantKeys) {
			t.Errorf("entry %s has fields %v, want %v", r.messageID, gotKeys, wantKeys)
		}
		for f, want := range r.want {
			if got[f] != want {
				t.Errorf("entry %s: %s = %q, want %q", r.messageID, f, got[f], want)
			}
		}
	}
	if len(entries) != len(rows) {
		t.Errorf("%d entries, want %d: %v", len(entries), len(rows), entries)
	}
}
