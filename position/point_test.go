package position

import (
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

const testUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

func TestParseGTIDSet_RoundTrip(t *testing.T) {
	tests := []struct {
		flavor, in, want string
	}{
		{FlavorMariaDB, "0-1-42", "0-1-42"},
		{FlavorMariaDB, "1-2-7,0-1-42", "0-1-42,1-2-7"},
		{FlavorMySQL, testUUID + ":1-42", testUUID + ":1-42"},
		{FlavorMySQL, testUUID + ":1-5:7-9", testUUID + ":1-5:7-9"},
		{FlavorMySQL, testUUID + ":1-13:mytag:1-3", testUUID + ":1-13:mytag:1-3"},
		{FlavorMySQL, "", ""},
	}
	for _, tt := range tests {
		s, err := ParseGTIDSet(tt.flavor, tt.in)
		if err != nil {
			t.Errorf("ParseGTIDSet(%s, %q): %v", tt.flavor, tt.in, err)
			continue
		}
		if got := s.String(); got != tt.want {
			t.Errorf("ParseGTIDSet(%s, %q).String() = %q, want %q", tt.flavor, tt.in, got, tt.want)
		}
		again, err := ParseGTIDSet(tt.flavor, s.String())
		if err != nil || !again.Equal(s) {
			t.Errorf("ParseGTIDSet(%s, %q) parsed again = %v, %v; want equal", tt.flavor, s, again, err)
		}
	}
}

func TestParseGTIDSet_Invalid(t *testing.T) {
	for _, tt := range []struct{ flavor, in string }{
		{FlavorMariaDB, "0-1"},
		{FlavorMariaDB, "x-1-2"},
		{FlavorMySQL, "not-a-uuid:1-2"},
		{FlavorMySQL, testUUID + ":x"},
	} {
		if s, err := ParseGTIDSet(tt.flavor, tt.in); err == nil {
			t.Errorf("ParseGTIDSet(%s, %q) = %v, want an error", tt.flavor, tt.in, s)
		}
	}
}

func TestGTIDSet_Zero(t *testing.T) {
	var zero GTIDSet
	if !zero.IsZero() || zero.String() != "" || zero.GoMySQL() != nil {
		t.Errorf("zero GTIDSet: IsZero %v, String %q, GoMySQL %v; want true, \"\", nil", zero.IsZero(), zero.String(), zero.GoMySQL())
	}
	if !GTIDSetOf(nil).IsZero() {
		t.Error("GTIDSetOf(nil) is not zero")
	}
	set, err := ParseGTIDSet(FlavorMariaDB, "0-1-1")
	if err != nil {
		t.Fatal(err)
	}
	if zero.Equal(set) || set.Equal(zero) || !zero.Equal(GTIDSet{}) {
		t.Errorf("Equal with the zero set: zero=set %v, set=zero %v, zero=zero %v; want false, false, true",
			zero.Equal(set), set.Equal(zero), zero.Equal(GTIDSet{}))
	}
}

func TestGTID_String(t *testing.T) {
	sid, err := uuid.MustParse(testUUID).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tag := mysql.NewTag("mytag")
	tests := []struct {
		name string
		g    GTID
		want string
	}{
		{"none", GTID{}, ""},
		{"mariadb", MariaDBGTID(mysql.MariadbGTID{DomainID: 1, ServerID: 2, SequenceNumber: 3}), "1-2-3"},
		{"mysql", MySQLGTID(sid, mysql.Tag{}, 42), testUUID + ":42"},
		{"mysql tagged", MySQLGTID(sid, tag, 3), testUUID + ":mytag:3"},
		{"bad uuid", MySQLGTID([]byte{1, 2}, mysql.Tag{}, 42), ""},
	}
	for _, tt := range tests {
		if got := tt.g.String(); got != tt.want {
			t.Errorf("%s: String() = %q, want %q", tt.name, got, tt.want)
		}
		if tt.g.IsZero() != (tt.name == "none") {
			t.Errorf("%s: IsZero() = %v", tt.name, tt.g.IsZero())
		}
	}
}

func TestPoint_String(t *testing.T) {
	set, err := ParseGTIDSet(FlavorMariaDB, "0-1-42")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		p    Point
		want string
	}{
		{Point{File: "mysql-bin.000003", Pos: 4}, "mysql-bin.000003:4"},
		{Point{File: "mysql-bin.000003", Pos: 1234, GTIDSet: set}, "mysql-bin.000003:1234 gtid_set=0-1-42"},
		{Point{File: "b.1", Pos: 4, TxRows: 7, CommitTS: 99}, "b.1:4 (+7 rows of the next transaction)"},
		{Point{GTIDSet: set, TxRows: 1}, ":0 gtid_set=0-1-42 (+1 rows of the next transaction)"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.want)
		}
		// One rendering: the stored form says the same.
		if got := tt.p.Binlog(FlavorMariaDB).String(); got != tt.want {
			t.Errorf("%+v.Binlog().String() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestPoint_BinlogRoundTrip(t *testing.T) {
	sid, err := uuid.MustParse(testUUID).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mysqlSet, err := ParseGTIDSet(FlavorMySQL, testUUID+":1-13:mytag:1-3")
	if err != nil {
		t.Fatal(err)
	}
	mariaSet, err := ParseGTIDSet(FlavorMariaDB, "0-1-42,1-2-7")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		flavor   string
		p        Point
		lastGTID string
	}{
		{"file position", FlavorMySQL, Point{File: "binlog.000002", Pos: 791, TxRows: 3}, ""},
		{"mysql gtid", FlavorMySQL, Point{File: "binlog.000005", Pos: 4, GTIDSet: mysqlSet, LastGTID: MySQLGTID(sid, mysql.Tag{}, 13)}, testUUID + ":13"},
		{"mariadb gtid", FlavorMariaDB, Point{File: "mysql-bin.000001", Pos: 331, GTIDSet: mariaSet,
			LastGTID: MariaDBGTID(mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 42}), TxRows: 5}, "0-1-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.p.Binlog(tt.flavor)
			b.ServerID, b.Writer, b.Seq = 1, "w", 9
			stored, err := Decode(b.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if stored.LastGTID != tt.lastGTID || stored.Flavor != tt.flavor || stored.GTIDMode() == tt.p.GTIDSet.IsZero() {
				t.Errorf("stored %+v: want last_gtid %q, flavor %s, GTID mode %v", stored, tt.lastGTID, tt.flavor, !tt.p.GTIDSet.IsZero())
			}
			got, err := stored.Point()
			if err != nil {
				t.Fatal(err)
			}
			if got.File != tt.p.File || got.Pos != tt.p.Pos || got.TxRows != tt.p.TxRows || !got.GTIDSet.Equal(tt.p.GTIDSet) {
				t.Errorf("resumed at %s, want %s", got, tt.p)
			}
			if !got.LastGTID.IsZero() || got.CommitTS != 0 {
				t.Errorf("resumed point carries last GTID %q, commit time %d; want neither", got.LastGTID, got.CommitTS)
			}
		})
	}
}

func TestBinlog_PointInvalidGTIDSet(t *testing.T) {
	b := Binlog{Flavor: FlavorMariaDB, GTIDSet: testUUID + ":1-5"}
	if p, err := b.Point(); err == nil {
		t.Errorf("Point() of a MySQL set in a MariaDB position = %s, want an error", p)
	}
}

func TestCompare(t *testing.T) {
	mine := func(seq uint64) []byte {
		return Binlog{Flavor: FlavorMySQL, File: "b.1", Pos: 4, Writer: "me", Seq: seq}.Encode()
	}
	tests := []struct {
		name    string
		stored  []byte
		lastSeq uint64
		want    Mismatch
		wantErr error
	}{
		{"deleted", nil, 5, Mismatch{Kind: Deleted, LastSeq: 5}, outbox.ErrFenced},
		{"own older write", mine(3), 5, Mismatch{Kind: RolledBack, By: "me", StoredSeq: 3, LastSeq: 5}, outbox.ErrPositionRolledBack},
		{"own write, same seq", mine(5), 5, Mismatch{Kind: Fenced, By: "me", StoredSeq: 5, LastSeq: 5}, outbox.ErrFenced},
		{"own write, later seq", mine(7), 5, Mismatch{Kind: Fenced, By: "me", StoredSeq: 7, LastSeq: 5}, outbox.ErrFenced},
		{"another writer", Binlog{Flavor: FlavorMySQL, File: "b.1", Pos: 4, Writer: "other", Seq: 1}.Encode(), 5,
			Mismatch{Kind: Fenced, By: "other", StoredSeq: 1, LastSeq: 5}, outbox.ErrFenced},
		{"no writer", Binlog{Flavor: FlavorMySQL, File: "b.1", Pos: 4}.Encode(), 5, Mismatch{Kind: Fenced, LastSeq: 5}, outbox.ErrFenced},
		{"undecodable", []byte("garbage"), 5, Mismatch{Kind: Fenced, LastSeq: 5}, outbox.ErrFenced},
		// The marked position keeps the relay's writer and an older seq:
		// still the repair's, not a rollback to re-read from.
		{"marked by a repair", mine(3), 5, Mismatch{Kind: Repairing, By: "me", StoredSeq: 3, LastSeq: 5, Repair: testHold}, outbox.ErrRepairing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.Kind == Repairing {
				b, _ := Decode(tt.stored)
				tt.stored = b.HeldBy(testHold.Holder, testHold.Since).Encode()
			}
			got := Compare(tt.stored, "me", tt.lastSeq)
			if got != tt.want {
				t.Errorf("Compare = %+v, want %+v", got, tt.want)
			}
			err := got.Err()
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Err() = %v, want %v", err, tt.wantErr)
			}
			if (tt.wantErr == outbox.ErrFenced || tt.wantErr == outbox.ErrRepairing) && outbox.HintOf(err) == "" {
				t.Errorf("Err() = %v: a fenced relay stops; want a hint for the operator", err)
			}
		})
	}
}

func FuzzParseGTIDSet(f *testing.F) {
	for _, s := range []string{"0-1-42", "0-1-42,1-2-7", testUUID + ":1-5:7-9", testUUID + ":1-13:mytag:1-3"} {
		f.Add(FlavorMySQL, s)
		f.Add(FlavorMariaDB, s)
	}
	f.Fuzz(func(t *testing.T, flavor, s string) {
		if flavor != FlavorMySQL && flavor != FlavorMariaDB {
			return
		}
		set, err := ParseGTIDSet(flavor, s)
		if err != nil {
			return
		}
		// The stored form is the formatted one: formatting what it parses
		// to must give it back. (Sets are not always equal after the trip:
		// go-mysql leaves a MariaDB GTID with sequence number 0 out of
		// the text.)
		again, err := ParseGTIDSet(flavor, set.String())
		if err != nil || again.String() != set.String() {
			t.Fatalf("ParseGTIDSet(%s, %q) = %s; parsed again: %v, %v", flavor, s, set, again, err)
		}
	})
}

func TestFileAtOrPast(t *testing.T) {
	tests := []struct {
		file string
		pos  uint32
		want bool
	}{
		{"mysql-bin.000002", 100, false},
		{"mysql-bin.000002", 500, true},
		{"mysql-bin.000002", 900, true},
		{"mysql-bin.000001", 900, false},
		{"mysql-bin.000003", 4, true},
		{"mysql-bin.1000000", 4, true},
	}
	for _, tt := range tests {
		if got := FileAtOrPast(tt.file, tt.pos, "mysql-bin.000002", 500); got != tt.want {
			t.Errorf("FileAtOrPast(%s:%d, mysql-bin.000002:500) = %v, want %v", tt.file, tt.pos, got, tt.want)
		}
	}
	if FileAtOrPast("mysql-bin.999999", 4, "mysql-bin.1000000", 4) {
		t.Error("mysql-bin.999999 counted as after mysql-bin.1000000")
	}
}

func TestGTIDSet_Contains(t *testing.T) {
	tests := []struct {
		flavor, s, o string
		want         bool
	}{
		{FlavorMariaDB, "0-1-42", "0-1-42", true},
		{FlavorMariaDB, "0-1-42", "0-2-41", true},
		{FlavorMariaDB, "0-1-41", "0-1-42", false},
		{FlavorMariaDB, "0-1-42", "0-1-40,1-1-3", false},
		{FlavorMariaDB, "0-1-42,1-1-3", "1-1-3", true},
		{FlavorMySQL, testUUID + ":1-42", testUUID + ":1-40", true},
		{FlavorMySQL, testUUID + ":1-40", testUUID + ":1-42", false},
	}
	for _, tt := range tests {
		s, err1 := ParseGTIDSet(tt.flavor, tt.s)
		o, err2 := ParseGTIDSet(tt.flavor, tt.o)
		if err1 != nil || err2 != nil {
			t.Fatalf("parse %q, %q: %v, %v", tt.s, tt.o, err1, err2)
		}
		if got := s.Contains(o); got != tt.want {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.s, tt.o, got, tt.want)
		}
	}
	var zero GTIDSet
	set, _ := ParseGTIDSet(FlavorMariaDB, "0-1-1")
	if zero.Contains(set) || set.Contains(zero) {
		t.Error("a zero set contains, or is contained in, a set")
	}
}

func TestBinlog_Passed(t *testing.T) {
	maria := func(s string) GTIDSet {
		set, err := ParseGTIDSet(FlavorMariaDB, s)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	end := End{ServerID: 1, File: "mysql-bin.000002", Pos: 500, GTIDSet: maria("0-1-10")}
	tests := []struct {
		name    string
		b       Binlog
		e       End
		want    bool
		wantErr bool
	}{
		{"same server, before", Binlog{Flavor: FlavorMariaDB, ServerID: 1, File: "mysql-bin.000002", Pos: 400}, end, false, false},
		{"same server, at", Binlog{Flavor: FlavorMariaDB, ServerID: 1, File: "mysql-bin.000002", Pos: 500}, end, true, false},
		{"same server, next file", Binlog{Flavor: FlavorMariaDB, ServerID: 1, File: "mysql-bin.000003", Pos: 4}, end, true, false},
		// The file decides on one server, whatever the GTID set says.
		{"same server, file behind, set ahead", Binlog{Flavor: FlavorMariaDB, ServerID: 1, File: "mysql-bin.000001", Pos: 900, GTIDSet: "0-1-11"}, end, false, false},
		{"other server, set ahead", Binlog{Flavor: FlavorMariaDB, ServerID: 2, File: "mysql-bin.000009", Pos: 4, GTIDSet: "0-1-11"}, end, true, false},
		{"other server, set behind", Binlog{Flavor: FlavorMariaDB, ServerID: 2, File: "mysql-bin.000009", Pos: 4, GTIDSet: "0-1-9"}, end, false, false},
		{"other server, no set", Binlog{Flavor: FlavorMariaDB, ServerID: 2, File: "mysql-bin.000009", Pos: 4}, end, false, true},
		{"other uuid", Binlog{Flavor: FlavorMySQL, ServerID: 1, ServerUUID: testUUID, File: "mysql-bin.000009", Pos: 4},
			End{ServerID: 1, ServerUUID: "another", File: "mysql-bin.000002", Pos: 500}, false, true},
		{"other server, end without set", Binlog{Flavor: FlavorMariaDB, ServerID: 2, GTIDSet: "0-1-11"}, End{ServerID: 1, File: "mysql-bin.000002", Pos: 500}, false, true},
	}
	for _, tt := range tests {
		got, err := tt.b.Passed(tt.e)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: Passed = %v, %v; want %v, error %v", tt.name, got, err, tt.want, tt.wantErr)
		}
		if err != nil && got {
			t.Errorf("%s: passed with an error", tt.name)
		}
	}
}

func TestOrder(t *testing.T) {
	gtid := func(s string) GTIDSet {
		set, err := ParseGTIDSet(FlavorMySQL, s)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	tests := []struct {
		name string
		a, b Point
		want int
	}{
		{"same offset", Point{File: "b.000001", Pos: 100}, Point{File: "b.000001", Pos: 100}, 0},
		{"later offset", Point{File: "b.000001", Pos: 200}, Point{File: "b.000001", Pos: 100}, 1},
		{"earlier file", Point{File: "b.000001", Pos: 900}, Point{File: "b.000002", Pos: 4}, -1},
		{"longer file name is later", Point{File: "b.1000000", Pos: 4}, Point{File: "b.999999", Pos: 900}, 1},
		{"rows of one transaction", Point{File: "b.000001", Pos: 100, TxRows: 3}, Point{File: "b.000001", Pos: 100, TxRows: 5}, -1},
		{"gtid superset", Point{GTIDSet: gtid(testUUID + ":1-9"), File: "b.000001", Pos: 4}, Point{GTIDSet: gtid(testUUID + ":1-8"), File: "b.000009", Pos: 4}, 1},
		{"gtid subset", Point{GTIDSet: gtid(testUUID + ":1-8")}, Point{GTIDSet: gtid(testUUID + ":1-9")}, -1},
		{"gtid equal, rows", Point{GTIDSet: gtid(testUUID + ":1-8"), TxRows: 2}, Point{GTIDSet: gtid(testUUID + ":1-8")}, 1},
	}
	for _, tt := range tests {
		got, err := Order(tt.a, tt.b)
		if err != nil || got != tt.want {
			t.Errorf("%s: Order(%s, %s) = %d, %v; want %d", tt.name, tt.a, tt.b, got, err, tt.want)
		}
	}
	for _, tt := range []struct{ a, b Point }{
		{Point{GTIDSet: gtid(testUUID + ":1-8")}, Point{GTIDSet: gtid(testUUID + ":1-7:9")}},
		{Point{GTIDSet: gtid(testUUID + ":1-8")}, Point{File: "b.000001", Pos: 4}},
	} {
		if got, err := Order(tt.a, tt.b); err == nil {
			t.Errorf("Order(%s, %s) = %d, want an error", tt.a, tt.b, got)
		}
	}
}
