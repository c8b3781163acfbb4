// Package schema describes the outbox table: its logical columns, how they map
// to a real table's physical column names, the DDL that creates it, and the
// validation of an existing table against what the relay needs.
package schema

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Logical column names. Every one maps to a physical column of the table.
const (
	ColID            = "id"
	ColMessageID     = "message_id"
	ColAggregateType = "aggregate_type"
	ColAggregateID   = "aggregate_id"
	ColEventType     = "event_type"
	// ColSchemaVersion is the version of the payload's schema, which the
	// entries carry as the field schema_version for consumers to branch on.
	ColSchemaVersion = "schema_version"
	ColPayload       = "payload"
	ColHeaders       = "headers"
	ColOccurredAt    = "occurred_at"
	ColSentAt        = "sent_at"
)

// LogicalColumns lists every logical column in table order.
var LogicalColumns = []string{
	ColID, ColMessageID, ColAggregateType, ColAggregateID, ColEventType,
	ColSchemaVersion, ColPayload, ColHeaders, ColOccurredAt, ColSentAt,
}

// Optional reports whether a logical column may be absent from a table. The
// relay derives message_id from id when it is missing; sent_at is needed only
// by poll mode with --on-sent mark; without schema_version or headers the
// entries lack those fields.
func Optional(logical string) bool {
	switch logical {
	case ColMessageID, ColAggregateType, ColSchemaVersion, ColHeaders, ColSentAt:
		return true
	}
	return false
}

// Mapping maps logical column names to physical ones. A logical column mapped
// to "" (or "-") is absent from the table; only Optional columns may be.
type Mapping map[string]string

// DefaultMapping maps every logical column to a physical column of the same name.
func DefaultMapping() Mapping {
	m := make(Mapping, len(LogicalColumns))
	for _, c := range LogicalColumns {
		m[c] = c
	}
	return m
}

// Physical returns the physical name of a logical column and whether the table
// has it.
func (m Mapping) Physical(logical string) (string, bool) {
	p, ok := m[logical]
	if !ok || p == "" {
		return "", false
	}
	return p, true
}

// Has reports whether the table has the logical column.
func (m Mapping) Has(logical string) bool {
	_, ok := m.Physical(logical)
	return ok
}

// ParseMapping applies --column flags ("logical=physical", or "logical=" / "logical=-"
// to declare an optional column absent) on top of DefaultMapping. A later flag
// for the same logical column wins. The result passes Validate.
func ParseMapping(flags []string) (Mapping, error) {
	m := DefaultMapping()
	for _, f := range flags {
		logical, physical, ok := strings.Cut(f, "=")
		logical = strings.TrimSpace(logical)
		physical = strings.TrimSpace(physical)
		if !ok || logical == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: --column %q is not logical=physical", outbox.ErrConfig, f),
				"write it as --column payload=body; logical names are %s", strings.Join(LogicalColumns, ", "))
		}
		if _, known := m[logical]; !known {
			return nil, outbox.WithHint(fmt.Errorf("%w: --column %q names unknown logical column %q", outbox.ErrConfig, f, logical),
				"logical names are %s", strings.Join(LogicalColumns, ", "))
		}
		if physical == "-" {
			physical = ""
		}
		if physical != "" && !validIdent(physical) {
			return nil, outbox.WithHint(fmt.Errorf("%w: --column %q: %q is not a valid column name", outbox.ErrConfig, f, physical),
				"use the plain column name, without quotes or backticks, at most 64 characters")
		}
		m[logical] = physical
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// DeclaredColumns returns the logical columns that --column flags name, in
// flag order, for Resolve: the user's own statements about the table, which
// the relay checks rather than adjusts to the table. Flags that ParseMapping
// rejects are left out.
func DeclaredColumns(flags []string) []string {
	var out []string
	for _, f := range flags {
		logical, _, ok := strings.Cut(f, "=")
		if logical = strings.TrimSpace(logical); ok && slices.Contains(LogicalColumns, logical) && !slices.Contains(out, logical) {
			out = append(out, logical)
		}
	}
	return out
}

// Validate checks that every required logical column is mapped, that every
// physical name is a usable identifier, and that no two logical columns share
// a physical column (MySQL column names are case-insensitive, so neither may
// "Payload" and "payload"), except aggregate_type, aggregate_id and
// event_type, which may (see routing). Mappings built by hand rather than by ParseMapping
// go through it before they reach DDL or the relay.
func (m Mapping) Validate() error {
	for l := range m {
		if !slices.Contains(LogicalColumns, l) {
			return outbox.WithHint(fmt.Errorf("%w: mapping names unknown logical column %q", outbox.ErrConfig, l),
				"logical names are %s", strings.Join(LogicalColumns, ", "))
		}
	}
	seen := map[string]string{}
	for _, l := range LogicalColumns {
		p, ok := m.Physical(l)
		if !ok {
			if !Optional(l) {
				return outbox.WithHint(fmt.Errorf("%w: column %s is required and cannot be mapped to nothing", outbox.ErrConfig, l),
					"map it to the table's column with --column %s=<name>", l)
			}
			continue
		}
		if !validIdent(p) {
			return outbox.WithHint(fmt.Errorf("%w: column %s maps to %q, which is not a valid column name", outbox.ErrConfig, l, p),
				"use the plain column name, without quotes or backticks, at most 64 characters")
		}
		if other, dup := seen[strings.ToLower(p)]; dup && !(routing(other) && routing(l)) {
			return outbox.WithHint(fmt.Errorf("%w: logical columns %s and %s both map to column %q", outbox.ErrConfig, other, l, p),
				"map each logical column to its own column with --column")
		}
		seen[strings.ToLower(p)] = l
	}
	return nil
}

// routing reports whether a logical column is one of the text columns that
// name an event's aggregate and type. A table may have one column for
// several of them (messenger_messages' queue_name): they are read, never
// written, so sharing one is no ambiguity.
func routing(logical string) bool {
	return logical == ColAggregateType || logical == ColAggregateID || logical == ColEventType
}

// Flags returns the --column flags that turn DefaultMapping into m, omitting
// identity entries, in a stable order. ParseMapping(m.Flags()) equals m for
// every valid m, including physical names that contain commas.
func (m Mapping) Flags() []string {
	var flags []string
	for _, l := range LogicalColumns {
		p := m[l]
		if p == l {
			continue
		}
		if p == "" {
			p = "-"
		}
		flags = append(flags, l+"="+p)
	}
	sort.Strings(flags)
	return flags
}

// String renders the mapping as its Flags joined by commas, for logs and the
// comma-separated environment variable form. It is "" for DefaultMapping.
func (m Mapping) String() string {
	return strings.Join(m.Flags(), ",")
}

// validIdent accepts the names MySQL accepts as quoted column identifiers,
// minus backticks so quoting stays trivially safe: valid UTF-8, 1 to 64
// characters of the Basic Multilingual Plane, no control characters, and no
// surrounding white space: the server rejects a trailing space ("Incorrect
// column name"), and ParseMapping trims flags, so Flags would not round-trip.
func validIdent(s string) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > 64 || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if r == '`' || r < ' ' || r == 0x7f || r > 0xFFFF {
			return false
		}
	}
	return true
}

// QuoteIdent quotes a MySQL identifier with backticks.
func QuoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}
