package relaytest

import (
	"fmt"
	"testing"
)

func TestLineTail_KeepsTheLastLines(t *testing.T) {
	for _, tt := range []struct {
		written int
		want    string
	}{
		{0, ""},
		{2, "0\n1"},
		{3, "0\n1\n2"},
		{4, "1\n2\n3"},
		{7, "4\n5\n6"},
	} {
		l := &lineTail{max: 3}
		for i := range tt.written {
			fmt.Fprintf(l, "%d\n", i)
		}
		if got := l.String(); got != tt.want {
			t.Errorf("after %d lines: %q, want %q", tt.written, got, tt.want)
		}
	}
}
