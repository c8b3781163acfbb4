// Package schema describes the outbox table: its logical columns, how they map
// to a real table's physical column names, the DDL that creates it, and the
// validation of an existing table against what the relay needs.
package schema

import (
	"fmt"
	"sort"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Logical column names. Every one maps to a physical column of the table.
const (
	ColID            = "id"
	ColMessageID     = "message_id"
	ColAggregateType = "aggregate_type"
	ColAggregateID   = "aggregate_id"
	ColEventType     = "event_type"
	ColPayload       = "payload"
	ColHeaders       = "headers"
	ColOccurredAt    = "occurred_at"
	ColSentAt        = "sent_at"
)

// LogicalColumns lists every logical column in table order.
var LogicalColumns = []string{
	ColID, ColMessageID, ColAggregateType, ColAggregateID, ColEventType,
	ColPayload, ColHeaders, ColOccurredAt, ColSentAt,
}

// Optional reports whether a logical column may be absent from a table. The
// relay derives message_id from id when it is missing; sent_at is needed only
// by poll mode with --on-sent mark.
func Optional(logical string) bool {
	switch logical {
	case ColMessageID, ColAggregateType, ColHeaders, ColSentAt:
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
// to declare an optional column absent) on top of DefaultMapping.
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
		if physical == "" && !Optional(logical) {
			return nil, outbox.WithHint(fmt.Errorf("%w: column %s is required and cannot be mapped to nothing", outbox.ErrConfig, logical),
				"map it to the table's column with --column %s=<name>", logical)
		}
		if physical != "" && !validIdent(physical) {
			return nil, outbox.WithHint(fmt.Errorf("%w: --column %q: %q is not a valid column name", outbox.ErrConfig, f, physical),
				"use the plain column name, without quotes or backticks")
		}
		m[logical] = physical
	}
	seen := map[string]string{}
	for _, l := range LogicalColumns {
		p, ok := m.Physical(l)
		if !ok {
			continue
		}
		if other, dup := seen[strings.ToLower(p)]; dup {
			return nil, outbox.WithHint(fmt.Errorf("%w: logical columns %s and %s both map to column %q", outbox.ErrConfig, other, l, p),
				"map each logical column to its own column with --column")
		}
		seen[strings.ToLower(p)] = l
	}
	return m, nil
}

// String renders the mapping as the --column flags that produce it, omitting
// identity entries, in a stable order.
func (m Mapping) String() string {
	var parts []string
	for _, l := range LogicalColumns {
		p := m[l]
		if p == l {
			continue
		}
		if p == "" {
			p = "-"
		}
		parts = append(parts, l+"="+p)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// validIdent accepts the identifiers MySQL accepts unquoted, plus anything
// printable without backticks, so quoting stays trivially safe.
func validIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if r == '`' || r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// QuoteIdent quotes a MySQL identifier with backticks.
func QuoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}
