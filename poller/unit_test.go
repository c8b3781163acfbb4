package poller

import (
	"errors"
	"slices"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

func rowOf(id uint64, agg string) row {
	return row{ev: outbox.Event{OutboxID: id, AggregateID: agg}, key: "\x00" + agg, size: 100}
}

func TestPublishable(t *testing.T) {
	locked := []row{rowOf(3, "a"), rowOf(4, "b"), rowOf(6, "a"), rowOf(7, "c"), rowOf(9, "b"), rowOf(10, "a")}
	tests := []struct {
		name   string
		unsent []foreign
		want   []bool
	}{
		{"nothing foreign", nil, []bool{true, true, true, true, true, true}},
		{"own rows are not foreign", []foreign{{3, "\x00a"}, {4, "\x00b"}}, []bool{true, true, true, true, true, true}},
		{"earlier foreign row blocks the whole aggregate", []foreign{{1, "\x00a"}}, []bool{false, true, false, true, true, false}},
		{"foreign row in between blocks the rest", []foreign{{5, "\x00a"}, {8, "\x00b"}}, []bool{true, true, false, true, false, false}},
		{"other aggregates do not block", []foreign{{2, "\x00z"}}, []bool{true, true, true, true, true, true}},
		{"aggregate type is part of the key", []foreign{{2, "order\x00a"}}, []bool{true, true, true, true, true, true}},
	}
	for _, tt := range tests {
		if got := publishable(locked, tt.unsent); !slices.Equal(got, tt.want) {
			t.Errorf("%s: publishable() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCapBytes(t *testing.T) {
	rows := []row{rowOf(1, "a"), rowOf(2, "b"), rowOf(3, "a"), rowOf(4, "c")}
	ok := []bool{true, false, true, true}
	capBytes(rows, ok, 250)
	if want := []bool{true, false, true, false}; !slices.Equal(ok, want) {
		t.Errorf("capBytes(250) = %v, want %v", ok, want)
	}
	ok = []bool{true, true}
	if !capBytes(rows[:2], ok, 10) {
		t.Errorf("capBytes(10) reports no cut")
	}
	if want := []bool{true, false}; !slices.Equal(ok, want) {
		t.Errorf("capBytes(10) = %v, want %v (the first row always goes)", ok, want)
	}
	ok = []bool{true, true}
	if capBytes(rows[:2], ok, 1000) || !slices.Equal(ok, []bool{true, true}) {
		t.Errorf("capBytes(1000) = %v, want no cut", ok)
	}
}

func TestNextLimit(t *testing.T) {
	rows := []row{rowOf(1, "a"), rowOf(2, "b"), rowOf(3, "a"), rowOf(4, "c")}
	tests := []struct {
		name        string
		ok          []bool
		capped      bool
		limit, want int
	}{
		{"not cut: doubles", []bool{true, true, true, true}, false, 4, 8},
		{"not cut: up to the batch size", []bool{true, true, true, true}, false, 800, 1000},
		{"cut after two rows: twice that", []bool{true, true, false, false}, true, 1000, 4},
		{"cut after a deferred row", []bool{false, true, true, false}, true, 1000, 6},
		{"cut after one row", []bool{true, false, false, false}, true, 1000, 2},
	}
	for _, tt := range tests {
		if got := nextLimit(rows, tt.ok, tt.capped, tt.limit, 1000); got != tt.want {
			t.Errorf("%s: nextLimit() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	noSentAt := schema.DefaultMapping()
	noSentAt[schema.ColSentAt] = ""
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Table: "outbox"}, true},
		{"no table", Config{}, false},
		{"mark without sent_at", Config{Table: "outbox", Mapping: noSentAt}, false},
		{"delete without sent_at", Config{Table: "outbox", Mapping: noSentAt, OnSent: OnSentDelete}, true},
		{"unknown on-sent", Config{Table: "outbox", OnSent: "archive"}, false},
		{"batch too large", Config{Table: "outbox", BatchSize: 1 << 20}, false},
		{"negative poll interval", Config{Table: "outbox", PollInterval: -1}, false},
	}
	for _, tt := range tests {
		cfg := tt.cfg
		cfg.setDefaults()
		err := cfg.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, outbox.ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", tt.name, err)
		}
	}
}

// The carried columns are read last, in schema.FieldColumns order, and
// counted in a locked row's size: their lengths by the lock query, their
// field names once each.
func TestBuildQueries_CarriedColumns(t *testing.T) {
	m, err := schema.ParseMapping([]string{"schema_version=v"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Table: "outbox", Mapping: m, Extra: []schema.ExtraColumn{{Column: "tenant_id", Field: "tenant"}}}
	cfg.setDefaults()
	q := buildQueries(cfg, nil)
	fetch, lock := q.sql.Fetch([]uint64{1}), q.sql.Lock(1)
	if !strings.HasPrefix(fetch, "SELECT /* binlog-outbox */ `id`, ") || !strings.Contains(fetch, "`occurred_at`, `v`, `tenant_id` FROM ") {
		t.Errorf("fetch = %q, want the carried columns last", fetch)
	}
	for _, want := range []string{"COALESCE(LENGTH(`v`), 0)", "COALESCE(LENGTH(`tenant_id`), 0)"} {
		if !strings.Contains(lock, want) {
			t.Errorf("lock = %q, want it to count %s", lock, want)
		}
	}
	if want := outbox.FieldSize("schema_version", 0) + outbox.FieldSize("tenant", 0); q.fieldsSize != want {
		t.Errorf("fieldsSize = %d, want %d", q.fieldsSize, want)
	}
}
