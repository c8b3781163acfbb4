package schema

import (
	"errors"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParsePattern(t *testing.T) {
	tests := []struct {
		in      string
		want    Pattern
		exact   bool
		wantErr bool
	}{
		{"outbox", Pattern{Table: "outbox"}, true, false},
		{" app.outbox ", Pattern{Database: "app", Table: "outbox"}, true, false},
		{"tenant_*.outbox", Pattern{Database: "tenant_*", Table: "outbox"}, false, false},
		{"app.outbox_*", Pattern{Database: "app", Table: "outbox_*"}, false, false},
		{"*.*", Pattern{Database: "*", Table: "*"}, false, false},
		{"", Pattern{}, false, true},
		{"a.b.c", Pattern{}, false, true},
		{"`app`.outbox", Pattern{}, false, true},
		{"app.", Pattern{}, false, true},
		{".outbox", Pattern{}, false, true},
		{"app:outbox", Pattern{}, false, true},
	}
	for _, tt := range tests {
		got, err := ParsePattern(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParsePattern(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
				t.Errorf("ParsePattern(%q) error = %v, want a configuration error with a hint", tt.in, err)
			}
			continue
		}
		if got != tt.want || got.Exact() != tt.exact {
			t.Errorf("ParsePattern(%q) = %+v (exact %v), want %+v (exact %v)", tt.in, got, got.Exact(), tt.want, tt.exact)
		}
	}
}

func TestPattern_Matches(t *testing.T) {
	tests := []struct {
		pattern, db, table string
		lctn               int
		want               bool
	}{
		{"app.outbox", "app", "outbox", 0, true},
		{"app.outbox", "app", "Outbox", 0, false},
		{"app.outbox", "APP", "Outbox", 1, true},
		{"tenant_*.outbox", "tenant_01", "outbox", 0, true},
		{"tenant_*.outbox", "tenant_", "outbox", 0, true},
		{"tenant_*.outbox", "tenant01", "outbox", 0, false},
		{"tenant_*.outbox", "tenant_01", "outbox_old", 0, false},
		{"tenant_*.outbox", "other_tenant_01", "outbox", 0, false},
		{"*_db.*_outbox", "shop_db", "order_outbox", 0, true},
		{"a*b*c.t", "abc", "t", 0, true},
		{"a*b*c.t", "axxbyyc", "t", 0, true},
		{"a*b*c.t", "axxbyy", "t", 0, false},
		{"a*bc.t", "abc", "t", 0, true},
		{"ab*bc.t", "abc", "t", 0, false},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Matches(tt.db, tt.table, tt.lctn); got != tt.want {
			t.Errorf("%s.Matches(%s, %s, %d) = %v, want %v", tt.pattern, tt.db, tt.table, tt.lctn, got, tt.want)
		}
	}
}

func TestPatterns_IndexFirstWins(t *testing.T) {
	ps := Patterns{{Database: "app", Table: "legacy"}, {Database: "app", Table: "*"}}
	for table, want := range map[string]int{"legacy": 0, "outbox": 1} {
		if got := ps.Index("app", table, 0); got != want {
			t.Errorf("Index(app, %s) = %d, want %d", table, got, want)
		}
	}
	if got := ps.Index("other", "outbox", 0); got != -1 {
		t.Errorf("Index(other, outbox) = %d, want -1", got)
	}
	if !ps.Several() || (Patterns{{Database: "app", Table: "outbox"}}).Several() || !(Patterns{{Database: "t_*", Table: "outbox"}}).Several() {
		t.Error("Several: want true for two values and for a pattern, false for one table")
	}
}

func FuzzGlobMatch(f *testing.F) {
	f.Add("tenant_*", "tenant_01")
	f.Add("a*b*c", "abcabc")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// A pattern without a wildcard matches itself only; with one, every
		// string matched has the pattern's prefix and suffix.
		got := globMatch(pattern, s, false)
		if got && len(s) < len(pattern)-countWildcards(pattern) {
			t.Errorf("globMatch(%q, %q) matched a string shorter than the pattern's literal parts", pattern, s)
		}
		if countWildcards(pattern) == 0 && got != (pattern == s) {
			t.Errorf("globMatch(%q, %q) = %v without a wildcard", pattern, s, got)
		}
	})
}

func countWildcards(s string) int {
	n := 0
	for _, c := range s {
		if string(c) == Wildcard {
			n++
		}
	}
	return n
}

func TestParseSources(t *testing.T) {
	srcs, err := ParseSources([]string{"tenant_*.outbox", "app.legacy"},
		[]string{"headers=-", "app.legacy:payload=body", "app.legacy:aggregate_type=kind"})
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 2 {
		t.Fatalf("got %d sources, want 2", len(srcs))
	}
	if p, _ := srcs[0].Mapping.Physical(ColPayload); p != "payload" || srcs[0].Mapping.Has(ColHeaders) {
		t.Errorf("tenant mapping = %s, want payload and no headers", srcs[0].Mapping)
	}
	if p, _ := srcs[1].Mapping.Physical(ColPayload); p != "body" || srcs[1].Mapping.Has(ColHeaders) {
		t.Errorf("legacy mapping = %s, want payload=body and no headers", srcs[1].Mapping)
	}
	if got, want := srcs[1].Declared, []string{ColHeaders, ColPayload, ColAggregateType}; len(got) != len(want) {
		t.Errorf("legacy declared = %v, want %v", got, want)
	}

	for name, tc := range map[string]struct{ tables, columns []string }{
		"unknown scope": {[]string{"outbox"}, []string{"other:payload=body"}},
		"twice":         {[]string{"outbox", "outbox"}, nil},
		"none":          {nil, nil},
		"bad mapping":   {[]string{"a", "b"}, []string{"b:nope=x"}},
	} {
		_, err := ParseSources(tc.tables, tc.columns)
		if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
			t.Errorf("%s: ParseSources error = %v, want a configuration error with a hint", name, err)
		}
	}
}
