// Package charset turns the bytes of a MySQL text column into UTF-8 the way
// the server does for a connection whose character_set_results is utf8mb4.
//
// Poll mode reads rows through such a connection, so the server converts;
// binlog mode gets the bytes as the table stores them, so the reader
// converts with this package. Both modes must deliver the same bytes, so a
// character set is supported only where this package's table is the
// server's own, byte for byte (TestCharset_MatchesServer checks every byte
// against MariaDB). Others are refused by `check` before any row is read.
package charset

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
)

// Charset is a column's character set as the relay converts it. The zero
// value passes bytes as they are, as for a column the relay knows no
// character set of (a number, a BLOB).
type Charset struct {
	name string
	// table holds the UTF-8 of each byte; nil: the bytes are UTF-8
	// already, or no text at all (binary).
	table *[256]string
	// unsupported is true for a character set without a table.
	unsupported bool
}

// Names of the character sets that need no conversion: UTF-8 (MariaDB's
// utf8 is utf8mb3, a subset of utf8mb4) and binary strings.
var identity = []string{"utf8mb4", "utf8mb3", "utf8", "binary"}

var (
	latin1 = latin1Table()
	ascii  = asciiTable()
)

// Lookup returns the character set named as information_schema names it
// (CHARACTER_SET_NAME), in any letter case. ok is false for one the relay
// cannot convert as the server does; the Charset returned then says so
// (Unsupported) and keeps the name for messages. "" is the zero Charset.
func Lookup(name string) (c Charset, ok bool) {
	n := strings.ToLower(name)
	switch {
	case n == "":
		return Charset{}, true
	case n == "latin1":
		return Charset{name: n, table: latin1}, true
	case n == "ascii":
		return Charset{name: n, table: ascii}, true
	}
	for _, id := range identity {
		if n == id {
			return Charset{name: n}, true
		}
	}
	return Charset{name: n, unsupported: true}, false
}

// Supported names the character sets Lookup accepts besides binary, for
// messages.
const Supported = "utf8mb4, utf8mb3 (utf8), ascii and latin1"

// Name is the character set's name, "" for the zero Charset.
func (c Charset) Name() string { return c.name }

// Unsupported reports whether the relay has no conversion for c.
func (c Charset) Unsupported() bool { return c.unsupported }

// Converts reports whether c's bytes may differ from their UTF-8.
func (c Charset) Converts() bool { return c.table != nil }

// String returns s as UTF-8, always in a new string: the binlog decoder's
// strings alias a packet buffer that the syncer reuses.
func (c Charset) String(s string) string {
	i := firstChanged(c.table, s)
	if i < 0 {
		return strings.Clone(s)
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		b.WriteString(c.table[s[i]])
	}
	return b.String()
}

// Bytes returns p as UTF-8, always in a new slice (see String); nil stays
// nil.
func (c Charset) Bytes(p []byte) []byte {
	i := firstChanged(c.table, p)
	if i < 0 {
		return bytes.Clone(p)
	}
	out := make([]byte, i, len(p)+len(p)/2)
	copy(out, p[:i])
	for ; i < len(p); i++ {
		out = append(out, c.table[p[i]]...)
	}
	return out
}

// Changes reports whether Bytes(p) differs from p: false for UTF-8 and
// binary columns, and for text whose bytes are all ASCII.
func (c Charset) Changes(p []byte) bool { return firstChanged(c.table, p) >= 0 }

// firstChanged returns the index of the first byte table changes, -1 for
// none. Every table keeps ASCII as it is.
func firstChanged[T string | []byte](table *[256]string, s T) int {
	if table == nil {
		return -1
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return i
		}
	}
	return -1
}

// latin1Table is MySQL's latin1, which is Windows-1252 (€ at 0x80, ™ at
// 0x99), not ISO 8859-1; the five bytes Windows-1252 leaves undefined
// (0x81, 0x8D, 0x8F, 0x90, 0x9D) the server maps to the C1 controls of the
// same number, where x/text has U+FFFD.
func latin1Table() *[256]string {
	var t [256]string
	for i := range t {
		r := charmap.Windows1252.DecodeByte(byte(i))
		if r == utf8.RuneError {
			r = rune(i)
		}
		t[i] = string(r)
	}
	return &t
}

// asciiTable maps bytes beyond ASCII to '?', as the server converts them:
// an ascii column holds none unless a non-strict sql_mode let one in.
func asciiTable() *[256]string {
	var t [256]string
	for i := range t {
		t[i] = "?"
		if i < utf8.RuneSelf {
			t[i] = string(rune(i))
		}
	}
	return &t
}
