// Package sqlscan walks SQL text the way the server's lexer splits it into
// quoted and unquoted parts, so that a parenthesis, a comma or a keyword
// inside a string or a quoted name is never taken for syntax. The relay reads
// SQL in three places (SHOW GRANTS output, SHOW CREATE TABLE output, and the
// statements in the binlog); they share these rules, so that one cannot
// drift from the others.
package sqlscan

// Text is SQL as a string or as bytes, as the binlog gives it.
type Text interface{ ~string | ~[]byte }

// IsQuote reports whether c opens a quoted token: a 'string', a "string"
// (an identifier under ANSI_QUOTES) or a `name`.
func IsQuote(c byte) bool { return c == '\'' || c == '"' || c == '`' }

// QuoteEnd returns the index just after the quoted token that starts at
// s[i] (one of IsQuote), or len(s) when it is not closed. Inside, the quote
// character doubled stands for itself. In strings ('...' and "...") a
// backslash escapes the next byte, as the server reads them unless
// sql_mode has NO_BACKSLASH_ESCAPES; in a `name` it is an ordinary byte.
func QuoteEnd[T Text](s T, i int) int {
	quote := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if quote != '`' {
				j++
			}
		case quote:
			if j+1 < len(s) && s[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(s)
}

// TopLevel calls fn with the index of every byte of s outside quoted tokens
// and parentheses, in order, until fn returns false.
func TopLevel[T Text](s T, fn func(i int) bool) {
	unquoted(s, 0, func(i, depth int) bool {
		return depth != 0 || s[i] == ')' || fn(i)
	})
}

// MatchParen returns the index of the parenthesis that closes the one at
// s[open], or -1 when it is not closed.
func MatchParen[T Text](s T, open int) int {
	end := -1
	unquoted(s, open, func(i, depth int) bool {
		if depth == 0 && s[i] == ')' {
			end = i
			return false
		}
		return true
	})
	return end
}

// unquoted calls fn with the index of every byte of s from i on outside
// quoted tokens, and the depth of parentheses just after it (counted from
// 0 at i), until fn returns false.
func unquoted[T Text](s T, i int, fn func(i, depth int) bool) {
	depth := 0
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case IsQuote(c):
			i = QuoteEnd(s, i) - 1
			continue
		case c == '(':
			depth++
		case c == ')':
			depth--
		}
		if !fn(i, depth) {
			return
		}
	}
}
