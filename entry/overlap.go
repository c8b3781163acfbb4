package entry

// MayOverlap reports whether some name can be rendered both by t and by u,
// each placeholder standing for any text ({partition} for digits): a
// backfill's template must not, with the relay's, or it would write the
// live streams.
func (t *Template) MayOverlap(u *Template) bool {
	return overlap(tokens(t.parts), tokens(u.parts))
}

// MayRenderPrefix reports whether t can render a name that starts with
// prefix, such as the relay's own keys (redisstream.KeyPrefix).
func (t *Template) MayRenderPrefix(prefix string) bool {
	return overlap(tokens(t.parts), tokens([]part{{literal: prefix}, {placeholder: PlaceholderAggregateType}}))
}

// token is one step of a template as a pattern: one character of a
// literal, one digit, or a run of any characters (digits only, digit).
type token struct {
	c     byte
	class int
	star  bool
}

// Classes of a token.
const (
	classLiteral = iota
	classDigit
	classAny
)

func tokens(parts []part) []token {
	var ts []token
	for _, p := range parts {
		switch p.placeholder {
		case "":
			for i := 0; i < len(p.literal); i++ {
				ts = append(ts, token{c: p.literal[i]})
			}
		case PlaceholderPartition:
			ts = append(ts, token{class: classDigit}, token{class: classDigit, star: true})
		default:
			ts = append(ts, token{class: classAny, star: true})
		}
	}
	return ts
}

// meet reports whether one character can match both a and b.
func meet(a, b token) bool {
	switch {
	case a.class == classLiteral && b.class == classLiteral:
		return a.c == b.c
	case a.class == classLiteral:
		return b.class == classAny || a.c >= '0' && a.c <= '9'
	case b.class == classLiteral:
		return a.class == classAny || b.c >= '0' && b.c <= '9'
	}
	return true
}

// overlap searches the product of the two patterns for a common string:
// a state is a position in each; a star may be skipped or consume a
// character and stay.
func overlap(p, q []token) bool {
	type state struct{ i, j int }
	seen := map[state]bool{}
	stack := []state{{0, 0}}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		if s.i == len(p) && s.j == len(q) {
			return true
		}
		if s.i < len(p) && p[s.i].star {
			stack = append(stack, state{s.i + 1, s.j})
		}
		if s.j < len(q) && q[s.j].star {
			stack = append(stack, state{s.i, s.j + 1})
		}
		if s.i == len(p) || s.j == len(q) || !meet(p[s.i], q[s.j]) {
			continue
		}
		ni, nj := s.i+1, s.j+1
		if p[s.i].star {
			ni = s.i
		}
		if q[s.j].star {
			nj = s.j
		}
		stack = append(stack, state{ni, nj})
	}
	return false
}
