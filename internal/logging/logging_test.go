package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"INFO", slog.LevelInfo, false},
		{"", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"warning", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"trace", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && (!errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "") {
			t.Errorf("ParseLevel(%q) error %v: want ErrConfig with a hint", tt.in, err)
		}
	}
}

func TestNew_JSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("output %q is not one JSON object: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["k"] != float64(1) {
		t.Errorf("record = %v, want msg=shown level=WARN k=1", rec)
	}
}

func TestNew_TextHasNoColourOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "text", "debug")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "k", "v")
	out := buf.String()
	if !strings.Contains(out, "hello") || !strings.Contains(out, "k=v") {
		t.Errorf("output %q lacks message or attribute", out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("output %q has colour escapes; want none for a non-terminal", out)
	}
}

func TestNew_BadFormat(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "xml", "info"); !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
		t.Errorf("New(format xml) error = %v, want ErrConfig with a hint", err)
	}
}
