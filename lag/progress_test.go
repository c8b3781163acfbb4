package lag

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/poller"
)

func TestProgress_Observe(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	poll := func(at time.Duration, unsent int64, age time.Duration) Sample {
		now := t0.Add(at)
		return Sample{Mode: modePoll, At: now, Backlog: poller.Backlog{Unsent: unsent, Oldest: now.Add(-age), OldestKnown: unsent > 0}}
	}
	binlog := func(at time.Duration, pos uint32, age time.Duration) Sample {
		now := t0.Add(at)
		srv := Server{File: "b.2", Pos: 200 << 20, Files: []File{{"b.1", 100 << 20}, {"b.2", 200 << 20}}}
		b := BinlogSample{At: now, Server: srv, File: "b.2", Pos: pos, Oldest: now.Add(-age)}
		b.BytesBehind, b.BehindKnown = srv.Behind("b.2", pos)
		return Sample{Mode: modeBinlog, At: now, Binlog: b}
	}
	tests := []struct {
		name    string
		samples []Sample
		events  []uint64
		want    []string // per sample: "" for no line, else the message and attributes it must have
	}{
		{
			name:    "poll catch-up",
			samples: []Sample{poll(0, 5, time.Second), poll(10*time.Second, 50000, time.Minute), poll(20*time.Second, 30000, 50*time.Second), poll(25*time.Second, 20000, 40*time.Second), poll(30*time.Second, 10, time.Second)},
			events:  []uint64{0, 0, 20000, 30000, 50000},
			// The third line comes 5s after the second: within ProgressEvery, none.
			want: []string{"", "catching up unsent_rows=50000 seconds_behind=60", "catching up unsent_rows=30000 seconds_behind=50 events_per_second=2000 eta=15s", "", "caught up took=20s events=50000 unsent_rows=10"},
		},
		{
			name:    "binlog not gaining",
			samples: []Sample{binlog(0, 100<<20, time.Hour), binlog(10*time.Second, 100<<20, time.Hour)},
			events:  []uint64{0, 0},
			want:    []string{"catching up bytes_behind=104857600 seconds_behind=3600", "catching up bytes_behind=104857600 seconds_behind=3600 events_per_second=0 bytes_per_second=0 eta=none"},
		},
		{
			name:    "binlog reading",
			samples: []Sample{binlog(0, 100<<20, time.Hour), binlog(10*time.Second, 150<<20, time.Hour)},
			events:  []uint64{0, 1000},
			want:    []string{"catching up", "catching up bytes_behind=52428800 seconds_behind=3600 events_per_second=100 bytes_per_second=5242880 eta=10s"},
		},
		{
			name:    "never far",
			samples: []Sample{poll(0, 5, time.Second), poll(10*time.Second, 0, 0)},
			events:  []uint64{0, 5},
			want:    []string{"", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p progress
			for i, s := range tt.samples {
				line := p.observe(s, Relay{Events: tt.events[i]}, 10*time.Second)
				got := ""
				if line != nil {
					got = line.msg
					for j := 0; j+1 < len(line.attrs); j += 2 {
						got += fmt.Sprintf(" %v=%v", line.attrs[j], line.attrs[j+1])
					}
				}
				if tt.want[i] == "" && got != "" || tt.want[i] != "" && !matchesAll(got, tt.want[i]) {
					t.Errorf("sample %d: line %q, want %q", i, got, tt.want[i])
				}
			}
		})
	}
}

// matchesAll reports whether got has every space-separated part of want.
func matchesAll(got, want string) bool {
	for _, part := range strings.Fields(want) {
		if !strings.Contains(got, part) {
			return false
		}
	}
	return true
}
