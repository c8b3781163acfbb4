package sqlscan

import (
	"slices"
	"testing"
)

func TestQuoteEnd(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`'abc' x`, 5},
		{`'it''s' x`, 7},
		{`'a\'b' x`, 6},
		{`"a\"b" x`, 6},
		{"`a\\`b", 4},   // no backslash escape in a name
		{"`a``b` x", 6}, // a doubled backquote stays inside
		{`'open`, 5},
		{`'ends in backslash\`, 19},
	}
	for _, tt := range tests {
		if got := QuoteEnd(tt.in, 0); got != tt.want {
			t.Errorf("QuoteEnd(%q) = %d, want %d", tt.in, got, tt.want)
		}
		if got := QuoteEnd([]byte(tt.in), 0); got != tt.want {
			t.Errorf("QuoteEnd([]byte %q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTopLevel(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"SELECT, INSERT", []string{"SELECT", " INSERT"}},
		{"SELECT (a, b), UPDATE", []string{"SELECT (a, b)", " UPDATE"}},
		{"`a,b`,'c,d',\"e,f\"", []string{"`a,b`", "'c,d'", `"e,f"`}},
		{`'x\',y',z`, []string{`'x\',y'`, "z"}},
	}
	for _, tt := range tests {
		var parts []string
		start := 0
		TopLevel(tt.in, func(i int) bool {
			if tt.in[i] == ',' {
				parts = append(parts, tt.in[start:i])
				start = i + 1
			}
			return true
		})
		parts = append(parts, tt.in[start:])
		if !slices.Equal(parts, tt.want) {
			t.Errorf("split %q = %q, want %q", tt.in, parts, tt.want)
		}
	}
}

func TestMatchParen(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"(a)", 2},
		{"(a (b) c)", 8},
		{"(a ')' b)", 8},
		{"(`)` x)", 6},
		{`('\')' x)`, 8},
		{"(open", -1},
	}
	for _, tt := range tests {
		if got := MatchParen(tt.in, 0); got != tt.want {
			t.Errorf("MatchParen(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func FuzzTopLevel(f *testing.F) {
	for _, s := range []string{"a,b", "'x,y',z", "(a,b),c", "`q`,\"r\"", `'\''`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Never out of range, and every index it reports is outside quotes.
		TopLevel(s, func(i int) bool {
			if i < 0 || i >= len(s) || IsQuote(s[i]) || s[i] == '(' || s[i] == ')' {
				t.Fatalf("TopLevel(%q) reported index %d", s, i)
			}
			return true
		})
		for i := range len(s) {
			if s[i] == '(' {
				if end := MatchParen(s, i); end != -1 && (end <= i || s[end] != ')') {
					t.Fatalf("MatchParen(%q, %d) = %d", s, i, end)
				}
			}
		}
	})
}
