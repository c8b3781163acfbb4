package admin

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"7d", 7 * 24 * time.Hour, true},
		{"36h", 36 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"2w", 14 * 24 * time.Hour, true},
		{"1w2d3h", 9*24*time.Hour + 3*time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{" 7d ", 7 * 24 * time.Hour, true},
		{"", 0, false},
		{"0d", 0, false},
		{"0s", 0, false},
		{"-7d", 0, false},
		{"7", 0, false},
		{"d", 0, false},
		{"7days", 0, false},
		{"1d-1h", 0, false},
		{"999999d", 0, false},
		{"2562047h", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseAge(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"7d", "1w2d3h", "36h", "1d-1h", "99999w999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseAge(s)
		if err == nil && (d <= 0 || d > (maxAgeDays*2)*24*time.Hour) {
			t.Errorf("ParseAge(%q) = %v, want a positive age of at most two centuries", s, d)
		}
		if err != nil && d != 0 {
			t.Errorf("ParseAge(%q) = %v with error %v", s, d, err)
		}
	})
}
