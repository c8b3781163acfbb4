package schema

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	// A table with `type` and without aggregate_type and headers.
	db, dbName := newOutbox(t, "ALTER TABLE outbox DROP COLUMN aggregate_type, DROP COLUMN headers, RENAME COLUMN event_type TO type")
	ctx := context.Background()
	tests := []struct {
		name       string
		flags      []string
		wantAbsent []string
		wantErr    string // in an error-level problem; "" for none
	}{
		{"absent optional columns resolved", []string{"event_type=type"}, []string{ColAggregateType, ColHeaders}, ""},
		{"declared absent", []string{"event_type=type", "headers=-"}, []string{ColAggregateType}, ""},
		{"explicit column the table lacks", []string{"event_type=type", "headers=headers"}, []string{ColAggregateType}, "column headers is missing"},
		{"explicit renamed column the table lacks", []string{"event_type=type", "aggregate_type=kind"}, []string{ColHeaders}, "column kind (mapped as aggregate_type) is missing"},
		{"required columns are never resolved away", nil, []string{ColAggregateType, ColHeaders}, "column event_type is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustMapping(t, tt.flags...)
			res, err := Resolve(ctx, db, dbName, "outbox", m, DeclaredColumns(tt.flags), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Absent, tt.wantAbsent) {
				t.Errorf("Absent = %v, want %v", res.Absent, tt.wantAbsent)
			}
			for _, l := range res.Absent {
				if res.Mapping.Has(l) {
					t.Errorf("resolved mapping still maps absent %s: %v", l, res.Mapping)
				}
			}
			if !m.Has(ColAggregateType) {
				t.Errorf("Resolve changed the mapping it was given: %v", m)
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
	if res, err := Resolve(ctx, db, dbName, "no_such_table", DefaultMapping(), nil, nil); err != nil || res.Table != nil || ProblemsError("no_such_table", res.Problems) == nil {
		t.Errorf("Resolve of a missing table = %+v, %v; want no table and a problem", res, err)
	}
}

func TestDeclaredColumns(t *testing.T) {
	got := DeclaredColumns([]string{"event_type=type", " headers = - ", "event_type=kind", "bogus=x", "novalue"})
	if want := []string{ColEventType, ColHeaders}; !slices.Equal(got, want) {
		t.Errorf("DeclaredColumns = %v, want %v", got, want)
	}
}

func TestDescribeAbsent(t *testing.T) {
	got := DescribeAbsent([]string{ColMessageID, ColAggregateType, ColSchemaVersion, ColHeaders})
	want := "entries have no aggregate_type, schema_version or headers field (no such column); message_id is the row id (no message_id column)"
	if got != want {
		t.Errorf("DescribeAbsent = %q, want %q", got, want)
	}
	if DescribeAbsent(nil) != "" {
		t.Errorf("DescribeAbsent(nil) = %q, want empty", DescribeAbsent(nil))
	}
}
