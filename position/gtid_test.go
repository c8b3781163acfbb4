package position

import (
	"slices"
	"testing"
)

// Server uuids of a MySQL primary and of the replica promoted in its place.
const (
	uuidOld = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidNew = "5c2bd8e4-0b4f-11ef-8a1d-0242ac120003"
)

func TestGTIDSet_HeldBy(t *testing.T) {
	tests := []struct {
		name, flavor, stored, state string
		want                        bool
	}{
		{"mysql: the promoted replica has the old primary's transactions and its own", FlavorMySQL,
			uuidOld + ":1-100", uuidOld + ":1-100," + uuidNew + ":1-5", true},
		{"mysql: the relay read the promoted replica's own transactions too", FlavorMySQL,
			uuidOld + ":1-100," + uuidNew + ":1-5", uuidNew + ":1-9," + uuidOld + ":1-100", true},
		{"mysql: the old primary's last transactions never reached the replica", FlavorMySQL,
			uuidOld + ":1-100", uuidOld + ":1-90," + uuidNew + ":1-20", false},
		{"mysql: a transaction of the new primary's the server lacks", FlavorMySQL,
			uuidOld + ":1-100," + uuidNew + ":1-5", uuidOld + ":1-100", false},
		{"mariadb: the promoted replica has the old primary's transactions and its own", FlavorMariaDB,
			"0-1-100", "0-1-100,0-2-150", true},
		{"mariadb: the old primary went on", FlavorMariaDB, "0-1-100", "0-1-120", true},
		{"mariadb: the old primary's last transactions never reached the replica, whose own numbers are higher", FlavorMariaDB,
			"0-1-100", "0-1-90,0-2-150", false},
		{"mariadb: a domain the server never had", FlavorMariaDB, "0-1-100,1-3-7", "0-1-100", false},
		{"mariadb: several domains", FlavorMariaDB, "0-2-101,1-3-7", "1-3-9, 0-1-100,0-2-140", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseGTIDSet(tt.flavor, tt.stored)
			if err != nil {
				t.Fatal(err)
			}
			got, err := set.HeldBy(tt.flavor, tt.state)
			if err != nil || got != tt.want {
				t.Errorf("%s held by %s: got %v, %v; want %v", tt.stored, tt.state, got, err, tt.want)
			}
		})
	}
}

func TestGTIDSet_HeldByInvalidState(t *testing.T) {
	for _, tt := range []struct{ flavor, stored, state string }{
		{FlavorMySQL, uuidOld + ":1-100", "0-1-100"},
		{FlavorMariaDB, "0-1-100", uuidOld + ":1-100"},
	} {
		set, err := ParseGTIDSet(tt.flavor, tt.stored)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := set.HeldBy(tt.flavor, tt.state); err == nil {
			t.Errorf("%s state %q: got no error", tt.flavor, tt.state)
		}
	}
	if _, err := (GTIDSet{}).HeldBy(FlavorMySQL, uuidOld+":1-100"); err == nil {
		t.Error("the zero set: got no error")
	}
}

// After a MySQL failover the relay's set gains the promoted server's uuid;
// the stored position keeps both, and resumes from exactly that set.
func TestBinlog_MySQLGTIDSetAcrossFailover(t *testing.T) {
	set, err := ParseGTIDSet(FlavorMySQL, uuidNew+":1-5,"+uuidOld+":1-100")
	if err != nil {
		t.Fatal(err)
	}
	b := Point{GTIDSet: set}.Binlog(FlavorMySQL)
	b.ServerID, b.ServerUUID = 2, uuidNew
	got, err := Decode(b.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.GTIDMode() || got.ServerUUID != uuidNew {
		t.Fatalf("decoded %+v; want a GTID position of server %s", got, uuidNew)
	}
	p, err := got.Point()
	if err != nil {
		t.Fatal(err)
	}
	if !p.GTIDSet.Equal(set) {
		t.Errorf("resumes from %s, want %s", p.GTIDSet, set)
	}
	for _, u := range []string{uuidOld + ":1-100", uuidNew + ":1-5"} {
		part, _ := ParseGTIDSet(FlavorMySQL, u)
		if held, err := part.HeldBy(FlavorMySQL, got.GTIDSet); err != nil || !held {
			t.Errorf("stored set %s does not hold %s (%v)", got.GTIDSet, u, err)
		}
	}
}

func TestGTIDSet_NeedsPurged(t *testing.T) {
	tests := []struct {
		name, flavor, set, purged, want string
	}{
		{"mariadb: nothing purged", FlavorMariaDB, "0-1-5", "", ""},
		{"mariadb: the oldest file starts before the set", FlavorMariaDB, "0-1-5", "0-1-3", ""},
		{"mariadb: the oldest file starts at the set", FlavorMariaDB, "0-1-5", "0-1-5", ""},
		{"mariadb: the oldest file starts after the set", FlavorMariaDB, "0-1-5", "0-1-9", "0-1-9"},
		{"mariadb: a domain the set lacks was purged", FlavorMariaDB, "0-1-5", "0-1-3,2-1-4", "2-1-4"},
		{"mariadb: no set yet", FlavorMariaDB, "", "0-1-3", "0-1-3"},
		{"mysql: the set holds the purged ones", FlavorMySQL, uuidOld + ":1-100", uuidOld + ":1-40", ""},
		{"mysql: purged past the set", FlavorMySQL, uuidOld + ":1-100", uuidOld + ":1-140", uuidOld + ":1-140"},
		{"mysql: another source's purged", FlavorMySQL, uuidOld + ":1-100", uuidNew + ":1-3", uuidNew + ":1-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s GTIDSet
			if tt.set != "" {
				var err error
				if s, err = ParseGTIDSet(tt.flavor, tt.set); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.NeedsPurged(tt.flavor, tt.purged)
			if err != nil || got != tt.want {
				t.Errorf("NeedsPurged(%q) of %q = %q, %v; want %q", tt.purged, tt.set, got, err, tt.want)
			}
		})
	}
}

func TestGTIDSet_MissingDomains(t *testing.T) {
	tests := []struct {
		set, state string
		want       []uint32
	}{
		{"0-1-5", "0-1-9", nil},
		{"0-1-5", "0-1-9,0-2-3", nil},
		{"1-1-5", "0-1-23", []uint32{0}},
		{"0-1-5", "7-1-1,0-1-9,3-2-2", []uint32{3, 7}},
	}
	for _, tt := range tests {
		s, err := ParseGTIDSet(FlavorMariaDB, tt.set)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.MissingDomains(tt.state)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("MissingDomains(%q) of %q = %v, %v; want %v", tt.state, tt.set, got, err, tt.want)
		}
	}
}
