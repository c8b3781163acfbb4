package logging

import "testing"

func TestTruncate(t *testing.T) {
	tests := []struct {
		name, s string
		n       int
		want    string
	}{
		{"empty", "", 3, ""},
		{"shorter", "ab", 3, "ab"},
		{"exact", "abc", 3, "abc"},
		{"longer", "abcd", 3, "abc..."},
		{"zero", "abc", 0, "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Truncate(tt.s, tt.n); got != tt.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
		})
	}
}
