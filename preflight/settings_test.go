package preflight

import (
	"strings"
	"testing"
)

// The check describes what the relay does without column names.
func TestCheckBinlogSettings_RowMetadata(t *testing.T) {
	base := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
	tests := []struct {
		name     string
		value    string // "" for a server without the variable
		want     Status
		wantText []string
	}{
		{"full", "FULL", Pass, []string{"column names"}},
		{"minimal", "MINIMAL", Warn, []string{"information_schema", "after a DDL on the table it reads them again", "stop"}},
		{"no log", "NO_LOG", Warn, []string{"by position"}},
		{"absent", "", Warn, []string{"by position"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range base {
				vars[k] = v
			}
			if tt.value != "" {
				vars["binlog_row_metadata"] = tt.value
			}
			for _, r := range checkBinlogSettings(vars) {
				if r.Name != NameBinlogRowMetadata {
					continue
				}
				if r.Status != tt.want {
					t.Errorf("status: got %v, want %v", r.Status, tt.want)
				}
				for _, w := range tt.wantText {
					if !strings.Contains(r.Detail, w) {
						t.Errorf("detail %q does not mention %q", r.Detail, w)
					}
				}
				if tt.want == Warn && !strings.Contains(r.Fix, "binlog_row_metadata=FULL") {
					t.Errorf("fix %q does not say binlog_row_metadata=FULL", r.Fix)
				}
				return
			}
			t.Fatal("no binlog_row_metadata result")
		})
	}
}
