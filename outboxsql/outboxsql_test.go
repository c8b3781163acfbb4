package outboxsql

import (
	"reflect"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// mapped is a table whose columns are renamed, with a TIMESTAMP time column,
// on MariaDB.
func mapped(t *testing.T) Table {
	t.Helper()
	m, err := schema.ParseMapping([]string{"id=event_id", "occurred_at=created_at", "sent_at=relayed_at"})
	if err != nil {
		t.Fatal(err)
	}
	return Table{Database: "shop", Name: "events", Mapping: m, Info: &schema.Table{MariaDB: true, Columns: []schema.Column{
		{Name: "event_id", DataType: "bigint"}, {Name: "created_at", DataType: "timestamp"}, {Name: "relayed_at", DataType: "datetime"},
	}}}
}

// bare is a table of the default mapping without message_id and sent_at,
// not inspected, in the connection's database.
func bare(t *testing.T) Table {
	t.Helper()
	m, err := schema.ParseMapping([]string{"message_id=-", "sent_at=-"})
	if err != nil {
		t.Fatal(err)
	}
	return Table{Name: "outbox", Mapping: m}
}

func TestPoll_Statements(t *testing.T) {
	def := Table{Database: "shop", Name: "outbox", Mapping: schema.DefaultMapping()}
	tests := []struct {
		name                     string
		p                        *Poll
		lock, fetch, below, mark string
	}{
		{
			name:  "default mapping, mark",
			p:     NewPoll(def, PollOptions{MaxPayloadBytes: 1024}),
			lock:  "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id`, LENGTH(`payload`), COALESCE(LENGTH(`event_type`), 0) + COALESCE(LENGTH(`message_id`), 0) + COALESCE(LENGTH(`headers`), 0) FROM `shop`.`outbox` WHERE `sent_at` IS NULL ORDER BY `id` LIMIT 10 FOR UPDATE SKIP LOCKED",
			fetch: "SELECT /* binlog-outbox */ `id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, CASE WHEN LENGTH(`payload`) > 1024 THEN NULL ELSE `payload` END, `headers`, `occurred_at` FROM `shop`.`outbox` WHERE `id` IN (1,2) FOR UPDATE",
			below: "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id` FROM `shop`.`outbox` WHERE `sent_at` IS NULL AND `id` < 2 AND `id` NOT IN (1,2)",
			mark:  "UPDATE /* binlog-outbox */ `shop`.`outbox` SET `sent_at` = NOW(6) WHERE `id` IN (1,2)",
		},
		{
			name:  "mapped on MariaDB, carried column",
			p:     NewPoll(mapped(t), PollOptions{MaxPayloadBytes: 1024, Fields: []schema.ExtraColumn{{Column: "tenant_id", Field: "tenant"}}}),
			lock:  "SELECT /* binlog-outbox */ `event_id`, `aggregate_type`, `aggregate_id`, LENGTH(`payload`), COALESCE(LENGTH(`event_type`), 0) + COALESCE(LENGTH(`message_id`), 0) + COALESCE(LENGTH(`headers`), 0) + COALESCE(LENGTH(`tenant_id`), 0) FROM `shop`.`events` WHERE `relayed_at` IS NULL ORDER BY `event_id` LIMIT 10 FOR UPDATE SKIP LOCKED",
			fetch: "SELECT /* binlog-outbox */ `event_id`, `message_id`, `aggregate_type`, `aggregate_id`, `event_type`, CASE WHEN LENGTH(`payload`) > 1024 THEN NULL ELSE `payload` END, `headers`, UNIX_TIMESTAMP(`created_at`), `tenant_id` FROM `shop`.`events` WHERE `event_id` IN (1,2) FOR UPDATE",
			below: "SELECT /* binlog-outbox */ `event_id`, `aggregate_type`, `aggregate_id` FROM `shop`.`events` WHERE `relayed_at` IS NULL AND `event_id` < 2 AND `event_id` NOT IN (1,2)",
			mark:  "SET STATEMENT check_constraint_checks=0 FOR UPDATE /* binlog-outbox */ `shop`.`events` SET `relayed_at` = NOW(6) WHERE `event_id` IN (1,2)",
		},
		{
			name:  "no message_id nor sent_at, delete",
			p:     NewPoll(bare(t), PollOptions{DeleteRows: true, MaxPayloadBytes: 1024}),
			lock:  "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id`, LENGTH(`payload`), COALESCE(LENGTH(`event_type`), 0) + COALESCE(LENGTH(`headers`), 0) FROM `outbox` ORDER BY `id` LIMIT 10 FOR UPDATE SKIP LOCKED",
			fetch: "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `headers`, `occurred_at` FROM `outbox` WHERE `id` IN (1,2) FOR UPDATE",
			below: "SELECT /* binlog-outbox */ `id`, `aggregate_type`, `aggregate_id` FROM `outbox` WHERE `id` < 2 AND `id` NOT IN (1,2)",
			mark:  "DELETE /* binlog-outbox */ FROM `outbox` WHERE `id` IN (1,2)",
		},
	}
	ids := []uint64{1, 2}
	for _, tt := range tests {
		for _, c := range []struct{ what, got, want string }{
			{"Lock", tt.p.Lock(10), tt.lock}, {"Fetch", tt.p.Fetch(ids), tt.fetch},
			{"UnsentBelow", tt.p.UnsentBelow(2, ids), tt.below}, {"Mark", tt.p.Mark(ids), tt.mark},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s\n got %s\nwant %s", tt.name, c.what, c.got, c.want)
			}
		}
	}
}

func TestBacklog(t *testing.T) {
	tests := []struct {
		name          string
		t             Table
		count, oldest string
	}{
		{"mapped", mapped(t),
			"SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1 FROM `shop`.`events` WHERE `relayed_at` IS NULL LIMIT 101) AS unsent",
			"SELECT /* binlog-outbox */ UNIX_TIMESTAMP(`created_at`) FROM `shop`.`events` WHERE `relayed_at` IS NULL ORDER BY `event_id` LIMIT 1"},
		{"no sent_at", bare(t),
			"SELECT /* binlog-outbox */ COUNT(*) FROM (SELECT 1 FROM `outbox` LIMIT 101) AS unsent",
			"SELECT /* binlog-outbox */ `occurred_at` FROM `outbox` ORDER BY `id` LIMIT 1"},
	}
	for _, tt := range tests {
		count, oldest := Backlog(tt.t, 100)
		if count != tt.count || oldest != tt.oldest {
			t.Errorf("%s: Backlog\n got %s\n     %s\nwant %s\n     %s", tt.name, count, oldest, tt.count, tt.oldest)
		}
	}
}

func TestCleanup_Statements(t *testing.T) {
	cutoff := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	def := Table{Database: "shop", Name: "outbox", Mapping: schema.DefaultMapping()}
	tests := []struct {
		name               string
		c                  *Cleanup
		candidates, unsent string
		cutoffArg          any
		delete             string
	}{
		{"binlog mode, DATETIME", NewCleanup(def, false),
			"SELECT /* binlog-outbox */ `id` FROM `shop`.`outbox` WHERE `id` > ? AND `occurred_at` < ? ORDER BY `id` LIMIT ?",
			"SELECT /* binlog-outbox */ COUNT(*) FROM `shop`.`outbox` WHERE `sent_at` IS NULL AND `occurred_at` < ?", cutoff,
			"DELETE /* binlog-outbox */ FROM `shop`.`outbox` WHERE `id` IN (7,9)"},
		{"poll mode, TIMESTAMP", NewCleanup(mapped(t), true),
			"SELECT /* binlog-outbox */ `event_id` FROM `shop`.`events` WHERE `event_id` > ? AND `created_at` < FROM_UNIXTIME(?) AND NOT (`relayed_at` IS NULL) ORDER BY `event_id` LIMIT ?",
			"SELECT /* binlog-outbox */ COUNT(*) FROM `shop`.`events` WHERE `relayed_at` IS NULL AND `created_at` < FROM_UNIXTIME(?)", float64(cutoff.UnixMicro()) / 1e6,
			"DELETE /* binlog-outbox */ FROM `shop`.`events` WHERE NOT (`relayed_at` IS NULL) AND `event_id` IN (7,9)"},
	}
	for _, tt := range tests {
		q, args := tt.c.Candidates(5, cutoff, 100)
		if q != tt.candidates || !reflect.DeepEqual(args, []any{uint64(5), tt.cutoffArg, 100}) {
			t.Errorf("%s: Candidates\n got %s %v\nwant %s %v", tt.name, q, args, tt.candidates, []any{uint64(5), tt.cutoffArg, 100})
		}
		q, args = tt.c.CountUnsent(cutoff)
		if q != tt.unsent || !reflect.DeepEqual(args, []any{tt.cutoffArg}) {
			t.Errorf("%s: CountUnsent\n got %s %v\nwant %s %v", tt.name, q, args, tt.unsent, tt.cutoffArg)
		}
		if got := tt.c.Delete([]uint64{7, 9}); got != tt.delete {
			t.Errorf("%s: Delete\n got %s\nwant %s", tt.name, got, tt.delete)
		}
	}
}

func TestVerify_Statements(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name         string
		t            Table
		since        time.Time
		rows         string
		args         []any
		recheck, min string
	}{
		{"default mapping, all rows", Table{Database: "shop", Name: "outbox", Mapping: schema.DefaultMapping()}, time.Time{},
			"SELECT /* binlog-outbox */ `id`, `message_id`, `sent_at` IS NULL FROM `shop`.`outbox` WHERE `id` > ? ORDER BY `id` LIMIT ?",
			[]any{uint64(3), 50},
			"SELECT /* binlog-outbox */ `id`, `message_id` FROM `shop`.`outbox` WHERE `id` IN (4,5)",
			"SELECT /* binlog-outbox */ MIN(`id`) FROM `shop`.`outbox`"},
		{"no message_id nor sent_at, since", bare(t), since,
			"SELECT /* binlog-outbox */ `id`, CAST(`id` AS CHAR), 1 FROM `outbox` WHERE `id` > ? AND `occurred_at` >= ? ORDER BY `id` LIMIT ?",
			[]any{uint64(3), since, 50},
			"SELECT /* binlog-outbox */ `id`, CAST(`id` AS CHAR) FROM `outbox` WHERE `id` IN (4,5)",
			"SELECT /* binlog-outbox */ MIN(`id`) FROM `outbox`"},
		{"TIMESTAMP, since", mapped(t), since,
			"SELECT /* binlog-outbox */ `event_id`, `message_id`, `relayed_at` IS NULL FROM `shop`.`events` WHERE `event_id` > ? AND `created_at` >= FROM_UNIXTIME(?) ORDER BY `event_id` LIMIT ?",
			[]any{uint64(3), float64(since.UnixMicro()) / 1e6, 50},
			"SELECT /* binlog-outbox */ `event_id`, `message_id` FROM `shop`.`events` WHERE `event_id` IN (4,5)",
			"SELECT /* binlog-outbox */ MIN(`event_id`) FROM `shop`.`events`"},
	}
	for _, tt := range tests {
		v := NewVerify(tt.t)
		q, args := v.Rows(3, tt.since, 50)
		if q != tt.rows || !reflect.DeepEqual(args, tt.args) {
			t.Errorf("%s: Rows\n got %s %v\nwant %s %v", tt.name, q, args, tt.rows, tt.args)
		}
		if got := v.Recheck([]uint64{4, 5}); got != tt.recheck {
			t.Errorf("%s: Recheck\n got %s\nwant %s", tt.name, got, tt.recheck)
		}
		if got := v.MinID(); got != tt.min {
			t.Errorf("%s: MinID\n got %s\nwant %s", tt.name, got, tt.min)
		}
	}
}

// The marks of mark-appended are poll mode's, MariaDB's workaround included.
func TestMarker_Statements(t *testing.T) {
	tests := []struct {
		name       string
		t          Table
		deleteRows bool
		lock, mark string
	}{
		{"mapped on MariaDB", mapped(t), false,
			"SELECT /* binlog-outbox */ `event_id`, `message_id`, `relayed_at` IS NULL FROM `shop`.`events` WHERE `event_id` IN (1,2) FOR UPDATE",
			NewPoll(mapped(t), PollOptions{}).Mark([]uint64{1, 2})},
		{"no message_id nor sent_at, delete", bare(t), true,
			"SELECT /* binlog-outbox */ `id`, CAST(`id` AS CHAR), 1 FROM `outbox` WHERE `id` IN (1,2) FOR UPDATE",
			"DELETE /* binlog-outbox */ FROM `outbox` WHERE `id` IN (1,2)"},
	}
	for _, tt := range tests {
		m := NewMarker(tt.t, tt.deleteRows)
		if got := m.Lock([]uint64{1, 2}); got != tt.lock {
			t.Errorf("%s: Lock\n got %s\nwant %s", tt.name, got, tt.lock)
		}
		if got := m.Mark([]uint64{1, 2}); got != tt.mark {
			t.Errorf("%s: Mark\n got %s\nwant %s", tt.name, got, tt.mark)
		}
	}
}

// The probe of a relay of many tables: one row, the tag, when the table has
// an unsent row; a table without sent_at holds unsent rows only.
func TestProbe(t *testing.T) {
	if got, want := Probe(mapped(t), 12), "SELECT 12 FROM `shop`.`events` WHERE `relayed_at` IS NULL LIMIT 1"; got != want {
		t.Errorf("Probe(mapped) = %q, want %q", got, want)
	}
	if got, want := Probe(bare(t), 0), "SELECT 0 FROM `outbox` LIMIT 1"; got != want {
		t.Errorf("Probe(bare) = %q, want %q", got, want)
	}
}
