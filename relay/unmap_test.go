package relay

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// The executable's pages are given back once the session has appended,
// not before: a relay that never appends (stopped first) leaves them.
func TestUnmapAfterFirstAppend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		appended bool
		want     string
	}{
		{"after the first append", true, "unmapped the executable's session start pages"},
		{"stopped before it", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithCancel(context.Background())
			if !tc.appended {
				cancel()
			}
			defer cancel()
			unmapAfterFirstAppend(ctx, log, func() bool { return tc.appended })
			if got := out.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("logged %q, want %q", got, tc.want)
			}
		})
	}
}
