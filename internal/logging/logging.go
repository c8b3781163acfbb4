// Package logging configures the relay's slog logger once, at start-up: tint's
// coloured text on a terminal, plain text elsewhere, JSON for log collectors.
// It also redacts the secrets the relay's configuration carries (the MySQL DSN
// and the Redis URL), so that no log line, error or help text shows them.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Log formats accepted by --log-format.
const (
	// FormatText is human-readable text, coloured when written to a terminal.
	FormatText = "text"
	// FormatJSON is one JSON object per line, for log collectors.
	FormatJSON = "json"
)

// Attribute keys every component logs with, so that one query over the logs
// finds every error and every operator hint.
const (
	// KeyError is the key of an error value.
	KeyError = "error"
	// KeyHint is the key of an operator hint (outbox.HintOf): logged as its
	// own attribute, since outbox.Error's text leaves it out.
	KeyHint = "hint"
)

// Defaults for --log-format and --log-level.
const (
	DefaultFormat = FormatText
	DefaultLevel  = "info"
)

// ParseLevel parses debug, info, warn (or warning) and error, case-insensitively.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, outbox.WithHint(fmt.Errorf("%w: unknown log level %q", outbox.ErrConfig, s),
		"use --log-level debug, info, warn or error")
}

// New returns a logger writing to w in format ("text" or "json") at level.
// Text is coloured only when w is a terminal, so that files and pipes get no
// escape sequences.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", FormatText:
		return slog.New(tint.NewHandler(w, &tint.Options{
			Level:      lvl,
			TimeFormat: time.DateTime,
			NoColor:    !IsTerminal(w),
		})), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return nil, outbox.WithHint(fmt.Errorf("%w: unknown log format %q", outbox.ErrConfig, format),
		"use --log-format text or json")
}

// IsTerminal reports whether w is a character device such as a terminal. It
// avoids a terminal library: the file mode says enough to decide on colour.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&os.ModeCharDevice != 0
}
