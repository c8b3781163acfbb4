package canal

import (
	"bytes"
	"strings"
)

// word is one token of a statement: a keyword or an identifier, unquoted.
type word struct {
	text   string
	quoted bool // `written like this`: an identifier, never a keyword
}

// is reports whether w is the keyword kw: unquoted, in any letter case.
func (w word) is(kw string) bool { return !w.quoted && strings.EqualFold(w.text, kw) }

// words splits the start of a statement into at most n words the way the
// server's lexer does for the transaction statements the machine reads:
// white space and comments (/* */, # and -- to the end of the line) between
// any two words are skipped, strings are kept whole, and quoted identifiers
// (backquoted, a doubled backquote standing for one, or "double-quoted"
// under ANSI_QUOTES) are unquoted. MySQL logs these statements as the
// client wrote them, comments and all; MariaDB logs a name as `quoted`.
// Reading stops at a semicolon.
func words(q []byte, n int) []word {
	var out []word
	for len(out) < n {
		q = skipSpace(q)
		if len(q) == 0 || q[0] == ';' {
			return out
		}
		switch c := q[0]; {
		case c == '`' || c == '"':
			text, rest := unquote(q)
			out = append(out, word{text: text, quoted: true})
			q = rest
		case c == '\'':
			// A string (an xid): kept as written, quotes and all.
			_, rest := unquote(q)
			out = append(out, word{text: string(q[:len(q)-len(rest)]), quoted: true})
			q = rest
		case isIdentByte(c):
			i := 1
			for i < len(q) && isIdentByte(q[i]) {
				i++
			}
			out = append(out, word{text: string(q[:i])})
			q = q[i:]
		default:
			// Punctuation (a comma, a parenthesis): a word of its own.
			out = append(out, word{text: string(q[:1])})
			q = q[1:]
		}
	}
	return out
}

// skipSpace drops white space and comments.
func skipSpace(q []byte) []byte {
	for {
		q = bytes.TrimLeft(q, " \t\r\n\f\v")
		switch {
		case bytes.HasPrefix(q, []byte("/*")):
			end := bytes.Index(q[2:], []byte("*/"))
			if end < 0 {
				return nil
			}
			q = q[end+4:]
		case bytes.HasPrefix(q, []byte("#")), bytes.HasPrefix(q, []byte("--")) && (len(q) == 2 || q[2] <= ' '):
			end := bytes.IndexByte(q, '\n')
			if end < 0 {
				return nil
			}
			q = q[end+1:]
		default:
			return q
		}
	}
}

// unquote reads the quoted identifier q starts with; a doubled quote inside
// stands for one. An unterminated quote takes the rest of the statement.
func unquote(q []byte) (text string, rest []byte) {
	quote := q[0]
	var b strings.Builder
	i := 1
	for i < len(q) {
		if q[i] != quote {
			b.WriteByte(q[i])
			i++
			continue
		}
		if i+1 < len(q) && q[i+1] == quote {
			b.WriteByte(quote)
			i += 2
			continue
		}
		return b.String(), q[i+1:]
	}
	return b.String(), nil
}

// isIdentByte reports bytes of unquoted identifiers and keywords; bytes of
// multi-byte UTF-8 characters count, as the server allows them in names.
func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// savepointOp is a statement about a savepoint.
type savepointOp int

const (
	notSavepoint        savepointOp = iota
	setSavepoint                    // SAVEPOINT name
	rollbackToSavepoint             // ROLLBACK [WORK] TO [SAVEPOINT] name
	releaseSavepoint                // RELEASE SAVEPOINT name
)

// parseSavepoint recognises the savepoint statements and returns the name
// they give, unquoted ("" when the statement has none).
func parseSavepoint(q []byte) (savepointOp, string) {
	w := words(q, 6)
	name := func(i int) string {
		if i < len(w) {
			return w[i].text
		}
		return ""
	}
	switch {
	case len(w) == 0:
		return notSavepoint, ""
	case w[0].is("SAVEPOINT"):
		return setSavepoint, name(1)
	case w[0].is("RELEASE") && len(w) > 1 && w[1].is("SAVEPOINT"):
		return releaseSavepoint, name(2)
	case w[0].is("ROLLBACK"):
		i := 1
		if i < len(w) && w[i].is("WORK") {
			i++
		}
		if i >= len(w) || !w[i].is("TO") {
			return notSavepoint, ""
		}
		i++
		// The SAVEPOINT keyword is optional; a savepoint may be named
		// savepoint, which ROLLBACK TO SAVEPOINT alone then names.
		if i+1 < len(w) && w[i].is("SAVEPOINT") {
			i++
		}
		return rollbackToSavepoint, name(i)
	}
	return notSavepoint, ""
}

// sameSavepoint compares savepoint names as the server does: in any letter
// case.
func sameSavepoint(a, b string) bool { return strings.EqualFold(a, b) }
