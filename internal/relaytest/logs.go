package relaytest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// Logs collects a component's log lines as JSON, for tests that count or
// inspect them. It is safe for concurrent use.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Logger returns a logger that writes to l at debug level.
func (l *Logs) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// String returns every line written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines at level ("ERROR", "WARN", "INFO", "DEBUG"), each
// decoded into its attributes; "" returns every line.
func (l *Logs) Lines(level string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if level == "" || m[slog.LevelKey] == level {
			out = append(out, m)
		}
	}
	return out
}
