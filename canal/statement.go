package canal

import (
	"bytes"
	"strings"

	"github.com/binlog-outbox/binlog-outbox/internal/sqlscan"
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

// stripComments drops white space and the comments ORMs and query tags put
// around a statement, by the lexer's rules that words uses (skipSpace).
func stripComments(q []byte) []byte {
	return bytes.TrimRight(skipSpace(q), " \t\r\n\f\v")
}

// insertTarget parses the target table of INSERT, REPLACE and LOAD DATA.
func insertTarget(q []byte) (db, table string, ok bool) {
	words := strings.Fields(string(q[:min(len(q), 512)]))
	if len(words) == 0 {
		return "", "", false
	}
	i := 0
	switch strings.ToUpper(words[0]) {
	case "INSERT", "REPLACE":
		i = 1
		for i < len(words) {
			switch strings.ToUpper(words[i]) {
			case "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO":
				i++
				continue
			}
			break
		}
	case "LOAD":
		for i < len(words) && !strings.EqualFold(words[i], "TABLE") {
			i++
		}
		i++
	default:
		return "", "", false
	}
	if i >= len(words) {
		return "", "", false
	}
	name := words[i]
	if cut := strings.IndexAny(name, "(,"); cut > 0 {
		name = name[:cut]
	}
	db, table, qualified := strings.Cut(name, ".")
	if !qualified {
		db, table = "", db
	}
	return strings.Trim(db, "`"), strings.Trim(table, "`"), true
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// ddlTargets returns the tables that q, run with default schema def, names
// if it is a DDL statement and match accepts them, each as {database,
// table}, once. It errs on the side of yes (any mention of a table in an
// ALTER, RENAME, DROP, CREATE or TRUNCATE): a false yes costs a re-read of
// the layout, a false no a wrong mapping.
func ddlTargets(def, q []byte, match func(database, table string) bool) [][2]string {
	q = stripComments(q)
	ddl := false
	for _, kw := range []string{"ALTER", "RENAME", "DROP", "CREATE", "TRUNCATE"} {
		if hasPrefixFold(q, kw) && (len(q) == len(kw) || !isIdentByte(q[len(kw)])) {
			ddl = true
			break
		}
	}
	if !ddl {
		return nil
	}
	toks := identTokens(q)
	if !changesTables(toks) {
		return nil
	}
	var out [][2]string
	add := func(db, table string) {
		if !match(db, table) {
			return
		}
		for _, o := range out {
			if strings.EqualFold(o[0], db) && strings.EqualFold(o[1], table) {
				return
			}
		}
		out = append(out, [2]string{db, table})
	}
	for i, t := range toks {
		if t.dot || t.name == "" {
			continue
		}
		qualified := i >= 2 && toks[i-1].dot && !toks[i-2].dot && toks[i-2].name != ""
		qualifier := i+1 < len(toks) && toks[i+1].dot
		switch {
		case qualified:
			add(toks[i-2].name, t.name)
		case !qualifier:
			add(string(def), t.name)
		case i+2 < len(toks) && !toks[i+2].dot:
			// table.column: the table, unqualified.
			add(string(def), t.name)
		}
	}
	return out
}

// changesTables reports whether a DDL statement's object, the first of its
// words that names a kind of object, can change a table's columns. A
// routine, trigger, event or view whose body names the outbox table leaves
// the table as it is, and was logged as "DDL on the outbox table" (issue 41).
func changesTables(toks []token) bool {
	for _, t := range toks[:min(len(toks), 16)] {
		switch strings.ToUpper(t.name) {
		case "PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "VIEW", "USER", "ROLE", "SERVER", "PACKAGE":
			return false
		case "TABLE", "TABLES", "INDEX", "DATABASE", "SCHEMA", "SEQUENCE":
			return true
		}
	}
	return true
}

// token is an identifier or a dot of a statement; a token with neither
// stands for other punctuation or a string literal, which end a qualified
// name.
type token struct {
	name string
	dot  bool
}

// identTokens splits a statement into identifiers (bare, `quoted` or
// "quoted") and the dots between them. String literals and comments are
// skipped, but not the executable comments /*! ... */ and /*M! ... */,
// whose text runs.
func identTokens(q []byte) []token {
	var toks []token
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '.':
			toks = append(toks, token{dot: true})
			i++
		case c == '\'':
			i = sqlscan.QuoteEnd(q, i)
			toks = append(toks, token{})
		case c == '`' || c == '"':
			end := sqlscan.QuoteEnd(q, i)
			inner := q[i+1 : max(i+1, end-1)]
			toks = append(toks, token{name: strings.ReplaceAll(string(inner), string([]byte{c, c}), string(c))})
			i = end
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if i+2 < len(q) && (q[i+2] == '!' || q[i+2] == 'M') {
				i += 2 // executable comment: read its text
				continue
			}
			end := strings.Index(string(q[i+2:]), "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case c == '#' || (c == '-' && i+2 < len(q) && q[i+1] == '-' && (q[i+2] == ' ' || q[i+2] == '\t')):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case isIdentByte(c):
			start := i
			for i < len(q) && isIdentByte(q[i]) {
				i++
			}
			toks = append(toks, token{name: string(q[start:i])})
		default:
			toks = append(toks, token{})
			i++
		}
	}
	return toks
}
