package tuning

import (
	"testing"
	"time"
)

func TestCatchUp_Behind(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 10, 0, time.UTC)
	const checkpoint = time.Second
	appendedRecently := CatchUp{Checkpoint: checkpoint}.appendedRecently()
	for _, tt := range []struct {
		name               string
		appended, commitTS time.Duration // before now
		want               bool
	}{
		{"live: a commit under a second old, whole seconds", 0, 1999 * time.Millisecond, false},
		{"a batch of commits two seconds old", 0, 2 * time.Second, true},
		{"a backlog of an hour", 50 * time.Millisecond, time.Hour, true},
		{"a catch-up over other tables' rows, between position stores", appendedRecently, time.Hour, true},
		{"idle since a catch-up", appendedRecently + time.Millisecond, time.Hour, false},
		{"nothing appended yet", 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := CatchUp{}
			if tt.commitTS > 0 {
				c = CatchUp{LastAppend: now.Add(-tt.appended), LastCommit: now.Add(-tt.appended - tt.commitTS), Checkpoint: checkpoint}
			}
			if got := c.behind(now); got != tt.want {
				t.Errorf("behind = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestProcsPolicy_Next(t *testing.T) {
	for _, tt := range []struct {
		name   string
		looks  []bool // behind at each look
		wantNs []int
	}{
		{"caught up from the start stays on one processor", []bool{false, false, false}, []int{-1, -1, -1}},
		{"a catch-up gets the default at its first look", []bool{true, true, false}, []int{0, -1, -1}},
		{"back to one processor after two calm looks", []bool{true, false, false, false}, []int{0, -1, caughtUpProcs, -1}},
		{"a calm look between catch-up looks does not switch", []bool{false, true, false, true, false, false}, []int{-1, 0, -1, -1, -1, caughtUpProcs}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := procsPolicy{one: true} // as FollowCatchUp starts
			for i, b := range tt.looks {
				if got := p.next(b); got != tt.wantNs[i] {
					t.Fatalf("look %d (behind %v): %d, want %d", i, b, got, tt.wantNs[i])
				}
			}
		})
	}
}
