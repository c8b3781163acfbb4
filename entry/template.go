package entry

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// DefaultStream is the default stream key template: one stream per aggregate type.
const DefaultStream = "outbox:{aggregate_type}"

// DefaultStreamNoAggregateType is the default stream key template of a table
// without an aggregate_type column: one stream, which keeps every aggregate's
// events in order whatever their event types.
const DefaultStreamNoAggregateType = "outbox"

// MaxPartitions bounds the partitions {partition} ranges over
// (--partitions).
const MaxPartitions = 1 << 16

// Placeholders a stream template may use.
const (
	PlaceholderAggregateType = "aggregate_type"
	PlaceholderAggregateID   = "aggregate_id"
	PlaceholderEventType     = "event_type"
	PlaceholderPartition     = "partition"
	// PlaceholderDatabase and PlaceholderTable name the outbox table of
	// the event, for a relay of several tables (a stream per tenant
	// database: 'outbox:{database}:{aggregate_type}').
	PlaceholderDatabase = "database"
	PlaceholderTable    = "table"
)

// Template renders the stream key of an event from a pattern such as
// "outbox:{aggregate_type}:{partition}".
type Template struct {
	src        string
	parts      []part
	partitions uint32
}

type part struct {
	literal     string
	placeholder string // "" for a literal part
}

// ParseTemplate parses a stream key template. partitions is the --partitions
// value: {partition} renders as Partition(aggregate_id, partitions).
// hasAggregateType is false when the table has no aggregate_type column, which
// makes a template naming it a configuration error.
func ParseTemplate(src string, partitions int, hasAggregateType bool) (*Template, error) {
	hint := "placeholders are {aggregate_type}, {aggregate_id}, {event_type}, {partition}, {database} and {table}, e.g. --stream 'outbox:{aggregate_type}:{partition}'"
	if src == "" {
		return nil, outbox.WithHint(fmt.Errorf("%w: --stream is empty", outbox.ErrConfig), "%s", hint)
	}
	if partitions < 1 || partitions > MaxPartitions {
		return nil, outbox.WithHint(fmt.Errorf("%w: --partitions %d is out of range", outbox.ErrConfig, partitions), "use a number from 1 to %d", MaxPartitions)
	}
	t := &Template{src: src, partitions: uint32(partitions)}
	rest := src
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		close := strings.IndexByte(rest, '}')
		if open < 0 {
			if close >= 0 {
				return nil, outbox.WithHint(fmt.Errorf("%w: --stream %q has a '}' without '{'", outbox.ErrConfig, src), "%s", hint)
			}
			t.parts = append(t.parts, part{literal: rest})
			break
		}
		if close >= 0 && close < open {
			return nil, outbox.WithHint(fmt.Errorf("%w: --stream %q has a '}' without '{'", outbox.ErrConfig, src), "%s", hint)
		}
		if open > 0 {
			t.parts = append(t.parts, part{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, outbox.WithHint(fmt.Errorf("%w: --stream %q has an unclosed '{'", outbox.ErrConfig, src), "%s", hint)
		}
		name := rest[open+1 : open+end]
		switch name {
		case PlaceholderAggregateID, PlaceholderEventType, PlaceholderPartition, PlaceholderDatabase, PlaceholderTable:
		case PlaceholderAggregateType:
			if !hasAggregateType {
				return nil, outbox.WithHint(fmt.Errorf("%w: --stream %q uses {aggregate_type} but the table has no aggregate_type column", outbox.ErrConfig, src),
					"map the column with --column aggregate_type=<name>, or choose a --stream template without {aggregate_type}, e.g. 'outbox:{event_type}'")
			}
		default:
			return nil, outbox.WithHint(fmt.Errorf("%w: --stream %q has unknown placeholder {%s}", outbox.ErrConfig, src, name), "%s", hint)
		}
		t.parts = append(t.parts, part{placeholder: name})
		rest = rest[open+end+1:]
	}
	if partitions > 1 && !t.Uses(PlaceholderPartition) {
		return nil, outbox.WithHint(fmt.Errorf("%w: --partitions %d but --stream %q has no {partition}", outbox.ErrConfig, partitions, src),
			"add {partition} to the template, e.g. '%s:{partition}', or drop --partitions", src)
	}
	return t, nil
}

// Uses reports whether the template contains a placeholder.
func (t *Template) Uses(placeholder string) bool {
	for _, p := range t.parts {
		if p.placeholder == placeholder {
			return true
		}
	}
	return false
}

// Fixed reports whether the template names one stream: it has no
// placeholder, or only {partition} over one partition.
func (t *Template) Fixed() bool {
	for _, p := range t.parts {
		if p.placeholder != "" && (p.placeholder != PlaceholderPartition || t.partitions > 1) {
			return false
		}
	}
	return true
}

// String returns the template source.
func (t *Template) String() string { return t.src }

// Glob returns a SCAN MATCH pattern that matches every key the template
// renders (and possibly others: a placeholder matches any text).
func (t *Template) Glob() string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.placeholder != "" {
			b.WriteByte('*')
			continue
		}
		for _, r := range p.literal {
			if strings.ContainsRune(`*?[]\`, r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Render returns the stream key of e.
func (t *Template) Render(e *outbox.Event) string {
	if len(t.parts) == 1 && t.parts[0].placeholder == "" {
		return t.parts[0].literal
	}
	return string(t.AppendTo(nil, e))
}

// AppendTo appends e's stream key to b: a caller that looks the key up in a
// map of keys it has (the sink, for each event of a batch) allocates only
// for a key it has not seen.
func (t *Template) AppendTo(b []byte, e *outbox.Event) []byte {
	for _, p := range t.parts {
		switch p.placeholder {
		case "":
			b = append(b, p.literal...)
		case PlaceholderAggregateType:
			b = append(b, e.AggregateType...)
		case PlaceholderAggregateID:
			b = append(b, e.AggregateID...)
		case PlaceholderEventType:
			b = append(b, e.EventType...)
		case PlaceholderPartition:
			b = strconv.AppendUint(b, uint64(Partition(e.AggregateID, t.partitions)), 10)
		case PlaceholderDatabase:
			b = append(b, e.Database...)
		case PlaceholderTable:
			b = append(b, e.Table...)
		}
	}
	return b
}

// Partition maps an aggregate id to one of n partitions: the IEEE CRC-32 of the
// id's bytes modulo n. PHP computes the same with crc32($aggregateId) % $n (on
// 64-bit PHP), Go with crc32.ChecksumIEEE, MySQL with CRC32(aggregate_id) % n.
func Partition(aggregateID string, n uint32) uint32 {
	if n <= 1 {
		return 0
	}
	return crc32.ChecksumIEEE([]byte(aggregateID)) % n
}

// AlwaysNames reports whether some events go to name whatever their rows
// hold: the template has no placeholder but {partition}, whose every value
// is known at start, and one partition renders name. Placeholders filled
// from the rows cannot be decided at start (MayRender, Renders).
func (t *Template) AlwaysNames(name string) bool {
	for _, p := range t.parts {
		if p.placeholder != "" && p.placeholder != PlaceholderPartition {
			return false
		}
	}
	for n := range t.partitions {
		if t.renderPartition(n) == name {
			return true
		}
	}
	return false
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

// MayRender reports whether some event could render name: the literal parts
// in their order, each placeholder standing for any text ({partition} for
// digits).
func (t *Template) MayRender(name string) bool {
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

// Renders reports whether e's stream is name, without building the key: the
// sink asks it of every event when MayRender(its dead-letter stream) is true.
func (t *Template) Renders(e *outbox.Event, name string) bool {
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
