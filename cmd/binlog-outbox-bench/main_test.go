package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"

	"github.com/binlog-outbox/binlog-outbox/bench"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestMain removes the relay binary the tests built once they are done.
func TestMain(m *testing.M) { testsvc.Main(m) }

var (
	buildOnce sync.Once
	relayDir  string
	buildErr  error
)

// binary builds the relay once per test binary and returns its path.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if relayDir, buildErr = os.MkdirTemp("", "bo-bench-bin-"); buildErr != nil {
			return
		}
		testsvc.AtExit(func() { os.RemoveAll(relayDir) })
		out, err := exec.Command("go", "build", "-o", filepath.Join(relayDir, relayName), "../binlog-outbox").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build ../binlog-outbox: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(relayDir, relayName)
}

// benchReport runs `binlog-outbox-bench --json` at a tiny size with extra flags.
func benchReport(t *testing.T, extra ...string) bench.Report {
	t.Helper()
	app := NewApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	args := append([]string{"binlog-outbox-bench", "--log-level", "warn", "--rows", "400", "--tx-rows", "10",
		"--naive-rows", "50", "--app-rows", "100", "--live-duration", "1s", "--tenants", "20", "--giant-rows", "1", "--relay-binary", binary(t), "--json"}, extra...)
	if err := app.RunContext(context.Background(), args); err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out.String()[strings.Index(out.String(), "{"):]), &rep); err != nil {
		t.Fatalf("parse --json output: %v\n%s", err, out.String())
	}
	return rep
}

// TestBench_Smoke runs the bench at a tiny size: the table prints and every
// ratio is computed. It asserts no timing: benchmarks are not timed tests.
func TestBench_Smoke(t *testing.T) {
	// Not parallel: the app's flags are values shared by every NewApp, and
	// urfave/cli writes to them as it parses (go test -race says so).
	rep := benchReport(t)
	if len(rep.Ceilings) < 10 || len(rep.Results) != len(bench.Workloads()) {
		t.Fatalf("got %d ceilings and %d results, want at least 10 ceilings and %d results: %+v", len(rep.Ceilings), len(rep.Results), len(bench.Workloads()), rep)
	}
	for _, r := range rep.Results {
		if strings.Contains(r.Workload, "16 MiB") {
			// Measured for its memory: no rate to compare.
			if r.PeakRSSMB <= 0 || r.Rows != 1 {
				t.Errorf("%s: %d rows, peak RSS %v; want the row and its peak RSS", r.Workload, r.Rows, r.PeakRSSMB)
			}
			continue
		}
		if r.Ratio <= 0 || r.EventsPerSec <= 0 || r.PeakRSSMB <= 0 {
			t.Errorf("%s (%s): ratio %v, events/s %v, peak RSS %v; want all positive", r.Workload, r.Mode, r.Ratio, r.EventsPerSec, r.PeakRSSMB)
		}
		if strings.HasPrefix(r.Workload, "live") && r.P99ms == 0 {
			t.Errorf("%s (%s): no latency measured", r.Workload, r.Mode)
		}
		if strings.HasPrefix(r.Workload, "live") && r.Mode == "binlog" && (r.CeilP99ms == 0 || r.Ratio != r.P99ms/r.CeilP99ms) {
			t.Errorf("%s (%s): p99 %v, minimal relay's p99 %v, ratio %v; want the ratio of the two", r.Workload, r.Mode, r.P99ms, r.CeilP99ms, r.Ratio)
		}
	}
	if len(rep.Tenants) != 2 || rep.Tenants[1].Ratio == 0 {
		t.Errorf("tenants catch-ups %+v: want the one table and the tenants, with their ratio", rep.Tenants)
	}
	for _, f := range rep.Tenants {
		if f.EventsPerSec == 0 || f.ReadySec <= 0 || f.PeakRSSMB == 0 {
			t.Errorf("tenants catch-up %q: %+v, want its rate, time to the first entry and peak RSS", f.Name, f)
		}
	}
	// The headline: CPU per event of every binlog catch-up beside its
	// ceilings.
	cpu := map[string]bench.CPURow{}
	for _, c := range rep.CPU {
		cpu[c.Workload] = c
	}
	for _, w := range []string{"catch-up 1-row tx, 1 stream", "catch-up app-shaped tx (2 wide UPDATEs + 1 outbox row)"} {
		if c := cpu[w]; c.RelayUs <= 0 || c.RelayRatio <= 0 || c.RedisRatio <= 0 || c.ReadUs <= 0 || c.XAddUs <= 0 {
			t.Errorf("CPU row of %q: %+v; want the relay's and Redis's CPU per event over their ceilings", w, c)
		}
	}
	if !strings.Contains(rep.Load, "load average") {
		t.Errorf("load %q: want the machine's load average", rep.Load)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(strings.SplitN(table.String(), "\n\n", 2)[1], "CPU per event") {
		t.Errorf("the table does not open with the CPU per event:\n%s", table.String())
	}
	for _, want := range []string{"x ceiling", "binlog catch-up, one pattern", "go-mysql read+decode single", "go-mysql read+decode app", "naive polling relay",
		"catch-up one 400-row tx", "catch-up app-shaped tx", "live, 200 tx/s", "live, 8 durable producers", "minimal relay p99",
		"over 20 tenants", "poll mode, 20 idle tenant tables"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// TestBench_Workloads runs one workload: only it and the ceilings it is
// compared with are measured.
func TestBench_Workloads(t *testing.T) {
	// Not parallel: the app's flags are values shared by every NewApp, and
	// urfave/cli writes to them as it parses (go test -race says so).
	// --pairs 2: the app workload runs twice, its go-mysql ceiling measured
	// again before the second run, and each ratio is over the ceiling just
	// before it.
	rep := benchReport(t, "--workloads", bench.WorkApp, "--pairs", "2")
	if len(rep.Results) != 2 || !strings.HasPrefix(rep.Results[0].Workload, "catch-up app-shaped") || rep.Results[1].Workload != rep.Results[0].Workload {
		t.Fatalf("got results %+v, want the app workload's only, twice", rep.Results)
	}
	var reads []bench.Figure
	for _, c := range rep.Ceilings {
		if c.Name == rep.Results[0].Ceiling {
			reads = append(reads, c)
		}
	}
	if len(reads) != 2 || len(rep.Ceilings) != 3 {
		t.Fatalf("got ceilings %+v, want %q twice and the XADDs of its payloads", rep.Ceilings, rep.Results[0].Ceiling)
	}
	for i, res := range rep.Results {
		c := reads[i]
		if c.Name != res.Ceiling || c.EventsPerSec <= 0 || math.Abs(res.Ratio-res.EventsPerSec/c.EventsPerSec) > 1e-9 {
			t.Errorf("pair %d: result %+v, ceiling %+v; want the ratio over this pair's ceiling", i, res, c)
		}
	}
	app := NewApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(context.Background(), []string{"binlog-outbox-bench", "--workloads", "app,nope", "--relay-binary", binary(t)})
	if err == nil || !strings.Contains(err.Error(), `unknown workload "nope"`) || !strings.Contains(err.Error(), bench.WorkLiveRate) {
		t.Errorf("--workloads app,nope: got %v, want an error naming the workload and the valid ones", err)
	}
	for _, n := range []string{"-1", "0"} {
		app = NewApp()
		app.Writer, app.ErrWriter = &out, &errOut
		err = app.RunContext(context.Background(), []string{"binlog-outbox-bench", "--pairs", n, "--relay-binary", binary(t)})
		if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "--pairs "+n+" must be at least 1") {
			t.Errorf("--pairs %s: got %v, want ErrConfig naming the flag", n, err)
		}
	}
}

// TestBench_LiveRunsBesideABaseline: with --pairs and --baseline-relay-binary
// the paced live workload runs twice with each build, alternating, each run
// beside its minimal relay, and the report gives each build's median of the
// p99s over it. It asserts no figure's size.
func TestBench_LiveRunsBesideABaseline(t *testing.T) {
	// Not parallel: the app's flags are values shared by every NewApp.
	baseline := filepath.Join(t.TempDir(), relayName)
	if err := os.Symlink(binary(t), baseline); err != nil {
		t.Fatal(err)
	}
	rep := benchReport(t, "--workloads", bench.WorkLiveRate, "--pairs", "2", "--baseline-relay-binary", baseline)
	var names []string
	diffs := map[string][]float64{}
	for _, r := range rep.Results {
		names = append(names, r.Workload)
		if r.CeilP99ms == 0 || r.P99DiffMs != r.P99ms-r.CeilP99ms {
			t.Errorf("%s: p99 %v, minimal relay's %v, over it %v; want the difference", r.Workload, r.P99ms, r.CeilP99ms, r.P99DiffMs)
		}
		diffs[r.Workload] = append(diffs[r.Workload], r.P99DiffMs)
	}
	paced := fmt.Sprintf("live, %d tx/s, durable", bench.DefaultLiveRate)
	want := []string{paced + " (baseline)", paced, paced + " (baseline)", paced}
	if !slices.Equal(names, want) {
		t.Fatalf("runs %q, want %q", names, want)
	}
	if len(rep.Latency) != 2 {
		t.Fatalf("latency medians %+v, want one per build", rep.Latency)
	}
	for _, m := range rep.Latency {
		d := diffs[m.Workload]
		if m.Runs != 2 || len(d) != 2 || m.P99DiffMs != (d[0]+d[1])/2 || m.MinMs != min(d[0], d[1]) || m.MaxMs != max(d[0], d[1]) {
			t.Errorf("median %+v, runs' p99s over the minimal relay %v; want their median, min and max", m, d)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "runs beside the minimal relay") {
		t.Errorf("table lacks the medians:\n%s", table.String())
	}
}

// TestBench_RedisCallgrind: with --redis-callgrind the private Redis runs
// under callgrind, and the single-row catch-up and its XADD ceiling each get
// Redis's instructions per entry, their ratio and a dump that
// callgrind_annotate reads. It asserts no figure's size.
func TestBench_RedisCallgrind(t *testing.T) {
	// Not parallel: see TestBench_Smoke.
	dir := t.TempDir()
	rep := benchReport(t, "--workloads", bench.WorkSingle, "--redis-callgrind", dir)
	if len(rep.CPU) != 1 {
		t.Fatalf("got CPU rows %+v, want the single-row catch-up's", rep.CPU)
	}
	r := rep.CPU[0]
	if r.RedisInstr <= 0 || r.XAddInstr <= 0 || math.Abs(r.InstrRatio-r.RedisInstr/r.XAddInstr) > 1e-9 {
		t.Fatalf("got %+v, want Redis's instructions per entry under the relay and under bare XADDs, and their ratio", r)
	}
	for _, f := range []string{r.RedisDump, r.XAddDump} {
		if filepath.Dir(f) != dir {
			t.Errorf("dump %q: want a file in %s", f, dir)
		} else if _, err := os.Stat(f); err != nil {
			t.Errorf("dump %q: %v", f, err)
		}
	}
	app := NewApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(context.Background(), []string{"binlog-outbox-bench", "--redis-callgrind", dir, "--redis-url", "redis://127.0.0.1:1/0", "--relay-binary", binary(t)})
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "RedisURL") {
		t.Errorf("--redis-callgrind with --redis-url: got %v, want ErrConfig: callgrind needs the private Redis", err)
	}
}

// TestRelayBinary_NotFound: without --relay-binary, and with no relay beside
// the bench nor on PATH, the bench stops before starting any server and says
// how to get one.
func TestRelayBinary_NotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := relayBinary("")
	if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), "--relay-binary") {
		t.Fatalf("relayBinary with an empty PATH: got %v (hint %q), want ErrConfig with a hint naming --relay-binary", err, outbox.HintOf(err))
	}
	dir := t.TempDir()
	relay := filepath.Join(dir, relayName)
	if err := os.WriteFile(relay, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := relayBinary(""); err != nil || got != relay {
		t.Fatalf("relayBinary with %s on PATH: got %q, %v; want %q", relayName, got, err, relay)
	}
	if got, err := relayBinary("/x/bo"); err != nil || got != "/x/bo" {
		t.Fatalf("relayBinary(/x/bo): got %q, %v; want it as given", got, err)
	}
}
