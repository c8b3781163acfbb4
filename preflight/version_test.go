package preflight

import (
	"strings"
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

func TestCheckGTIDMode(t *testing.T) {
	mysql, mariadb := mysqlserver.Server{Flavor: mysqlserver.FlavorMySQL}, mysqlserver.Server{Flavor: mysqlserver.FlavorMariaDB}
	tests := []struct {
		srv  mysqlserver.Server
		mode string
		want Status
	}{
		{mysql, "ON", Pass},
		{mysql, "OFF", Pass},
		{mysql, "ON_PERMISSIVE", Warn},
		{mysql, "off_permissive", Warn},
		{mariadb, "", Pass},
	}
	for _, tt := range tests {
		r := checkGTIDMode(tt.srv, tt.mode)
		if r.Status != tt.want || r.Name != NameGTIDMode || !r.Needs(ModeBinlog) || r.Needs(ModePoll) {
			t.Errorf("%s gtid_mode %q: got %s %s (modes %v), want %s for binlog mode only", tt.srv.Flavor, tt.mode, r.Status, r.Name, r.Modes, tt.want)
		}
		if r.Status == Warn && (r.Fix == "" || !strings.Contains(r.Detail, "GTID set")) {
			t.Errorf("%s gtid_mode %q: warning %q without a fix or the GTID-mode cost", tt.srv.Flavor, tt.mode, r.Detail)
		}
	}
}
