package position

import (
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParseStart(t *testing.T) {
	tests := []struct {
		in      string
		want    Start
		wantErr bool
	}{
		{in: "", want: Start{Kind: StartNow}},
		{in: "now", want: Start{Kind: StartNow}},
		{in: "EARLIEST", want: Start{Kind: StartEarliest}},
		{in: "mysql-bin.000003:4", want: Start{Kind: StartFilePos, File: "mysql-bin.000003", Pos: 4}},
		{in: "binlog.000123:98765", want: Start{Kind: StartFilePos, File: "binlog.000123", Pos: 98765}},
		{in: "0-1-42", want: Start{Kind: StartGTID, GTIDSet: "0-1-42"}},
		{in: "0-1-42,1-2-7", want: Start{Kind: StartGTID, GTIDSet: "0-1-42,1-2-7"}},
		{in: "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5", want: Start{Kind: StartGTID, GTIDSet: "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"}},
		{in: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4e11fa47-71ca-11e1-9e33-c80aa9429562:1", want: Start{Kind: StartGTID, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4e11fa47-71ca-11e1-9e33-c80aa9429562:1"}},
		{in: "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_1:1-5", want: Start{Kind: StartGTID, GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_1:1-5"}},
		{in: "mysql-bin.000003:3", wantErr: true},
		{in: "mysql-bin.000003:99999999999", wantErr: true},
		{in: "mysql-bin.000003", wantErr: true},
		{in: "yesterday", wantErr: true},
		{in: "0-1-42,3e11fa47-71ca-11e1-9e33-c80aa9429562:1", wantErr: true},
		{in: "../etc/passwd.1:4", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseStart(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseStart(%q) = %+v, want an error", tt.in, got)
			} else if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
				t.Errorf("ParseStart(%q) error %v: want ErrConfig with a hint", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseStart(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseStart(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestBinlog_EncodeDecode(t *testing.T) {
	in := Binlog{Flavor: FlavorMariaDB, ServerID: 1, File: "mysql-bin.000001", Pos: 1234, LastGTID: "0-1-9",
		TxRows: 7, Writer: "w1", Seq: 3, UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	out, err := Decode(in.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

// testHold is a repair's hold of a position, as repair --apply marks it.
var testHold = RepairHold{Holder: "repair host1/42", Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

// TestBinlog_RepairHold: a position marked by repair keeps its coordinates
// through Encode and Decode and refuses a relay; one written before the
// mark existed (no "repair" field) decodes as unmarked, and an unmarked
// one encodes without the field, as before.
func TestBinlog_RepairHold(t *testing.T) {
	old := []byte(`{"flavor":"mariadb","server_id":1,"file":"mysql-bin.000001","pos":1234,"gtid_set":"0-1-9","writer":"w1","seq":3,"updated_at":"2026-01-02T03:04:05Z"}`)
	tests := []struct {
		name      string
		raw       []byte
		repairing bool
	}{
		{"written before the mark existed", old, false},
		{"an empty mark", []byte(`{"flavor":"mariadb","gtid_set":"0-1-9","updated_at":"2026-01-02T03:04:05Z","repair":{}}`), false},
		{"marked", []byte(`{"flavor":"mariadb","server_id":1,"file":"mysql-bin.000001","pos":1234,"gtid_set":"0-1-9","writer":"w1","seq":3,"updated_at":"2026-01-02T03:04:05Z","repair":{"holder":"repair host1/42","since":"2026-01-02T03:04:05Z"}}`), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Decode(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			if b.Repairing() != tt.repairing {
				t.Fatalf("Repairing() = %v, want %v (%+v)", b.Repairing(), tt.repairing, b.Repair)
			}
			err = b.RepairError("k")
			if tt.repairing != (err != nil) {
				t.Fatalf("RepairError() = %v, want an error: %v", err, tt.repairing)
			}
			if tt.repairing && (!errors.Is(err, outbox.ErrRepairing) || !strings.Contains(err.Error(), testHold.String()) || !strings.Contains(outbox.HintOf(err), "repair --apply")) {
				t.Errorf("RepairError() = %v (hint %q): want ErrRepairing naming %s and the way on", err, outbox.HintOf(err), testHold)
			}
			if !tt.repairing && strings.Contains(string(b.Encode()), `"repair"`) {
				t.Errorf("Encode() = %s: an unmarked position carries no repair field", b.Encode())
			}
		})
	}
	b, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	marked := b.HeldBy(testHold.Holder, testHold.Since)
	got, err := Decode(marked.Encode())
	if err != nil || got != marked || got.String() != b.String() {
		t.Fatalf("marked round trip: %+v, %v; want %+v at %s", got, err, marked, b)
	}
	if p, _ := got.Point(); p.String() != b.String() {
		t.Errorf("Point() of the marked position = %s, want %s", p, b)
	}
}

func TestDecode_Invalid(t *testing.T) {
	for _, in := range []string{
		``, `{}`, `not json`, `{"flavor":"oracle","file":"a.1","pos":4}`,
		`{"flavor":"mysql","file":"","pos":4}`, `{"flavor":"mysql","file":"a.1","pos":1}`,
		`{"flavor":"mysql","file":"a.1","pos":4,"unknown":1}`,
		`{"flavor":"mysql","file":"a.1","pos":4,"repair":{"holder":"r"}}`,
		`{"flavor":"mysql","file":"a.1","pos":4,"repair":{"since":"2026-01-02T03:04:05Z"}}`,
	} {
		if b, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", in, b)
		}
	}
}

func FuzzParseStart(f *testing.F) {
	for _, s := range []string{"now", "earliest", "mysql-bin.000001:4", "0-1-2", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStart(s)
		if err != nil {
			return
		}
		if st.Kind == StartFilePos && (st.File == "" || st.Pos < 4) {
			t.Fatalf("ParseStart(%q) = %+v: file position without file or before 4", s, st)
		}
		if st.Kind == StartGTID && st.GTIDSet == "" {
			t.Fatalf("ParseStart(%q) = %+v: empty GTID set", s, st)
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add(Binlog{Flavor: FlavorMySQL, File: "b.1", Pos: 4}.Encode())
	f.Add([]byte(`{"flavor":"mariadb","gtid_set":"0-1-1"}`))
	f.Add(Binlog{Flavor: FlavorMySQL, File: "b.1", Pos: 4}.HeldBy(testHold.Holder, testHold.Since).Encode())
	f.Add([]byte(`{"flavor":"mariadb","gtid_set":"0-1-1","repair":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data)
		if err != nil {
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid position %+v: %v", b, err)
		}
		again, err := Decode(b.Encode())
		if err != nil || again != b {
			t.Fatalf("re-decode of %+v: %+v, %v", b, again, err)
		}
	})
}

// TestResumesByGTID is the decision between GTID and file positions: every
// MariaDB transaction has a GTID, MySQL's only with gtid_mode ON.
func TestResumesByGTID(t *testing.T) {
	tests := []struct {
		flavor, gtidMode string
		want             bool
	}{
		{FlavorMariaDB, "", true},
		{FlavorMariaDB, "OFF", true}, // MariaDB has no gtid_mode; whatever it says
		{FlavorMySQL, "ON", true},
		{FlavorMySQL, "on", true},
		{FlavorMySQL, "OFF", false},
		{FlavorMySQL, "OFF_PERMISSIVE", false},
		{FlavorMySQL, "ON_PERMISSIVE", false},
		{FlavorMySQL, "", false},
	}
	for _, tt := range tests {
		if got := ResumesByGTID(tt.flavor, tt.gtidMode); got != tt.want {
			t.Errorf("ResumesByGTID(%s, %q) = %v, want %v", tt.flavor, tt.gtidMode, got, tt.want)
		}
	}
}

// TestBinlog_EmptyGTIDSet: a GTID position of a server whose binlog holds no
// transaction before the start has an empty set; it stays a GTID position
// through Encode, Decode and Point, and renders as such.
func TestBinlog_EmptyGTIDSet(t *testing.T) {
	for _, flavor := range []string{FlavorMariaDB, FlavorMySQL} {
		set, err := ParseGTIDSet(flavor, "")
		if err != nil {
			t.Fatal(err)
		}
		b := Point{File: "mysql-bin.000001", Pos: 4, GTIDSet: set}.Binlog(flavor)
		if !b.EmptyGTIDSet || !b.GTIDMode() {
			t.Fatalf("%s: Binlog() = %+v, want a GTID position with the empty set", flavor, b)
		}
		got, err := Decode(b.Encode())
		if err != nil {
			t.Fatal(err)
		}
		p, err := got.Point()
		if err != nil || p.GTIDSet.IsZero() || p.GTIDSet.String() != "" {
			t.Errorf("%s: Point() = %+v, %v; want the empty GTID set", flavor, p, err)
		}
		if s := got.String(); !strings.Contains(s, "gtid_set=(empty)") {
			t.Errorf("%s: String() = %q, want it to say the empty GTID set", flavor, s)
		}
		if b := (Point{File: "mysql-bin.000001", Pos: 4}).Binlog(flavor); b.EmptyGTIDSet || b.GTIDMode() {
			t.Errorf("%s: a file position became %+v", flavor, b)
		}
	}
	if err := (Binlog{Flavor: FlavorMariaDB, GTIDSet: "0-1-2", EmptyGTIDSet: true}).Validate(); err == nil {
		t.Error("Validate() accepted empty_gtid_set beside a gtid_set")
	}
}
