package schema

import (
	"fmt"
	"slices"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// ExtraColumn is a column of the table that the entries carry as a field of
// its own beside the built-in fields: the schema_version column, or one
// --extra-column (a tenant, a trace id, an aggregate version).
type ExtraColumn struct {
	// Column is the physical column name.
	Column string
	// Field is the entry field's name: the column's own unless the flag
	// renames it.
	Field string
}

// ParseExtraColumns parses --extra-column flags, `NAME` or `NAME=field`. It
// rejects, each with the fix, a column that m maps (entries carry it already,
// under its built-in field), a field name in reserved (the built-in entry
// fields; schema_version is always reserved, for the column of that name), a
// field or a column that two flags name, and names that are not identifiers.
// Column names compare case-insensitively, as MySQL compares them, and so do
// field names, so that no two fields differ in letter case only.
func ParseExtraColumns(flags []string, m Mapping, reserved []string) ([]ExtraColumn, error) {
	reserved = append(slices.Clone(reserved), ColSchemaVersion)
	var out []ExtraColumn
	for _, f := range flags {
		column, field, renamed := strings.Cut(f, "=")
		column, field = strings.TrimSpace(column), strings.TrimSpace(field)
		if !renamed {
			field = column
		}
		if !validIdent(column) {
			return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: %q is not a valid column name", outbox.ErrConfig, f, column),
				"write it as --extra-column tenant_id, or --extra-column tenant_id=tenant to name the field; the plain column name, without quotes or backticks")
		}
		if !validFieldName(field) {
			return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: %q is not a usable field name", outbox.ErrConfig, f, field),
				"field names are 1 to 64 letters, digits and _ . : -; name the field after =, e.g. --extra-column '%s=tenant'", column)
		}
		for _, l := range LogicalColumns {
			if p, ok := m.Physical(l); ok && strings.EqualFold(p, column) {
				return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: column %s is the table's %s column, which entries carry already", outbox.ErrConfig, f, column, l),
					"drop the flag; the entries' %s field holds the column", fieldOf(l))
			}
		}
		for _, r := range reserved {
			if strings.EqualFold(field, r) {
				return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: field %s is a built-in field of the entries", outbox.ErrConfig, f, field),
					"name the field otherwise with --extra-column %s=<field> (built-in fields: %s)", column, strings.Join(reserved, ", "))
			}
		}
		for _, o := range out {
			switch {
			case strings.EqualFold(o.Column, column):
				return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: column %s is given twice", outbox.ErrConfig, f, column),
					"give each column once")
			case strings.EqualFold(o.Field, field):
				return nil, outbox.WithHint(fmt.Errorf("%w: --extra-column %q: field %s is also the field of column %s", outbox.ErrConfig, f, field, o.Column),
					"give each column its own field name with --extra-column column=field")
			}
		}
		out = append(out, ExtraColumn{Column: column, Field: field})
	}
	return out, nil
}

// fieldOf is the entry field that carries a logical column.
func fieldOf(logical string) string {
	if logical == ColID {
		return "outbox_id"
	}
	return logical
}

// validFieldName accepts the field names an extra column may take: short,
// plain and the same in every consumer's language, so that no quoting or
// encoding question arises in PHP arrays, Go maps or redis-cli.
func validFieldName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == ':', r == '-':
		default:
			return false
		}
	}
	return true
}

// FieldColumns returns the columns the entries carry as fields of their own
// under m: the schema_version column when m maps it, then extra. Both modes
// read and render them from this one list, in its order.
func FieldColumns(m Mapping, extra []ExtraColumn) []ExtraColumn {
	var out []ExtraColumn
	if p, ok := m.Physical(ColSchemaVersion); ok {
		out = append(out, ExtraColumn{Column: p, Field: ColSchemaVersion})
	}
	return append(out, extra...)
}

// FieldNames returns the entry field names of cols, in their order.
func FieldNames(cols []ExtraColumn) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Field
	}
	return out
}

// DescribeFields says in one phrase which fields beyond the built-in ones
// the entries carry, for `check` and the start-up log; "" for none.
func DescribeFields(fields []ExtraColumn) string {
	if len(fields) == 0 {
		return ""
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Field
		if f.Column != f.Field {
			names[i] += " (column " + f.Column + ")"
		}
	}
	return "entries also carry " + strings.Join(names, ", ") + "; a NULL leaves the field out"
}

// CheckExtra checks that every extra column exists and has a type whose
// values both modes render alike. A problem lists the table's columns, so
// that a misspelt name is fixed at a glance.
func (t *Table) CheckExtra(extra []ExtraColumn) []Problem {
	var ps []Problem
	for _, e := range extra {
		c, ok := t.Column(e.Column)
		if !ok {
			ps = append(ps, Problem{Severity: SeverityError, Message: fmt.Sprintf(
				"column %s (--extra-column) is missing; the table's columns are %s: fix the name or drop the flag", e.Column, t.columnNames())})
			continue
		}
		if !slices.Contains(fieldTypes, c.DataType) {
			ps = append(ps, Problem{Severity: SeverityError, Message: fmt.Sprintf(
				"column %s (--extra-column) has type %s; it must be %s, whose values binlog and poll mode render alike: carry the value in such a column, or in headers",
				c.Name, strings.ToUpper(c.DataType), fieldTypesWant)})
		}
		if msg := t.charsetProblem(c, "column "+c.Name+" (--extra-column)"); msg != "" {
			ps = append(ps, Problem{Severity: SeverityError, Message: msg})
		}
	}
	return ps
}

func (t *Table) columnNames() string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}
