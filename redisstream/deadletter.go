package redisstream

import (
	"fmt"
	"strconv"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// checkDeadLetterStream refuses a template that renders the dead-letter
// stream's name whatever the events hold: one without placeholders, or with
// {partition} only, whose every value is known at start. Events there would
// mix with the dead letters. Placeholders filled from the rows cannot be
// decided at start; Sink.Prepare dead-letters such an event instead.
func checkDeadLetterStream(t *Template, deadLetter string) error {
	for _, p := range t.parts {
		if p.placeholder != "" && p.placeholder != PlaceholderPartition {
			return nil
		}
	}
	for n := range t.partitions {
		if t.renderPartition(n) == deadLetter {
			return outbox.WithHint(fmt.Errorf("%w: --stream %q names the dead-letter stream %s (--dead-letter-stream), and events would mix with the dead letters", outbox.ErrConfig, t.src, deadLetter),
				"give the events and the dead letters different streams: change --stream, or set --dead-letter-stream to a stream no event goes to, e.g. --dead-letter-stream %s:dead-letter", t.src)
		}
	}
	return nil
}

// renderPartition renders a template without placeholders other than
// {partition} for partition n.
func (t *Template) renderPartition(n uint32) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.placeholder == "" {
			b.WriteString(p.literal)
		} else {
			b.WriteString(strconv.FormatUint(uint64(n), 10))
		}
	}
	return b.String()
}

// deadLetterCollision is the reason of a dead letter whose event's stream
// is the dead-letter stream.
func deadLetterCollision(t *Template, deadLetter string) string {
	return fmt.Sprintf("its stream under --stream %s is the dead-letter stream %s; set --dead-letter-stream to a stream no event goes to, then republish it", t.src, deadLetter)
}

// mayRender reports whether some event could render name: the literal parts
// in their order, each placeholder standing for any text ({partition} for
// digits).
func (t *Template) mayRender(name string) bool {
	return matchParts(t.parts, name)
}

func matchParts(parts []part, s string) bool {
	if len(parts) == 0 {
		return s == ""
	}
	p := parts[0]
	if p.placeholder == "" {
		rest, ok := strings.CutPrefix(s, p.literal)
		return ok && matchParts(parts[1:], rest)
	}
	if p.placeholder == PlaceholderPartition {
		for i := 1; i <= len(s) && s[i-1] >= '0' && s[i-1] <= '9'; i++ {
			if matchParts(parts[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	for i := 0; i <= len(s); i++ {
		if matchParts(parts[1:], s[i:]) {
			return true
		}
	}
	return false
}

// renders reports whether e's stream is name, without building the key:
// Prepare asks it of every event when mayRender is true.
func (t *Template) renders(e *outbox.Event, name string) bool {
	var digits [10]byte
	rest := name
	for _, p := range t.parts {
		var v string
		switch p.placeholder {
		case "":
			v = p.literal
		case PlaceholderAggregateType:
			v = e.AggregateType
		case PlaceholderAggregateID:
			v = e.AggregateID
		case PlaceholderEventType:
			v = e.EventType
		case PlaceholderPartition:
			b := strconv.AppendUint(digits[:0], uint64(Partition(e.AggregateID, t.partitions)), 10)
			if len(rest) < len(b) || rest[:len(b)] != string(b) {
				return false
			}
			rest = rest[len(b):]
			continue
		case PlaceholderDatabase:
			v = e.Database
		case PlaceholderTable:
			v = e.Table
		}
		var ok bool
		if rest, ok = strings.CutPrefix(rest, v); !ok {
			return false
		}
	}
	return rest == ""
}
