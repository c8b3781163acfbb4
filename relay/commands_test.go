package relay

import (
	"errors"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/preflight"
)

func TestCheckVerdict(t *testing.T) {
	binlogFails := preflight.Report{Results: []preflight.Result{
		{Name: "binlog_format", Status: preflight.Fail, Modes: []preflight.Mode{preflight.ModeBinlog}},
		{Name: "redis", Status: preflight.Pass, Modes: preflight.AllModes},
	}}
	bothFail := preflight.Report{Results: []preflight.Result{
		{Name: "binlog_format", Status: preflight.Fail, Modes: []preflight.Mode{preflight.ModeBinlog}},
		{Name: "redis", Status: preflight.Fail, Modes: preflight.AllModes},
	}}
	for _, tc := range []struct {
		name      string
		rep       preflight.Report
		requested string
		want      string
	}{
		{"auto with poll mode usable", binlogFails, mode.Auto, ""},
		{"poll mode passes", binlogFails, mode.Poll, ""},
		{"binlog mode fails", binlogFails, mode.Binlog, "requirements not met for binlog mode: binlog_format"},
		{"auto with neither", bothFail, mode.Auto, "requirements not met: neither binlog nor poll mode can run"},
		{"poll mode fails", bothFail, mode.Poll, "requirements not met for poll mode: redis"},
	} {
		err := CheckVerdict(tc.rep, tc.requested)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, preflight.ErrRequirements) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
