package preflight

import (
	"testing"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
)

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		version string
		want    Status
	}{
		{"8.0.11", Pass},
		{"8.4.3", Pass},
		{"5.7.44-log", Fail},
		{"10.6.0-MariaDB", Pass},
		{"5.5.5-10.5.23-MariaDB", Fail},
		{"11.4.2-MariaDB", Pass},
	}
	for _, tt := range tests {
		s, err := mysqlserver.Parse(tt.version, "1")
		if err != nil {
			t.Fatalf("mysqlserver.Parse(%q): %v", tt.version, err)
		}
		r := checkVersion(s)
		if r.Status != tt.want || (r.Status != Pass && r.Fix == "") {
			t.Errorf("checkVersion(%s) = %v (fix %q), want %v with a fix unless passing", tt.version, r.Status, r.Fix, tt.want)
		}
	}
}
