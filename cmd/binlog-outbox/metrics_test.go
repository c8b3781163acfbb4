package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// promtool lints the exposition format; Debian ships it with prometheus.
const promtool = "/usr/bin/promtool"

// scraper reads one relay's endpoints.
type scraper struct {
	t    *testing.T
	base string
}

// get returns the status code and body of path; 0 when the request failed.
func (s scraper) get(path string) (int, string) {
	resp, err := http.Get(s.base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// value returns the sample of series (name and labels as the exposition
// prints them) in the last scrape of /metrics.
func (s scraper) value(series string) (float64, bool) {
	code, body := s.get("/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	return sampleOf(body, series)
}

func sampleOf(body, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// waitValue waits until series has a value cond accepts.
func (s scraper) waitValue(series, what string, cond func(float64) bool) {
	s.t.Helper()
	var v float64
	var ok bool
	relaytest.WaitFor(s.t, 60*time.Second, series+" "+what, func() bool {
		v, ok = s.value(series)
		return ok && cond(v)
	})
}

// waitReady waits until /readyz answers code with a body containing want.
func (s scraper) waitReady(code int, want string) {
	s.t.Helper()
	var got int
	var body string
	relaytest.WaitFor(s.t, 60*time.Second, fmt.Sprintf("/readyz %d %q", code, want), func() bool {
		got, body = s.get("/readyz")
		return got == code && strings.Contains(body, want)
	})
}

// TestRun_MetricsLagAndReadiness follows the lag metrics and /readyz of
// both modes through an outage of Redis: 0 behind and ready while relaying,
// behind (bytes, seconds, unsent rows) and not ready while Redis is down
// and rows keep coming, back to 0 and ready once Redis returns, with a
// "catching up" and a "caught up" line in between.
func TestRun_MetricsLagAndReadiness(t *testing.T) {
	// Each mode has a Redis and a database of its own, binlog mode its
	// MariaDB too.
	t.Parallel()
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("%s is missing (%v); install it with: apt-get install prometheus", promtool, err)
	}
	for _, tt := range []struct {
		mode string
		// own: a private MariaDB, whose binlog no other test moves.
		own    bool
		behind string // the series that counts the backlog
	}{
		{"binlog", true, `binlog_outbox_bytes_behind{mode="binlog"}`},
		{"poll", false, `binlog_outbox_unsent_rows{mode="poll"}`},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			srv := testsvc.SharedMariaDB(t)
			if tt.own {
				srv = testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
			}
			rs := testsvc.StartRedis(t, testsvc.RedisOptions{})
			rs.RequirePrivate(t, "kill and restart Redis")
			env := relaytest.NewEnv(t, srv, rs)
			port := closedPort(t)
			p := startRelay(t, env, "--mode", tt.mode, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port),
				"--probe-interval", "200ms", "--ensure-group", "billing", "--group-metrics", "--group-metrics-interval", "200ms", "--group-idle-threshold", "300ms")
			s := scraper{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
			m := func(name string) string { return name + `{mode="` + tt.mode + `"}` }
			if tt.mode == "binlog" {
				// It starts at the end of the binlog: rows before are not its.
				waitStoredPosition(t, env, posKey(env))
			}

			rec := relaytest.NewProduced()
			for i := range 10 {
				insertEvent(t, env.DB, rec, "a", i)
			}
			relaytest.WaitDelivered(t, env, rec, 60*time.Second)
			s.waitReady(http.StatusOK, "ready")
			s.waitValue(tt.behind, "= 0 once relayed", func(v float64) bool { return v == 0 })
			s.waitValue(m("binlog_outbox_lag_seconds"), "= 0 once relayed", func(v float64) bool { return v == 0 })
			s.waitValue(m("binlog_outbox_batch_entries_count"), "counts the appends", func(v float64) bool { return v >= 1 })
			if v, ok := s.value(m("binlog_outbox_batch_entries_sum")); !ok || v != 10 {
				t.Errorf("batch_entries_sum = %v, %v; want the 10 entries appended", v, ok)
			}
			s.waitValue(m("binlog_outbox_append_duration_seconds_count"), "counts the script calls", func(v float64) bool { return v >= 1 })
			group := `{group="billing",mode="` + tt.mode + `",stream="outbox:order"}`
			s.waitValue("binlog_outbox_group_lag"+group, "= 10 undelivered entries", func(v float64) bool { return v == 10 })
			if v, ok := s.value("binlog_outbox_group_pending" + group); !ok || v != 0 {
				t.Errorf("group_pending = %v, %v; want 0", v, ok)
			}
			groupHealthMetrics(t, s, env, group)
			if tt.mode == "binlog" {
				if v, ok := s.value(m("binlog_outbox_binlog_retention_headroom_seconds")); !ok || v < 1e300 {
					t.Errorf("retention headroom in the current file = %v, %v; want +Inf", v, ok)
				}
			}
			_, body := s.get("/metrics")
			lint := exec.Command(promtool, "check", "metrics")
			lint.Stdin = strings.NewReader(body)
			if out, err := lint.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics: %v\n%s", err, out)
			}

			rs.Kill(t)
			for i := range 3 {
				insertEvent(t, env.DB, rec, "b", i)
			}
			s.waitReady(http.StatusServiceUnavailable, "not ready: ")
			s.waitValue(tt.behind, "> 0 while Redis is down", func(v float64) bool { return v > 0 })
			// Past the 10 seconds that make a catch-up worth its progress lines.
			s.waitValue(m("binlog_outbox_lag_seconds"), "> 11 while Redis is down", func(v float64) bool { return v > 11 })
			if tt.mode == "poll" {
				s.waitValue(m("binlog_outbox_oldest_unsent_age_seconds"), "> 1 while Redis is down", func(v float64) bool { return v > 1 })
			}
			if v, ok := s.value(m("binlog_outbox_ready")); !ok || v != 0 {
				t.Errorf("ready = %v, %v while Redis is down; want 0", v, ok)
			}
			_, why := s.get("/readyz")
			t.Logf("/readyz while Redis is down: %s", why)

			rs.Restart(t)
			relaytest.WaitDelivered(t, env, rec, 60*time.Second)
			s.waitReady(http.StatusOK, "ready")
			s.waitValue(tt.behind, "= 0 after the outage", func(v float64) bool { return v == 0 })
			s.waitValue(m("binlog_outbox_lag_seconds"), "= 0 after the outage", func(v float64) bool { return v == 0 })
			s.waitValue(m("binlog_outbox_ready"), "= 1 after the outage", func(v float64) bool { return v == 1 })
			relaytest.WaitFor(t, 30*time.Second, "the catch-up's progress lines", func() bool {
				out := p.Out.String()
				return strings.Contains(out, `"msg":"catching up"`) && strings.Contains(out, `"msg":"caught up"`)
			})
			for _, line := range strings.Split(p.Out.String(), "\n") {
				if strings.Contains(line, `"component":"lag"`) {
					t.Logf("progress: %s", line)
				}
			}

			p.Signal(t, syscall.SIGTERM)
			p.Wait(t, 15*time.Second)
		})
	}
}
