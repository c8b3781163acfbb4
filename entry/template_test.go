package entry

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestTemplate_Render(t *testing.T) {
	e := &outbox.Event{AggregateType: "order", AggregateID: "o-42", EventType: "order.paid", Database: "tenant_07", Table: "outbox"}
	tests := []struct {
		src        string
		partitions int
		want       string
	}{
		{"outbox:{aggregate_type}", 1, "outbox:order"},
		{"fixed", 1, "fixed"},
		{"{event_type}", 1, "order.paid"},
		{"a:{aggregate_type}:{aggregate_id}:b", 1, "a:order:o-42:b"},
		{"outbox:{aggregate_type}:{partition}", 1, "outbox:order:0"},
		{"outbox:{aggregate_type}:{partition}", 8, "outbox:order:" + itoa(Partition("o-42", 8))},
		{"outbox:{database}:{aggregate_type}", 1, "outbox:tenant_07:order"},
		{"{database}.{table}", 1, "tenant_07.outbox"},
	}
	for _, tt := range tests {
		tpl, err := ParseTemplate(tt.src, tt.partitions, true)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tt.src, err)
			continue
		}
		if got := tpl.Render(e); got != tt.want {
			t.Errorf("Render(%q) = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestParseTemplate_Errors(t *testing.T) {
	tests := []struct {
		src        string
		partitions int
		hasAggType bool
		wantInHint string
	}{
		{"", 1, true, "placeholders"},
		{"outbox:{aggregate}", 1, true, "placeholders"},
		{"outbox:{aggregate_type", 1, true, "placeholders"},
		{"outbox:aggregate_type}", 1, true, "placeholders"},
		{"outbox:{aggregate_type}", 1, false, "--column aggregate_type"},
		{"outbox:{aggregate_type}", 4, true, "{partition}"},
		{"outbox:{partition}", 0, true, "1 to 65536"},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.src, tt.partitions, tt.hasAggType)
		if err == nil {
			t.Errorf("ParseTemplate(%q, %d, %v) succeeded, want an error", tt.src, tt.partitions, tt.hasAggType)
			continue
		}
		if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), tt.wantInHint) {
			t.Errorf("ParseTemplate(%q): %v (hint %q), want ErrConfig with %q in the hint", tt.src, err, outbox.HintOf(err), tt.wantInHint)
		}
	}
}

// TestPartition pins the hash to values PHP's crc32() % n gives, so that
// consumers can compute partitions themselves.
func TestPartition(t *testing.T) {
	tests := []struct {
		id   string
		n    uint32
		want uint32
	}{
		{"", 8, 0},
		{"order-1", 1, 0},
		// php -r 'echo crc32("The quick brown fox jumps over the lazy dog");' => 1095738169
		{"The quick brown fox jumps over the lazy dog", 1000, 1095738169 % 1000},
		{"123456789", 16, 0xCBF43926 % 16},
	}
	for _, tt := range tests {
		if got := Partition(tt.id, tt.n); got != tt.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", tt.id, tt.n, got, tt.want)
		}
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{DefaultStream, "a:{partition}", "{x}", "{", "}", "{{aggregate_id}}", "x{event_type}y{aggregate_id}z"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, src string, partitions int) {
		tpl, err := ParseTemplate(src, partitions, true)
		if err != nil {
			return
		}
		e := &outbox.Event{AggregateType: "t", AggregateID: "id", EventType: "e"}
		got := tpl.Render(e)
		if !strings.ContainsAny(src, "{}") && got != src {
			t.Fatalf("literal template %q rendered %q", src, got)
		}
		if strings.Contains(got, "{partition}") {
			t.Fatalf("template %q left a placeholder in %q", src, got)
		}
	})
}

func TestTemplate_Glob(t *testing.T) {
	tests := []struct{ src, want string }{
		{"outbox:{aggregate_type}", "outbox:*"},
		{"outbox", "outbox"},
		{"app[1]:{event_type}:{partition}", `app\[1\]:*:*`},
		{"a*b?{aggregate_id}", `a\*b\?*`},
	}
	for _, tt := range tests {
		tmpl, err := ParseTemplate(tt.src, 1, true)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", tt.src, err)
		}
		if got := tmpl.Glob(); got != tt.want {
			t.Errorf("Glob() of %q = %q, want %q", tt.src, got, tt.want)
		}
	}
}

// TestTemplate_MayRender: whether some event could go to a stream named so
// (the dead-letter stream outbox:dead-letter, here).
func TestTemplate_MayRender(t *testing.T) {
	for _, tt := range []struct {
		stream, name string
		want         bool
	}{
		{DefaultStream, "outbox:dead-letter", true},
		{"outbox:{aggregate_type}:{partition}", "outbox:dead-letter", false},
		{"outbox:{aggregate_type}:{partition}", "outbox:dead:letter:12", true},
		{"events", "outbox:dead-letter", false},
		{"{database}:{table}", "a:b", true},
		{"x:{partition}", "x:", false},
	} {
		n := 1
		if strings.Contains(tt.stream, "{partition}") {
			n = 16
		}
		tmpl, err := ParseTemplate(tt.stream, n, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.MayRender(tt.name); got != tt.want {
			t.Errorf("%s MayRender(%s) = %v, want %v", tt.stream, tt.name, got, tt.want)
		}
	}
}
