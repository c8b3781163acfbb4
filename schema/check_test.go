package schema

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// mysqlOutbox is the default table as MySQL 8 describes it: JSON is a type of
// its own there, so no CHECK constraint is involved.
func mysqlOutbox() *Table {
	col := func(name, dataType, columnType string, nullable bool) Column {
		return Column{Name: name, DataType: dataType, ColumnType: columnType, Nullable: nullable}
	}
	t := &Table{Name: "outbox", Engine: "InnoDB", Columns: []Column{
		{Name: "id", DataType: "bigint", ColumnType: "bigint unsigned", Unsigned: true, AutoIncrement: true},
		col("message_id", "char", "char(26)", false),
		col("aggregate_type", "varchar", "varchar(255)", false),
		col("aggregate_id", "varchar", "varchar(255)", false),
		col("event_type", "varchar", "varchar(255)", false),
		{Name: "payload", DataType: "json", ColumnType: "json", JSON: true},
		{Name: "headers", DataType: "json", ColumnType: "json", Nullable: true, JSON: true},
		col("occurred_at", "datetime", "datetime(6)", false),
		col("sent_at", "datetime", "datetime(6)", true),
		// Last here, unlike in the DDL, so that the indexes above stay.
		{Name: "schema_version", DataType: "int", ColumnType: "int unsigned", Unsigned: true, Nullable: true},
	}, PrimaryKey: []string{"id"}, AutoIncrementPK: "id", Indexes: []Index{
		{Name: "PRIMARY", Unique: true, Columns: []string{"id"}},
		{Name: "message_id", Unique: true, Columns: []string{"message_id"}},
		{Name: IndexUnsent, Columns: []string{"sent_at", "id"}},
	}}
	for i := range t.Columns {
		t.Columns[i].Position = i
	}
	return t
}

func TestTable_Check(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Table)
		m      Mapping
		want   []Problem
	}{
		{name: "MySQL default table", modify: func(*Table) {}, m: DefaultMapping()},
		{
			name:   "lower-case engine name",
			modify: func(t *Table) { t.Engine = "innodb" },
			m:      DefaultMapping(),
		},
		{
			name:   "integer aggregate id",
			modify: func(t *Table) { t.Columns[3].DataType = "bigint" },
			m:      DefaultMapping(),
		},
		{
			name:   "renamed columns compare case-insensitively",
			modify: func(t *Table) { t.Columns[5].Name = "Payload"; t.Columns[0].Name = "ID"; t.AutoIncrementPK = "ID" },
			m:      DefaultMapping(),
		},
		{
			name:   "MySQL 8 UNIQUE NOT NULL shown as key is no primary key",
			modify: func(t *Table) { t.PrimaryKey, t.AutoIncrementPK, t.Indexes = nil, "", t.Indexes[1:] },
			m:      DefaultMapping(),
			want: []Problem{{SeverityError, ColID,
				"table outbox has no AUTO_INCREMENT primary key; add one with ALTER TABLE `outbox` ADD `id` BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY FIRST"}},
		},
		{
			name:   "id of a non-integer type",
			modify: func(t *Table) { t.Columns[0].DataType, t.Columns[0].ColumnType = "double", "double" },
			m:      DefaultMapping(),
			want:   []Problem{{SeverityError, ColID, "column id has type DOUBLE; it must be an integer type, ideally BIGINT UNSIGNED"}},
		},
		{
			name:   "nullable message_id and occurred_at",
			modify: func(t *Table) { t.Columns[1].Nullable, t.Columns[7].Nullable = true, true },
			m:      DefaultMapping(),
			want: []Problem{
				{SeverityWarning, ColMessageID, "column message_id allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL"},
				{SeverityWarning, ColOccurredAt, "column occurred_at allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL"},
			},
		},
		{
			name: "message_id without a unique key of its own",
			modify: func(t *Table) {
				t.Indexes[1] = Index{Name: "message_id", Unique: true, Columns: []string{"message_id", "aggregate_id"}}
			},
			m: DefaultMapping(),
			want: []Problem{{SeverityWarning, ColMessageID,
				"column message_id has no unique key, so two rows may share an id and consumers that deduplicate by it drop the second event; add one: ALTER TABLE `outbox` ADD UNIQUE KEY (`message_id`) (`binlog-outbox verify` reports ids the table holds twice)"}},
		},
		{
			name:   "errors sort before warnings",
			modify: func(t *Table) { t.Columns[1].Nullable = true; t.Engine = "MEMORY" },
			m:      Mapping{ColID: "id", ColMessageID: "message_id", ColAggregateID: "aggregate_id", ColEventType: "event_type", ColPayload: "payload", ColOccurredAt: "occurred_at"},
			want: []Problem{
				{SeverityError, "", "engine MEMORY: use InnoDB (the binlog only marks transaction boundaries with XID for transactional engines); run ALTER TABLE `outbox` ENGINE=InnoDB"},
				{SeverityWarning, ColMessageID, "column message_id allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tbl := mysqlOutbox()
			tt.modify(tbl)
			if got := tbl.Check(tt.m); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Check() = %s\nwant %s", fmtProblems(got), fmtProblems(tt.want))
			}
		})
	}
}

func TestJSONValidColumn(t *testing.T) {
	tests := []struct {
		clause string
		want   string
		wantOK bool
	}{
		{"json_valid(`payload`)", "payload", true},
		{" JSON_VALID( `pay``load` ) ", "pay`load", true},
		{`json_valid("body")`, "body", true},
		{"json_valid(body)", "body", true},
		{"json_valid(`a`) or `a` is null", "", false},
		{"json_valid(`a`,`b`)", "", false},
		{"json_valid(lower(a))", "", false},
		{"json_valid(``)", "", false},
		{"length(`a`) > 0", "", false},
		{"json_valid(", "", false},
	}
	for _, tt := range tests {
		got, ok := jsonValidColumn(tt.clause)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("jsonValidColumn(%q) = %q, %v; want %q, %v", tt.clause, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestCheckClauses(t *testing.T) {
	ddl := "CREATE TABLE `recheck` (\n" +
		"  `payload` longtext NOT NULL CHECK (json_valid(`payload`)),\n" +
		"  `note` varchar(9) DEFAULT 'check (x)' COMMENT 'it''s \\' CHECK (no)',\n" +
		"  `check (y)` int,\n" +
		"  CONSTRAINT `c` CHECK (json_valid(`body`) or (`body` is null))\n" +
		") ENGINE=InnoDB"
	want := []string{"json_valid(`payload`)", "json_valid(`body`) or (`body` is null)"}
	if got := checkClauses(ddl); !slices.Equal(got, want) {
		t.Errorf("checkClauses() = %q, want %q", got, want)
	}
}

func TestSeverity_String(t *testing.T) {
	for sev, want := range map[Severity]string{SeverityError: "error", SeverityWarning: "warning"} {
		if got := sev.String(); got != want {
			t.Errorf("Severity(%d).String() = %q, want %q", sev, got, want)
		}
	}
	p := Problem{Severity: SeverityWarning, Message: "m"}
	if got := p.String(); got != "warning: m" {
		t.Errorf("Problem.String() = %q, want %q", got, "warning: m")
	}
}

func TestProblemsError(t *testing.T) {
	warn := Problem{Severity: SeverityWarning, Message: "w"}
	if err := ProblemsError("outbox", []Problem{warn}); err != nil {
		t.Errorf("ProblemsError(warnings only) = %v, want nil", err)
	}
	err := ProblemsError("outbox", []Problem{{Message: "a"}, warn, {Message: "b"}})
	if !errors.Is(err, ErrTableUnfit) || outbox.HintOf(err) == "" {
		t.Fatalf("ProblemsError() = %v, want ErrTableUnfit with a hint", err)
	}
	want := "outbox table does not fit the relay: table outbox: a; b"
	if got := errors.Unwrap(err).Error(); got != want {
		t.Errorf("ProblemsError() message = %q, want %q", got, want)
	}
}
