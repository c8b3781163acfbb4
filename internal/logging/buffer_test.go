package logging

import (
	"strings"
	"sync"
	"testing"
)

func TestBuffer_Write(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"keeps everything", 0, []string{"a", "bc", "def"}, "abcdef"},
		{"under the cap", 10, []string{"a", "bc"}, "abc"},
		// The write that crosses the cap is kept whole; later ones are dropped.
		{"cap reached", 2, []string{"a", "bcd", "e"}, "abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Buffer{Max: tt.max}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuffer_Concurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Errorf("got %d bytes, want 400", len(got))
	}
}
