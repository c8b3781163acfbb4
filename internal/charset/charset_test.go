package charset

import (
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestMain stops the shared MariaDB afterwards: without it the server
// outlived the test binary.
func TestMain(m *testing.M) { testsvc.Main(m) }

func TestCharset_Convert(t *testing.T) {
	tests := []struct {
		charset string
		in      string
		want    string
	}{
		{"latin1", "caf\xe9 \x80 \x99", "café € ™"},
		{"LATIN1", "\x81\x8d\x8f\x90\x9d", "\u0081\u008d\u008f\u0090\u009d"},
		{"latin1", "plain ascii", "plain ascii"},
		{"latin1", "", ""},
		{"ascii", "a\xe9b", "a?b"},
		{"utf8mb4", "café €", "café €"},
		{"utf8", "caf\xc3\xa9", "café"},
		{"binary", "\x00\xff\xfe", "\x00\xff\xfe"},
		{"", "\xe9", "\xe9"},
	}
	for _, tt := range tests {
		t.Run(tt.charset+" "+tt.in, func(t *testing.T) {
			c, ok := Lookup(tt.charset)
			if !ok || c.Unsupported() {
				t.Fatalf("Lookup(%q) = %+v, %v; want supported", tt.charset, c, ok)
			}
			if got := c.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := c.Bytes([]byte(tt.in)); string(got) != tt.want {
				t.Errorf("Bytes(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestLookup_Unsupported(t *testing.T) {
	for _, name := range []string{"latin2", "cp1250", "sjis", "utf16", "gbk", "koi8r"} {
		c, ok := Lookup(name)
		if ok || !c.Unsupported() || c.Name() != name {
			t.Errorf("Lookup(%q) = %+v, %v; want unsupported, named %q", name, c, ok, name)
		}
	}
}

// TestCharset_MatchesServer converts every byte of each character set that
// needs a table, and checks it against what MariaDB answers for the same
// byte converted to utf8mb4: poll mode's bytes are the server's.
func TestCharset_MatchesServer(t *testing.T) {
	db := testsvc.SharedMariaDB(t).Open(t, "")
	for _, name := range []string{"latin1", "ascii"} {
		c, _ := Lookup(name)
		for b := 0; b < 256; b++ {
			var server []byte
			q := fmt.Sprintf("SELECT CONVERT(CONVERT(UNHEX('%02X') USING %s) USING utf8mb4)", b, name)
			if err := db.QueryRow(q).Scan(&server); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			got := c.String(string([]byte{byte(b)}))
			if got != string(server) {
				t.Errorf("%s byte %#02x: got %q, the server %q", name, b, got, server)
			}
			if !utf8.ValidString(got) {
				t.Errorf("%s byte %#02x: %q is no UTF-8", name, b, got)
			}
		}
	}
}

func BenchmarkCharset_Latin1(b *testing.B) {
	c, _ := Lookup("latin1")
	p := []byte(`{"name":"Café Zürich","price":"12 €","mark":"Brand™"}`)
	for i := range p {
		if p[i] >= 0x80 {
			p[i] = 0xe9 // a latin1 é in place of each UTF-8 byte
		}
	}
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		_ = c.Bytes(p)
	}
}
