package preflight

import (
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in                  string
		flavor              string
		major, minor, patch int
		wantErr             bool
	}{
		{"8.4.3", FlavorMySQL, 8, 4, 3, false},
		{"8.0.36-0ubuntu0.22.04.1", FlavorMySQL, 8, 0, 36, false},
		{"8.0.36-28", FlavorMySQL, 8, 0, 36, false},
		{"9.1.0-commercial", FlavorMySQL, 9, 1, 0, false},
		{"5.7.44-log", FlavorMySQL, 5, 7, 44, false},
		{"10.11.19-MariaDB-0+deb12u1-log", FlavorMariaDB, 10, 11, 19, false},
		{"11.4.2-MariaDB", FlavorMariaDB, 11, 4, 2, false},
		{"5.5.5-10.6.12-MariaDB-log", FlavorMariaDB, 10, 6, 12, false},
		{"10.6.16-MariaDB-1:10.6.16+maria~ubu2004", FlavorMariaDB, 10, 6, 16, false},
		{"8.0", FlavorMySQL, 8, 0, 0, false},
		{"", "", 0, 0, 0, true},
		{"eight", "", 0, 0, 0, true},
		{"8.x.1", "", 0, 0, 0, true},
	}
	for _, tt := range tests {
		flavor, major, minor, patch, err := parseVersion(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseVersion(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if flavor != tt.flavor || major != tt.major || minor != tt.minor || patch != tt.patch {
			t.Errorf("parseVersion(%q) = %s %d.%d.%d, want %s %d.%d.%d", tt.in, flavor, major, minor, patch, tt.flavor, tt.major, tt.minor, tt.patch)
		}
	}
}

func TestServer_Statements(t *testing.T) {
	tests := []struct {
		version, status, replicas string
	}{
		{"8.4.3", "SHOW /* binlog-outbox */ BINARY LOG STATUS", "SHOW /* binlog-outbox */ REPLICAS"},
		{"8.0.36", "SHOW /* binlog-outbox */ MASTER STATUS", "SHOW /* binlog-outbox */ REPLICAS"},
		{"8.0.21", "SHOW /* binlog-outbox */ MASTER STATUS", "SHOW /* binlog-outbox */ SLAVE HOSTS"},
		{"10.11.19-MariaDB-log", "SHOW /* binlog-outbox */ BINLOG STATUS", "SHOW /* binlog-outbox */ SLAVE HOSTS"},
		{"11.4.2-MariaDB", "SHOW /* binlog-outbox */ BINLOG STATUS", "SHOW /* binlog-outbox */ SLAVE HOSTS"},
		{"5.5.5-10.5.1-MariaDB", "SHOW /* binlog-outbox */ MASTER STATUS", "SHOW /* binlog-outbox */ SLAVE HOSTS"},
	}
	for _, tt := range tests {
		s, err := parseServer(tt.version, "1")
		if err != nil {
			t.Fatalf("parseServer(%q): %v", tt.version, err)
		}
		if got := binlogStatusQuery(s); got != tt.status {
			t.Errorf("%s: binlogStatusQuery = %q, want %q", tt.version, got, tt.status)
		}
		if got := replicasQuery(s); got != tt.replicas {
			t.Errorf("%s: replicasQuery = %q, want %q", tt.version, got, tt.replicas)
		}
	}
}

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
		s, err := parseServer(tt.version, "1")
		if err != nil {
			t.Fatalf("parseServer(%q): %v", tt.version, err)
		}
		r := checkVersion(s)
		if r.Status != tt.want || (r.Status != Pass && r.Fix == "") {
			t.Errorf("checkVersion(%s) = %v (fix %q), want %v with a fix unless passing", tt.version, r.Status, r.Fix, tt.want)
		}
	}
}

func TestCheckGTIDMode(t *testing.T) {
	mysql, mariadb := Server{Flavor: FlavorMySQL}, Server{Flavor: FlavorMariaDB}
	tests := []struct {
		srv  Server
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
