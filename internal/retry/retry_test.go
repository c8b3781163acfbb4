package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

func TestFinal(t *testing.T) {
	hinted := func(err error) error { return outbox.WithHint(fmt.Errorf("context: %w", err), "fix it") }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"ErrConfig", outbox.ErrConfig, true},
		{"ErrConfig wrapped", fmt.Errorf("%w: canal: Host is required", outbox.ErrConfig), true},
		{"ErrFenced", hinted(outbox.ErrFenced), true},
		{"ErrPositionGone", hinted(outbox.ErrPositionGone), true},
		{"schema.ErrTableUnfit", hinted(schema.ErrTableUnfit), true},
		{"schema.ErrTableNotFound", hinted(schema.ErrTableNotFound), true},
		{"mysqlserver.ErrNoSkipLocked", hinted(mysqlserver.ErrNoSkipLocked), true},
		{"ErrPositionRolledBack", outbox.ErrPositionRolledBack, false},
		{"connection refused", hinted(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), false},
		{"unexpected EOF", fmt.Errorf("read binlog event: %w", io.ErrUnexpectedEOF), false},
		{"redis OOM", hinted(errors.New("OOM command not allowed when used memory > 'maxmemory'")), false},
	}
	for _, tt := range tests {
		if got := retry.Final(tt.err); got != tt.want {
			t.Errorf("Final(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// clock is a settable time source.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newPolicy(cfg retry.Config) (*retry.Policy, *relaytest.Logs, *clock) {
	logs := &relaytest.Logs{}
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Now = c.Now
	if cfg.Message == "" {
		cfg.Message = "attempt failed"
	}
	return retry.New(logs.Logger(), cfg), logs, c
}

func TestPolicy_FailedBackoff(t *testing.T) {
	p, _, _ := newPolicy(retry.Config{FirstWait: 100 * time.Millisecond, MaxWait: time.Second})
	err := errors.New("connection refused")
	var got []time.Duration
	for range 6 {
		wait, final := p.Failed(err)
		if final != nil {
			t.Fatalf("Failed(%v) returned final %v", err, final)
		}
		got = append(got, wait)
	}
	p.Progressed()
	for range 2 {
		wait, _ := p.Failed(err)
		got = append(got, wait)
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second, 100 * ms, 200 * ms}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v", got, want)
	}
}

func TestPolicy_FailedFinal(t *testing.T) {
	p, logs, _ := newPolicy(retry.Config{})
	err := outbox.WithHint(fmt.Errorf("%w: written by another relay", outbox.ErrFenced), "stop the other relay")
	wait, final := p.Failed(err)
	if final != err || wait != 0 {
		t.Errorf("Failed(fenced) = %v, %v; want 0, the error itself", wait, final)
	}
	if s := logs.String(); s != "" {
		t.Errorf("a final error was logged (the caller returns it, the CLI prints it):\n%s", s)
	}
}

func TestPolicy_FailedRateLimited(t *testing.T) {
	p, logs, c := newPolicy(retry.Config{RepeatEvery: 30 * time.Second})
	oom := outbox.WithHint(errors.New("append to redis: OOM"), "raise maxmemory")
	// The same cause in a batch of another size: a repeat, by its hint.
	oom30 := outbox.WithHint(errors.New("append 30 events: OOM"), "raise maxmemory")
	down := outbox.WithHint(errors.New("dial tcp: connection refused"), "start Redis")
	type line struct {
		err, hint string
		repeats   float64 // -1: no repeats attribute
	}
	steps := []struct {
		advance time.Duration
		err     error // nil: progress
		want    *line // nil: no line
	}{
		{0, oom, &line{"append to redis: OOM", "raise maxmemory", -1}},
		{time.Second, oom, nil},
		{10 * time.Second, oom30, nil},
		{18 * time.Second, oom, nil},
		// 30s after the first line: one line with the count, no hint.
		{2 * time.Second, oom30, &line{"append 30 events: OOM", "", 3}},
		{time.Second, oom, nil},
		// Another error is logged at once, with its hint.
		{time.Second, down, &line{"dial tcp: connection refused", "start Redis", -1}},
		{time.Second, down, nil},
		{0, nil, nil}, // recovered (checked below)
		// The same error right after a recovery is still a repeat...
		{time.Second, down, nil},
		{0, nil, nil}, // no line: nothing was logged since the last progress
		// ...but a new streak once RepeatEvery passed starts with the hint.
		{40 * time.Second, down, &line{"dial tcp: connection refused", "start Redis", 2}},
	}
	var want []line
	for i, s := range steps {
		c.now = c.now.Add(s.advance)
		if s.err == nil {
			p.Progressed()
			continue
		}
		if _, final := p.Failed(s.err); final != nil {
			t.Fatalf("step %d: final %v", i, final)
		}
		if s.want != nil {
			want = append(want, *s.want)
		}
	}
	var got []line
	recovered := 0
	for _, l := range logs.Lines("") {
		if l["msg"] == "recovered" {
			recovered++
			if l["level"] != "INFO" || l["failed_attempts"] != 8.0 {
				t.Errorf("recovery line %v, want INFO with failed_attempts 8", l)
			}
			continue
		}
		if l["level"] != "ERROR" || l["msg"] != "attempt failed" {
			t.Errorf("line %v, want an ERROR with the configured message", l)
		}
		g := line{err: fmt.Sprint(l["error"]), repeats: -1}
		if h, ok := l["hint"]; ok {
			g.hint = fmt.Sprint(h)
		}
		if r, ok := l["repeats"].(float64); ok {
			g.repeats = r
		}
		got = append(got, g)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("logged\n%v\nwant\n%v\nlog:\n%s", got, want, logs.String())
	}
	if recovered != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", recovered, logs.String())
	}
	if n := strings.Count(logs.String(), "raise maxmemory"); n != 1 {
		t.Errorf("the OOM hint appears %d times, want once:\n%s", n, logs.String())
	}
}

func TestPolicy_Failing(t *testing.T) {
	p, _, _ := newPolicy(retry.Config{})
	if p.Failing() {
		t.Error("Failing() before any attempt = true")
	}
	p.Failed(errors.New("boom"))
	if !p.Failing() {
		t.Error("Failing() after a failure = false")
	}
	p.Progressed()
	if p.Failing() {
		t.Error("Failing() after progress = true")
	}
}

func TestPolicy_FailingFor(t *testing.T) {
	p, _, c := newPolicy(retry.Config{})
	err := errors.New("boom")
	steps := []struct {
		advance time.Duration
		fail    bool // false: progress
		want    time.Duration
	}{
		{0, true, 0},
		{10 * time.Second, true, 10 * time.Second},
		{5 * time.Second, true, 15 * time.Second},
		{time.Second, false, 0},
		// A new run of failures counts from its own first one.
		{time.Minute, true, 0},
		{2 * time.Second, true, 2 * time.Second},
	}
	for i, s := range steps {
		c.now = c.now.Add(s.advance)
		if s.fail {
			p.Failed(err)
		} else {
			p.Progressed()
		}
		if got := p.FailingFor(); got != s.want {
			t.Errorf("step %d: FailingFor() = %s, want %s", i, got, s.want)
		}
	}
}

func TestPolicy_Failure(t *testing.T) {
	p, _, _ := newPolicy(retry.Config{})
	if got := p.Failure(); got != "" {
		t.Errorf("Failure() before any attempt = %q, want none", got)
	}
	p.Failed(errors.New("boom"))
	p.Failed(errors.New("boom")) // a repeat, not logged
	if got := p.Failure(); got != "boom" {
		t.Errorf("Failure() while failing = %q, want boom", got)
	}
	p.Progressed()
	if got := p.Failure(); got != "" {
		t.Errorf("Failure() after progress = %q, want none", got)
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !retry.Sleep(ctx, time.Millisecond) {
		t.Error("Sleep on a live context = false")
	}
	cancel()
	start := time.Now()
	if retry.Sleep(ctx, time.Hour) {
		t.Error("Sleep on a cancelled context = true")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Sleep on a cancelled context took %s", d)
	}
}

// TestEvery: the step runs once a period, not at the start, until it says
// stop or the context ends.
func TestEvery(t *testing.T) {
	start := time.Now()
	calls := 0
	retry.Every(context.Background(), time.Millisecond, func(context.Context) bool {
		calls++
		return calls < 3
	})
	if calls != 3 || time.Since(start) < 3*time.Millisecond {
		t.Errorf("%d calls in %s; want 3, a period apart", calls, time.Since(start))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	retry.Every(ctx, time.Millisecond, func(context.Context) bool {
		t.Error("a step ran after the context ended")
		return true
	})
}
