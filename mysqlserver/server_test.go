package mysqlserver

import (
	"errors"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
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
		flavor, major, minor, patch, err := ParseVersion(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseVersion(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if flavor != tt.flavor || major != tt.major || minor != tt.minor || patch != tt.patch {
			t.Errorf("ParseVersion(%q) = %s %d.%d.%d, want %s %d.%d.%d", tt.in, flavor, major, minor, patch, tt.flavor, tt.major, tt.minor, tt.patch)
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
		s, err := Parse(tt.version, "1")
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.version, err)
		}
		if got := s.BinlogStatusQuery(); got != tt.status {
			t.Errorf("%s: BinlogStatusQuery() = %q, want %q", tt.version, got, tt.status)
		}
		if got := s.ReplicasQuery(); got != tt.replicas {
			t.Errorf("%s: ReplicasQuery() = %q, want %q", tt.version, got, tt.replicas)
		}
	}
}

func TestServer_SkipLocked(t *testing.T) {
	tests := []struct {
		version string
		ok      bool
	}{
		{"8.0.36-0ubuntu0.22.04.1", true},
		{"8.0.1", true},
		{"8.0.0", false},
		{"5.7.44-log", false},
		{"8.4.3", true},
		{"9.1.0", true},
		{"10.6.12-MariaDB-log", true},
		{"10.5.23-MariaDB", false},
		{"5.5.5-10.6.12-MariaDB-log", true},
		{"5.5.5-10.4.1-MariaDB", false},
		{"10.11.19-MariaDB-0+deb12u1-log", true},
		{"11.4.2-MariaDB", true},
	}
	for _, tt := range tests {
		s, err := Parse(tt.version, "1")
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.version, err)
		}
		err = s.SkipLocked()
		if (err == nil) != tt.ok {
			t.Errorf("%q: SkipLocked() = %v, want ok=%v", tt.version, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrNoSkipLocked) || !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "") {
			t.Errorf("%q: SkipLocked() = %v, want ErrNoSkipLocked (a configuration error) with a hint", tt.version, err)
		}
	}
}
