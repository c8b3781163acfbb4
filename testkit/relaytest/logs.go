package relaytest

import (
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Logs collects a component's log lines as JSON, for tests that count or
// inspect them. It is safe for concurrent use.
type Logs struct {
	logging.Buffer
}

// Logger returns a logger that writes to l at debug level.
func (l *Logs) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
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
