package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/bench"
)

// TestBench_Smoke runs `bench` at a tiny size: the table prints and every
// ratio is computed. It asserts no timing: benchmarks are not timed tests.
func TestBench_Smoke(t *testing.T) {
	bin := binary(t)
	run := func(extra ...string) string {
		t.Helper()
		app := NewApp()
		var out, errOut bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errOut
		args := append([]string{"binlog-outbox", "--log-level", "warn", "bench", "--rows", "400", "--tx-rows", "10",
			"--naive-rows", "50", "--live-duration", "1s", "--relay-binary", bin}, extra...)
		if err := app.RunContext(context.Background(), args); err != nil {
			t.Fatalf("bench: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	out := run("--json")
	var rep bench.Report
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("parse --json output: %v\n%s", err, out)
	}
	if len(rep.Ceilings) < 8 || len(rep.Results) < 8 {
		t.Fatalf("got %d ceilings and %d results, want at least 8 of each:\n%s", len(rep.Ceilings), len(rep.Results), out)
	}
	for _, r := range rep.Results {
		if r.Ratio <= 0 || r.EventsPerSec <= 0 || r.PeakRSSMB <= 0 {
			t.Errorf("%s (%s): ratio %v, events/s %v, peak RSS %v; want all positive", r.Workload, r.Mode, r.Ratio, r.EventsPerSec, r.PeakRSSMB)
		}
		if strings.HasPrefix(r.Workload, "live") && r.P99ms <= 0 {
			t.Errorf("%s (%s): no latency measured", r.Workload, r.Mode)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"x ceiling", "go-mysql read+decode single", "naive polling relay", "catch-up one 400-row tx", "live, 8 durable producers"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}
