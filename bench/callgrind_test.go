package bench

import (
	"strings"
	"testing"
)

// A dump's header as callgrind 3.19 writes it (callgrind_control --dump),
// cut after the summary.
const dumpHeader = `# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 16802
cmd:  /usr/bin/redis-server --port 23032
part: 2


desc: I1 cache: 
desc: D1 cache: 
desc: LL cache: 

desc: Timerange: Basic block 182651007 - 357105599
desc: Trigger: dump relay-0

positions: line
events: Ir
summary: 760168692


totals: 760168692
`

func TestParseCallgrind(t *testing.T) {
	for _, tc := range []struct {
		name, in    string
		wantTrigger string
		wantIr      int64
		wantErr     string
	}{
		{name: "dump", in: dumpHeader, wantTrigger: "dump relay-0", wantIr: 760168692},
		{name: "zero instructions", in: strings.Replace(dumpHeader, "summary: 760168692", "summary: 0", 1), wantTrigger: "dump relay-0"},
		{name: "cache simulation", in: strings.Replace(dumpHeader, "events: Ir", "events: Ir Dr Dw", 1), wantErr: `events "Ir Dr Dw"`},
		{name: "bad number", in: strings.Replace(dumpHeader, "summary: 760168692", "summary: many", 1), wantErr: `summary "many"`},
		{name: "no summary", in: "# callgrind format\nversion: 1\n", wantErr: "not a callgrind dump"},
		{name: "empty", in: "", wantErr: "not a callgrind dump"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trigger, ir, err := parseCallgrind(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %d, %v; want an error containing %q", trigger, ir, err, tc.wantErr)
				}
				return
			}
			if err != nil || trigger != tc.wantTrigger || ir != tc.wantIr {
				t.Fatalf("got %q, %d, %v; want %q, %d", trigger, ir, err, tc.wantTrigger, tc.wantIr)
			}
		})
	}
}
