package schema

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParseExtraColumns(t *testing.T) {
	builtin := []string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "occurred_at", "outbox_id", "headers", "reason"}
	tests := []struct {
		name    string
		mapping []string // --column flags
		flags   []string
		want    []ExtraColumn
		wantErr string // in the error; "" for success
	}{
		{name: "none"},
		{name: "plain and renamed", flags: []string{"tenant_id", " trace = trace_id ", "aggregate_version=version"},
			want: []ExtraColumn{{"tenant_id", "tenant_id"}, {"trace", "trace_id"}, {"aggregate_version", "version"}}},
		{name: "a column the mapping leaves unused", mapping: []string{"occurred_at=created_at"}, flags: []string{"occurred_at=occurred"},
			want: []ExtraColumn{{"occurred_at", "occurred"}}},
		{name: "renamed onto a column's own name", flags: []string{"t=tenant", "tenant=t"}, want: []ExtraColumn{{"t", "tenant"}, {"tenant", "t"}}},
		{name: "built-in field", flags: []string{"payload_copy=payload"}, wantErr: "field payload is a built-in field"},
		{name: "built-in field in another case", flags: []string{"Reason"}, wantErr: "field Reason is a built-in field"},
		{name: "schema_version field", flags: []string{"v=schema_version"}, wantErr: "field schema_version is a built-in field"},
		{name: "mapped column", flags: []string{"payload=body"}, wantErr: "column payload is the table's payload column"},
		{name: "renamed mapped column", mapping: []string{"event_type=type"}, flags: []string{"TYPE=kind"}, wantErr: "column TYPE is the table's event_type column"},
		{name: "the id", flags: []string{"id=seq"}, wantErr: "the table's id column, which entries carry already"},
		{name: "column twice", flags: []string{"tenant", "Tenant=t2"}, wantErr: "column Tenant is given twice"},
		{name: "field twice", flags: []string{"tenant", "org=TENANT"}, wantErr: "field TENANT is also the field of column tenant"},
		{name: "empty", flags: []string{""}, wantErr: "is not a valid column name"},
		{name: "empty field", flags: []string{"tenant="}, wantErr: `"" is not a usable field name`},
		{name: "backtick", flags: []string{"a`b=ab"}, wantErr: "is not a valid column name"},
		{name: "column name that is no field name", flags: []string{"Trace ID"}, wantErr: `"Trace ID" is not a usable field name`},
		{name: "field name too long", flags: []string{"t=" + strings.Repeat("f", 65)}, wantErr: "is not a usable field name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExtraColumns(tt.flags, mustMapping(t, tt.mapping...), builtin)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseExtraColumns(%q) error = %v, want one containing %q", tt.flags, err, tt.wantErr)
				}
				if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
					t.Errorf("ParseExtraColumns(%q) error = %v, want ErrConfig with a hint", tt.flags, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseExtraColumns(%q) = %v, %v; want %v", tt.flags, got, err, tt.want)
			}
		})
	}
}

func TestFieldColumns(t *testing.T) {
	extra := []ExtraColumn{{"tenant_id", "tenant"}}
	tests := []struct {
		flags []string
		want  []ExtraColumn
	}{
		{nil, []ExtraColumn{{"schema_version", "schema_version"}, {"tenant_id", "tenant"}}},
		{[]string{"schema_version=v"}, []ExtraColumn{{"v", "schema_version"}, {"tenant_id", "tenant"}}},
		{[]string{"schema_version=-"}, []ExtraColumn{{"tenant_id", "tenant"}}},
	}
	for _, tt := range tests {
		if got := FieldColumns(mustMapping(t, tt.flags...), extra); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("FieldColumns(%q) = %v, want %v", tt.flags, got, tt.want)
		}
	}
	if got := DescribeFields([]ExtraColumn{{"schema_version", "schema_version"}, {"tenant_id", "tenant"}}); got != "entries also carry schema_version, tenant (column tenant_id); a NULL leaves the field out" {
		t.Errorf("DescribeFields = %q", got)
	}
}

// Resolve checks the extra columns against the table: a missing one lists
// the table's columns, one of a type the modes render differently is
// refused; schema_version resolves like any optional column.
func TestResolve_ExtraColumns(t *testing.T) {
	db, dbName := newOutbox(t, "ALTER TABLE outbox DROP COLUMN schema_version, ADD tenant_id VARCHAR(64) NULL, ADD version INT UNSIGNED NULL, ADD created DATETIME NULL, ADD kind ENUM('a','b') NULL, ADD region VARCHAR(16) CHARACTER SET cp1250 NULL, ADD city VARCHAR(16) CHARACTER SET latin1 NULL")
	ctx := context.Background()
	tests := []struct {
		name       string
		flags      []string
		extra      []ExtraColumn
		wantFields []ExtraColumn
		wantErr    string // in an error-level problem; "" for none
	}{
		{name: "text and integer columns", extra: []ExtraColumn{{"tenant_id", "tenant"}, {"VERSION", "version"}},
			wantFields: []ExtraColumn{{"tenant_id", "tenant"}, {"VERSION", "version"}}},
		{name: "missing column", extra: []ExtraColumn{{"tenant", "tenant"}}, wantFields: []ExtraColumn{{"tenant", "tenant"}},
			wantErr: "column tenant (--extra-column) is missing; the table's columns are id, message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at, sent_at, tenant_id, version, created, kind, region, city"},
		{name: "DATETIME", extra: []ExtraColumn{{"created", "created"}}, wantFields: []ExtraColumn{{"created", "created"}},
			wantErr: "column created (--extra-column) has type DATETIME"},
		{name: "ENUM", extra: []ExtraColumn{{"kind", "kind"}}, wantFields: []ExtraColumn{{"kind", "kind"}}, wantErr: "column kind (--extra-column) has type ENUM"},
		{name: "a latin1 column", extra: []ExtraColumn{{"city", "city"}}, wantFields: []ExtraColumn{{"city", "city"}}},
		{name: "a character set binlog mode cannot convert", extra: []ExtraColumn{{"region", "region"}}, wantFields: []ExtraColumn{{"region", "region"}},
			wantErr: "column region (--extra-column) is in character set cp1250, which binlog mode cannot convert"},
		{name: "schema_version mapped to another column", flags: []string{"schema_version=version"}, wantFields: []ExtraColumn{{"version", "schema_version"}}},
		{name: "schema_version renamed to a missing column", flags: []string{"schema_version=v"}, wantFields: []ExtraColumn{{"v", "schema_version"}},
			wantErr: "column v (mapped as schema_version) is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Resolve(ctx, db, dbName, "outbox", mustMapping(t, tt.flags...), DeclaredColumns(tt.flags), tt.extra)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Fields, tt.wantFields) {
				t.Errorf("Fields = %v, want %v", res.Fields, tt.wantFields)
			}
			err = ProblemsError("outbox", res.Problems)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("problems: %v, want none", err)
			case tt.wantErr != "" && (!errors.Is(err, ErrTableUnfit) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("problems: %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}
