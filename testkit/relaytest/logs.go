package relaytest

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

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

// failureLogLines is how many of a relay's last log lines a failed test
// shows: enough to see what it did over the last seconds of a wait.
const failureLogLines = 400

// TestLogger returns a logger for a relay under test. With -v its lines go
// to stderr as they come; without, they are kept and the last of them
// shown only if the test fails, so that a timeout in a full run (CI's) says
// what the relay was doing instead of only that nothing arrived.
func TestLogger(t testing.TB) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, opts)).With("test", t.Name())
	}
	var buf logging.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the relay's last %d log lines:\n%s", failureLogLines, TailLines(buf.String(), failureLogLines))
		}
	})
	return slog.New(slog.NewTextHandler(&buf, opts))
}
