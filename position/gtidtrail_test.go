package position

import (
	"strconv"
	"sync"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

var trailSID = uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")

func mysqlTrailGTID(gno int64) GTID {
	sid, _ := trailSID.MarshalBinary()
	return MySQLGTID(sid, mysql.Tag{}, gno)
}

func mariaTrailGTID(domain, server uint32, seq uint64) GTID {
	return MariaDBGTID(mysql.MariadbGTID{DomainID: domain, ServerID: server, SequenceNumber: seq})
}

func TestGTIDSet_With(t *testing.T) {
	tests := []struct {
		name, flavor, start string
		add                 []GTID
		want                []string // the set after each GTID
	}{
		{name: "MariaDB, one domain", flavor: FlavorMariaDB, start: "0-1-9",
			add: []GTID{mariaTrailGTID(0, 1, 10), mariaTrailGTID(0, 1, 11)}, want: []string{"0-1-10", "0-1-11"}},
		{name: "MariaDB, a new domain and a new server", flavor: FlavorMariaDB, start: "0-1-9",
			add: []GTID{mariaTrailGTID(1, 1, 1), mariaTrailGTID(0, 2, 10)}, want: []string{"0-1-9,1-1-1", "0-2-10,1-1-1"}},
		{name: "MariaDB, from the empty set", flavor: FlavorMariaDB, start: "",
			add: []GTID{mariaTrailGTID(0, 1, 1)}, want: []string{"0-1-1"}},
		{name: "MySQL, in order", flavor: FlavorMySQL, start: trailSID.String() + ":1-4",
			add: []GTID{mysqlTrailGTID(5), mysqlTrailGTID(6)}, want: []string{trailSID.String() + ":1-5", trailSID.String() + ":1-6"}},
		{name: "MySQL, a gap", flavor: FlavorMySQL, start: trailSID.String() + ":1-4",
			add: []GTID{mysqlTrailGTID(7)}, want: []string{trailSID.String() + ":1-4:7"}},
		{name: "MySQL, tagged", flavor: FlavorMySQL, start: trailSID.String() + ":1-4",
			add: []GTID{MySQLGTID(trailSID[:], mustTag(t, "mytag"), 1)}, want: []string{trailSID.String() + ":1-4:mytag:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, err := ParseGTIDSet(tt.flavor, tt.start)
			if err != nil {
				t.Fatal(err)
			}
			before := start.String()
			sets := []GTIDSet{}
			s := start
			for _, g := range tt.add {
				if s, err = s.With(g); err != nil {
					t.Fatal(err)
				}
				sets = append(sets, s)
			}
			// Work them out newest first: each must still be its own.
			for i := len(sets) - 1; i >= 0; i-- {
				if got := sets[i].String(); got != tt.want[i] {
					t.Errorf("after GTID %d: %s, want %s", i, got, tt.want[i])
				}
			}
			if start.String() != before {
				t.Errorf("the start set changed: %s, was %s", start, before)
			}
			want, _ := ParseGTIDSet(tt.flavor, tt.want[len(tt.want)-1])
			if last := sets[len(sets)-1]; !last.Equal(want) || !want.Equal(last) || !last.Contains(start) {
				t.Errorf("%s: Equal to %s or Contains %s is false", last, want, start)
			}
		})
	}
}

func mustTag(t *testing.T, s string) mysql.Tag {
	t.Helper()
	tag := mysql.NewTag(s)
	if tag.String() != s {
		t.Fatalf("tag %q reads back as %q", s, tag.String())
	}
	return tag
}

func TestGTIDSet_WithRefuses(t *testing.T) {
	maria, _ := ParseGTIDSet(FlavorMariaDB, "0-1-1")
	my, _ := ParseGTIDSet(FlavorMySQL, trailSID.String()+":1")
	for name, c := range map[string]struct {
		s GTIDSet
		g GTID
	}{
		"MySQL GTID on a MariaDB set": {maria, mysqlTrailGTID(2)},
		"MariaDB GTID on a MySQL set": {my, mariaTrailGTID(0, 1, 2)},
		"short source uuid":           {my, MySQLGTID([]byte{1, 2, 3}, mysql.Tag{}, 2)},
	} {
		if _, err := c.s.With(c.g); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if s, err := (GTIDSet{}).With(mariaTrailGTID(0, 1, 1)); err != nil || !s.IsZero() {
		t.Errorf("the zero set with a GTID: %v, %v; want the zero set", s, err)
	}
	if s, err := maria.With(GTID{}); err != nil || s.String() != "0-1-1" {
		t.Errorf("no GTID: %v, %v; want the set unchanged", s, err)
	}
}

// TestGTIDSet_WithShared works out the sets of one trail on several
// goroutines while it grows, as a reader and its flusher share positions
// (run with -race).
func TestGTIDSet_WithShared(t *testing.T) {
	s, _ := ParseGTIDSet(FlavorMariaDB, "0-1-0")
	const n = 2000
	sets := make(chan GTIDSet, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for set := range sets {
				_ = set.String()
			}
		}()
	}
	all := make([]GTIDSet, 0, n)
	for i := 1; i <= n; i++ {
		var err error
		if s, err = s.With(mariaTrailGTID(0, 1, uint64(i))); err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
		sets <- s
	}
	close(sets)
	wg.Wait()
	// However long the trail, the steps kept stay bounded.
	links := 0
	for st := s.step; st != nil; st = st.prev.Load() {
		links++
	}
	if links > maxTrail {
		t.Errorf("the last set keeps %d steps, want at most %d", links, maxTrail)
	}
	for i, set := range all {
		want := mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: uint64(i + 1)}
		if got := set.String(); got != want.String() {
			t.Fatalf("set %d: %s, want %s", i, got, want.String())
		}
	}
}

// TestGTIDSet_WithBoundsTheTrail grows a set far past maxTrail with nobody
// using it, as a relay reading only other tables' transactions does between
// stored positions: it keeps at most maxTrail steps.
func TestGTIDSet_WithBoundsTheTrail(t *testing.T) {
	s, _ := ParseGTIDSet(FlavorMariaDB, "0-1-0")
	for i := 1; i <= 3*maxTrail+7; i++ {
		var err error
		if s, err = s.With(mariaTrailGTID(0, 1, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	links := 0
	for st := s.step; st != nil; st = st.prev.Load() {
		links++
	}
	if links > maxTrail {
		t.Errorf("the set keeps %d steps, want at most %d", links, maxTrail)
	}
	if got, want := s.String(), "0-1-"+strconv.Itoa(3*maxTrail+7); got != want {
		t.Errorf("set %s, want %s", got, want)
	}
}
