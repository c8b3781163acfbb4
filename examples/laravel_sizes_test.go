package examples_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
)

// TestLaravelQueue_Sizes checks the outbox queue's size methods on a real
// Redis: Laravel 12's queue contract adds pendingSize, delayedSize,
// reservedSize and creationTimeOfOldestPendingJob (queue:monitor and Horizon
// read them), and a driver without them cannot even be loaded there.
func TestLaravelQueue_Sizes(t *testing.T) {
	php := requirePHP(t)
	e := exampletest.NewBareEnv(t)
	host, port, db := exampletest.RedisAddr(t, e)
	out := exampletest.RunPHP(t, php, nil, "integrations/laravel/tests/sizes.php", host, port, db)
	type sizes struct {
		Size, Pending, Delayed, Reserved int
		Oldest                           *int64
	}
	var got struct {
		Empty, Appended sizes
		AfterPop        sizes `json:"after_pop"`
		IDs             []string
		Popped          string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("sizes.php printed %q: %v", out, err)
	}
	if len(got.IDs) != 3 {
		t.Fatalf("sizes.php appended %v, want 3 entries", got.IDs)
	}
	unix := func(id string) int64 {
		ms, err := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("entry ID %q: %v", id, err)
		}
		return ms / 1000
	}
	check := func(when string, s sizes, size, pending, reserved int, oldest string) {
		t.Helper()
		if s.Size != size || s.Pending != pending || s.Delayed != 0 || s.Reserved != reserved {
			t.Errorf("%s: size %d, pending %d, delayed %d, reserved %d; want %d, %d, 0, %d", when, s.Size, s.Pending, s.Delayed, s.Reserved, size, pending, reserved)
		}
		switch {
		case oldest == "" && s.Oldest != nil:
			t.Errorf("%s: oldest pending job created at %d, want none", when, *s.Oldest)
		case oldest != "" && (s.Oldest == nil || *s.Oldest != unix(oldest)):
			t.Errorf("%s: oldest pending job created at %v, want %d (entry %s)", when, s.Oldest, unix(oldest), oldest)
		}
	}
	check("empty stream", got.Empty, 0, 0, 0, "")
	check("three entries appended", got.Appended, 3, 3, 0, got.IDs[0])
	if got.Popped != got.IDs[0] {
		t.Errorf("pop returned entry %q, want the first, %s", got.Popped, got.IDs[0])
	}
	check("after one pop", got.AfterPop, 3, 2, 1, got.IDs[1])
}
