package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestOptions_Validate(t *testing.T) {
	for _, tc := range []struct {
		ttl, renew time.Duration
		ok         bool
	}{
		{5 * time.Second, time.Second, true},
		{3 * time.Second, time.Second, true},
		{2 * time.Second, time.Second, false},
		{time.Second, time.Second, false},
	} {
		err := Options{LeaseTTL: tc.ttl, LeaseRenew: tc.renew}.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("--lease-ttl %s --lease-renew %s: %v, want ok=%v", tc.ttl, tc.renew, err, tc.ok)
			continue
		}
		if err != nil && (!errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "--lease-ttl") || outbox.HintOf(err) == "") {
			t.Errorf("--lease-ttl %s --lease-renew %s: %v, want a configuration error naming --lease-ttl, with a hint", tc.ttl, tc.renew, err)
		}
	}
}

// TestCheckFlag: a value outside its flag's range is refused naming the
// flag, its variable and its default; one within it, or of a flag without
// a range, passes.
func TestCheckFlag(t *testing.T) {
	for _, tc := range []struct {
		command string
		flag    string
		value   any
		ok      bool
	}{
		{"run", "lease-ttl", 50 * time.Millisecond, false},
		{"run", "lease-ttl", 100 * time.Millisecond, true},
		{"run", "lease-renew", time.Duration(0), false},
		{"run", "max-tx-bytes", 1, false},
		{"run", "max-tx-bytes", 64 << 10, true},
		{"run", "heartbeat", 2 * time.Hour, false},
		{"run", "batch", 10001, false},
		{"run", "snapshot", "later", false},
		{"run", "snapshot", "LOCK", true},
		{"run", "no-such-flag", -1, true},
		{"run", "mode", "auto", true},
		{"repair", "mode", "auto", false},
		{"schema print", "format", "xml", false},
		{"run", "format", "xml", true}, // the entry format's own check
	} {
		err := CheckFlag(tc.command, tc.flag, tc.value, "BINLOG_OUTBOX_X", "7")
		if tc.ok != (err == nil) {
			t.Errorf("%s --%s %v: %v, want ok=%v", tc.command, tc.flag, tc.value, err, tc.ok)
			continue
		}
		if err != nil && (!errors.Is(err, outbox.ErrConfig) || !strings.Contains(err.Error(), "--"+tc.flag) ||
			!strings.Contains(outbox.HintOf(err), "BINLOG_OUTBOX_X") || !strings.Contains(outbox.HintOf(err), "(7)")) {
			t.Errorf("--%s %v: %v (hint %q), want a configuration error naming the flag, with its variable and default in the hint", tc.flag, tc.value, err, outbox.HintOf(err))
		}
	}
}
