// Package dotenv reads .env files the way vlucas/phpdotenv (v5, Laravel's
// loader) does, so that the relay sees the values a Laravel application sees
// in the same file: comments, single and double quotes, `export `, empty
// values, multi-line double-quoted values and ${VAR} interpolation. It
// follows phpdotenv 5.6, which current Laravel releases install. Where
// phpdotenv drops entries without a word (a double quote no line closes), it
// refuses the file instead.
//
// Errors name the line and the key, never the value: a .env holds passwords.
package dotenv

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SyntaxError is a line phpdotenv would refuse to load. It carries no part
// of the value.
type SyntaxError struct {
	// Line is the 1-based line the entry starts on.
	Line int
	// Key is the entry's name when it was read, "" before that.
	Key string
	// Reason says what is wrong, in phpdotenv's terms.
	Reason string
}

func (e *SyntaxError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	}
	return fmt.Sprintf("line %d (%s): %s", e.Line, e.Key, e.Reason)
}

// Parse reads the content of a .env file into its variables. An entry
// without "=" unsets the name, as phpdotenv's loader does; a later entry of
// a name replaces an earlier one. ${NAME} in an unquoted or double-quoted
// value is replaced by NAME's value from the earlier entries or, for a name
// the file has not set, from lookup (the process environment; nil for none);
// an unknown name stays as written, as phpdotenv leaves it. A UTF-8 byte
// order mark at the start, which Windows editors write, is dropped, as
// phpdotenv's file reader drops it.
func Parse(content string, lookup func(string) (string, bool)) (map[string]string, error) {
	content = strings.TrimPrefix(content, utf8BOM)
	vars := map[string]string{}
	resolve := func(name string) (string, bool) {
		if v, ok := vars[name]; ok {
			return v, true
		}
		if lookup != nil {
			return lookup(name)
		}
		return "", false
	}
	list, err := entries(splitLines(content))
	if err != nil {
		return nil, err
	}
	for _, e := range list {
		rawName, rawValue, hasValue := strings.Cut(e.text, "=")
		if hasValue {
			rawName = trim(rawName)
		}
		name, err := parseName(rawName)
		if err != nil {
			return nil, &SyntaxError{Line: e.line, Reason: err.Error()}
		}
		if !hasValue {
			delete(vars, name)
			continue
		}
		v, err := parseValue(trim(rawValue))
		if err != nil {
			return nil, &SyntaxError{Line: e.line, Key: name, Reason: err.Error()}
		}
		vars[name] = v.resolve(resolve)
	}
	return vars, nil
}

// utf8BOM is the UTF-8 byte order mark.
const utf8BOM = "\uFEFF"

// entry is one entry's text (several lines for a multi-line value) and the
// line it starts on.
type entry struct {
	text string
	line int
}

// entries groups the lines into entries as phpdotenv does: a line with =" that
// does not close its quote goes on up to the next line with a quote. It drops
// blank lines and comments.
func entries(lines []string) ([]entry, error) {
	var out []entry
	var buf []string
	start := 0
	for i, line := range lines {
		if buf == nil && strings.Contains(line, `="`) && !closesQuote(line, true) {
			buf, start = []string{line}, i+1
			continue
		}
		if buf != nil {
			buf = append(buf, line)
			if !closesQuote(line, false) {
				continue
			}
			line = strings.Join(buf, "\n")
			buf = nil
		} else {
			start = i + 1
		}
		if !isBlankOrComment(line) {
			out = append(out, entry{text: line, line: start})
		}
	}
	if buf != nil {
		// phpdotenv drops such an entry, and every one after it, without a
		// word; a relay connecting without them would be worse off.
		key, _, _ := strings.Cut(buf[0], "=")
		key, _ = parseName(trim(key))
		return nil, &SyntaxError{Line: start, Key: key, Reason: "a missing closing quote (no later line closes the double quote)"}
	}
	return out, nil
}

// closesQuote is phpdotenv's test for the end of a multi-line value: the
// line counts a double quote after a character other than a backslash (two
// such quotes on the line that opens the value).
func closesQuote(line string, opening bool) bool {
	if line == `"` {
		return true
	}
	line = strings.ReplaceAll(line, `\\`, "")
	n := 0
	for i := 0; i+1 < len(line); i++ {
		if line[i] != '\\' && line[i+1] == '"' {
			n++
		}
	}
	if opening {
		return n > 1
	}
	return n >= 1
}

// splitLines splits on \r\n, \n and \r, as phpdotenv does.
func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Split(s, "\n")
}

// trim drops what PHP's trim() drops by default.
func trim(s string) string { return strings.Trim(s, " \n\r\t\x00\x0b") }

func isBlankOrComment(line string) bool {
	t := trim(line)
	return t == "" || t[0] == '#'
}

// isSpace is PHP's ctype_space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func parseName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("an unexpected equals")
	}
	if utf8.RuneCountInString(name) > 8 && strings.HasPrefix(name, "export") && isSpace(name[6]) {
		name = strings.TrimLeft(name[6:], " \t\n\r\v\f")
	}
	if len(name) >= 3 && (name[0] == '"' && name[len(name)-1] == '"' || name[0] == '\'' && name[len(name)-1] == '\'') {
		name = name[1 : len(name)-1]
	}
	if !validName(name) {
		return "", fmt.Errorf("an invalid name")
	}
	return name, nil
}

// validName: letters (upper and lower case), marks, numbers, '_' and '.'.
func validName(name string) bool {
	if name == "" || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if !(unicode.In(r, unicode.Ll, unicode.Lu, unicode.M, unicode.N) || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// The states of a value, phpdotenv's.
const (
	stInitial = iota
	stUnquoted
	stSingle
	stDouble
	stEscape
	stWhitespace
	stComment
)

// value is a parsed value before interpolation: its text and where a '$'
// that may start ${NAME} stands in it.
type value struct {
	text []byte
	vars []int
}

func parseValue(raw string) (value, error) {
	var v value
	state := stInitial
	dollar := func() { v.vars = append(v.vars, len(v.text)); v.text = append(v.text, '$') }
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch state {
		case stInitial, stUnquoted:
			switch {
			case c == '\'' && state == stInitial:
				state = stSingle
			case c == '"' && state == stInitial:
				state = stDouble
			case c == '#':
				state = stComment
			case isSpace(c) && state == stUnquoted:
				state = stWhitespace
			case c == '$':
				dollar()
				state = stUnquoted
			default:
				v.text = append(v.text, c)
				state = stUnquoted
			}
		case stSingle:
			if c == '\'' {
				state = stWhitespace
			} else {
				v.text = append(v.text, c)
			}
		case stDouble:
			switch c {
			case '"':
				state = stWhitespace
			case '\\':
				state = stEscape
			case '$':
				dollar()
			default:
				v.text = append(v.text, c)
			}
		case stEscape:
			switch c {
			case '"', '\\', '$':
				v.text = append(v.text, c)
			case 'f':
				v.text = append(v.text, '\f')
			case 'n':
				v.text = append(v.text, '\n')
			case 'r':
				v.text = append(v.text, '\r')
			case 't':
				v.text = append(v.text, '\t')
			case 'v':
				v.text = append(v.text, '\v')
			default:
				return value{}, fmt.Errorf("an unexpected escape sequence")
			}
			state = stDouble
		case stWhitespace:
			switch {
			case c == '#':
				state = stComment
			case !isSpace(c):
				return value{}, fmt.Errorf("unexpected whitespace (quote a value that has spaces)")
			}
		case stComment:
			return v, nil
		}
	}
	if state == stSingle || state == stDouble || state == stEscape {
		return value{}, fmt.Errorf("a missing closing quote")
	}
	return v, nil
}

// resolve replaces each ${NAME} that starts at a marked '$', from the last
// to the first, as phpdotenv's resolver does.
func (v value) resolve(lookup func(string) (string, bool)) string {
	s := string(v.text)
	for i := len(v.vars) - 1; i >= 0; i-- {
		at := v.vars[i]
		rest := s[at:]
		if !strings.HasPrefix(rest, "${") {
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 3 || !varName(rest[2:end]) {
			continue
		}
		if val, ok := lookup(rest[2:end]); ok {
			s = s[:at] + val + rest[end+1:]
		}
	}
	return s
}

// varName: what phpdotenv interpolates, [a-zA-Z0-9_.]+.
func varName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return s != ""
}
