package schema

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// newOutbox creates the default table in a fresh database, then runs alter
// (statements on `outbox`, without the database name) to break it.
func newOutbox(t *testing.T, alter ...string) (db *sql.DB, dbName string) {
	t.Helper()
	srv := testsvc.SharedMariaDB(t)
	dbName = srv.NewDatabase(t)
	db = srv.Open(t, dbName)
	db.SetMaxOpenConns(1)
	for _, s := range append([]string{CreateTableSQL("outbox", DefaultMapping())}, alter...) {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("exec %q: %v", s, err)
		}
	}
	return db, dbName
}

func mustMapping(t *testing.T, flags ...string) Mapping {
	t.Helper()
	m, err := ParseMapping(flags)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestInspect(t *testing.T) {
	db, dbName := newOutbox(t, "ALTER TABLE outbox ADD note LONGTEXT NULL CHECK (json_valid(note) OR note IS NULL)",
		"ALTER TABLE outbox ADD body LONGTEXT NULL, ADD CONSTRAINT body_is_json CHECK (json_valid(body))")
	tbl, err := Inspect(context.Background(), db, "", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Database != dbName || tbl.Name != "outbox" || tbl.Engine != "InnoDB" || !tbl.MariaDB || tbl.View {
		t.Errorf("table = %s.%s engine %q MariaDB %v view %v, want %s.outbox engine InnoDB MariaDB true view false",
			tbl.Database, tbl.Name, tbl.Engine, tbl.MariaDB, tbl.View, dbName)
	}
	wantNames := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "schema_version", "payload", "headers", "occurred_at", "sent_at", "note", "body"}
	var gotNames []string
	for _, c := range tbl.Columns {
		gotNames = append(gotNames, c.Name)
	}
	if !slices.Equal(gotNames, wantNames) {
		t.Errorf("column names = %q, want %q", gotNames, wantNames)
	}
	wantCols := map[string]Column{
		"id":             {Name: "id", Position: 0, DataType: "bigint", ColumnType: "bigint(20) unsigned", Unsigned: true, AutoIncrement: true},
		"message_id":     {Name: "message_id", Position: 1, DataType: "char", ColumnType: "char(26)", Charset: "utf8mb4"},
		"schema_version": {Name: "schema_version", Position: 5, DataType: "int", ColumnType: "int(10) unsigned", Unsigned: true, Nullable: true},
		"payload":        {Name: "payload", Position: 6, DataType: "longtext", ColumnType: "longtext", JSON: true, Charset: "utf8mb4"},
		"headers":        {Name: "headers", Position: 7, DataType: "longtext", ColumnType: "longtext", Nullable: true, JSON: true, Charset: "utf8mb4"},
		"sent_at":        {Name: "sent_at", Position: 9, DataType: "datetime", ColumnType: "datetime(6)", Nullable: true},
		// NULL passes the first check, so it does not make the column JSON.
		"note": {Name: "note", Position: 10, DataType: "longtext", ColumnType: "longtext", Nullable: true, Charset: "utf8mb4"},
		"body": {Name: "body", Position: 11, DataType: "longtext", ColumnType: "longtext", Nullable: true, JSON: true, Charset: "utf8mb4"},
	}
	for name, want := range wantCols {
		if got, ok := tbl.Column(name); !ok || got != want {
			t.Errorf("Column(%q) = %+v, %v; want %+v", name, got, ok, want)
		}
	}
	if tbl.AutoIncrementPK != "id" || !slices.Equal(tbl.PrimaryKey, []string{"id"}) {
		t.Errorf("AutoIncrementPK = %q, PrimaryKey = %q; want id, [id]", tbl.AutoIncrementPK, tbl.PrimaryKey)
	}
	wantIdx := []Index{
		{Name: "PRIMARY", Unique: true, Columns: []string{"id"}},
		{Name: IndexMessageID, Unique: true, Columns: []string{"message_id"}},
		{Name: IndexUnsent, Columns: []string{"sent_at", "id"}},
	}
	if !reflect.DeepEqual(tbl.Indexes, wantIdx) {
		t.Errorf("Indexes = %+v, want %+v", tbl.Indexes, wantIdx)
	}
}

func TestValidate_BrokenTables(t *testing.T) {
	tests := []struct {
		name    string
		alter   []string // nil and drop: no table at all
		drop    bool
		mapping []string
		want    []Problem
	}{
		{
			name:  "payload missing",
			alter: []string{"ALTER TABLE outbox DROP COLUMN payload"},
			want:  []Problem{{SeverityError, ColPayload, "column payload is missing; map it with --column payload=<name> if the table calls it otherwise, or add it (`binlog-outbox schema print` shows its definition)"}},
		},
		{
			name:    "mapped payload missing",
			mapping: []string{"payload=body"},
			want:    []Problem{{SeverityError, ColPayload, "column body (mapped as payload) is missing; map it with --column payload=<name> if the table calls it otherwise, or add it (`binlog-outbox schema print` shows its definition)"}},
		},
		{
			name:  "a latin1 table and a binary payload convert",
			alter: []string{"ALTER TABLE outbox CONVERT TO CHARACTER SET latin1, MODIFY payload VARBINARY(1000) NOT NULL"},
		},
		{
			name:  "a character set binlog mode cannot convert",
			alter: []string{"ALTER TABLE outbox MODIFY event_type VARCHAR(255) CHARACTER SET sjis NOT NULL, MODIFY headers TEXT CHARACTER SET latin2 NULL"},
			want: []Problem{
				{SeverityError, ColEventType, "column event_type is in character set sjis, which binlog mode cannot convert to UTF-8 as poll mode's connection does (the relay converts utf8mb4, utf8mb3 (utf8), ascii and latin1, and passes binary columns as they are); " +
					"convert the table with ALTER TABLE `outbox` CONVERT TO CHARACTER SET utf8mb4, or the column alone with ALTER TABLE `outbox` MODIFY `event_type` VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL (restating its DEFAULT and COMMENT, if any)"},
				{SeverityError, ColHeaders, "column headers is in character set latin2, which binlog mode cannot convert to UTF-8 as poll mode's connection does (the relay converts utf8mb4, utf8mb3 (utf8), ascii and latin1, and passes binary columns as they are); " +
					"convert the table with ALTER TABLE `outbox` CONVERT TO CHARACTER SET utf8mb4, or the column alone with ALTER TABLE `outbox` MODIFY `headers` TEXT CHARACTER SET utf8mb4 NULL (restating its DEFAULT and COMMENT, if any)"},
			},
		},
		{
			name:  "payload INT",
			alter: []string{"ALTER TABLE outbox MODIFY payload INT NOT NULL"},
			want: []Problem{{SeverityError, ColPayload,
				"column payload has type INT; it must be JSON, TEXT, LONGTEXT, MEDIUMTEXT, BLOB, MEDIUMBLOB, LONGBLOB, VARCHAR or VARBINARY"}},
		},
		{
			name:  "no primary key",
			alter: []string{"ALTER TABLE outbox MODIFY id BIGINT UNSIGNED NOT NULL, DROP PRIMARY KEY"},
			want: []Problem{{SeverityError, ColID,
				"table outbox has no AUTO_INCREMENT primary key; add one with ALTER TABLE `outbox` ADD `id` BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY FIRST"}},
		},
		{
			name:  "primary key not auto-increment",
			alter: []string{"ALTER TABLE outbox MODIFY id BIGINT UNSIGNED NOT NULL"},
			want: []Problem{{SeverityError, ColID,
				"primary key column id of table outbox is not AUTO_INCREMENT; the relay needs ids that grow with every insert"}},
		},
		{
			name:  "composite primary key",
			alter: []string{"ALTER TABLE outbox DROP PRIMARY KEY, ADD PRIMARY KEY (id, aggregate_id)"},
			want: []Problem{{SeverityError, ColID,
				"table outbox has the composite primary key (id, aggregate_id); the relay needs a single-column AUTO_INCREMENT primary key"}},
		},
		{
			name:    "id mapped to another column",
			mapping: []string{"id=aggregate_id", "aggregate_id=aggregate_type", "aggregate_type=-"},
			want: []Problem{{SeverityError, ColID,
				"column aggregate_id (mapped as id) is not the AUTO_INCREMENT primary key id; map it with --column id=id"}},
		},
		{
			name:  "MyISAM",
			alter: []string{"ALTER TABLE outbox ENGINE=MyISAM"},
			want: []Problem{{SeverityError, "",
				"engine MyISAM: use InnoDB (the binlog only marks transaction boundaries with XID for transactional engines); run ALTER TABLE `outbox` ENGINE=InnoDB"}},
		},
		{
			name: "table missing",
			drop: true,
			want: []Problem{{SeverityError, "",
				"table outbox does not exist in database %DB%; create it with `binlog-outbox schema apply` or `binlog-outbox schema print`"}},
		},
		{
			name:  "message_id INT",
			alter: []string{"ALTER TABLE outbox MODIFY message_id INT NOT NULL"},
			want:  []Problem{{SeverityError, ColMessageID, "column message_id has type INT; it must be a string type (CHAR(26) for a ULID)"}},
		},
		{
			name:  "sent_at NOT NULL and occurred_at text",
			alter: []string{"ALTER TABLE outbox MODIFY sent_at DATETIME(6) NOT NULL, MODIFY occurred_at VARCHAR(40) NOT NULL"},
			want: []Problem{
				{SeverityError, ColOccurredAt, "column occurred_at has type VARCHAR; it must be DATETIME, TIMESTAMP, or INT or BIGINT of Unix seconds"},
				{SeverityError, ColSentAt, "column sent_at is NOT NULL; it must allow NULL, which marks a row as unsent: ALTER TABLE `outbox` MODIFY `sent_at` DATETIME(6) NULL"},
			},
		},
		{
			name:  "optional column missing but mapped",
			alter: []string{"ALTER TABLE outbox DROP COLUMN headers"},
			want: []Problem{{SeverityError, ColHeaders,
				"column headers is missing; map it with --column headers=<name>, or declare the table has none with --column headers=-"}},
		},
		{
			name: "warnings only",
			alter: []string{"ALTER TABLE outbox MODIFY id INT UNSIGNED NOT NULL AUTO_INCREMENT",
				"ALTER TABLE outbox MODIFY payload LONGTEXT NULL, MODIFY event_type VARCHAR(255) NULL",
				"ALTER TABLE outbox DROP INDEX " + IndexUnsent},
			want: []Problem{
				{SeverityWarning, ColID, "column id has type INT(10) UNSIGNED; use BIGINT UNSIGNED so that the AUTO_INCREMENT counter cannot run out"},
				{SeverityWarning, ColEventType, "column event_type allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL"},
				{SeverityWarning, ColPayload, "column payload allows NULL; a row with NULL there goes to the dead-letter stream instead of its stream, so make it NOT NULL"},
				{SeverityWarning, ColSentAt, "no index starts with column sent_at, so the poller's WHERE `sent_at` IS NULL ORDER BY id scans the whole table; add KEY (`sent_at`, `id`)"},
			},
		},
		{
			name:  "view",
			alter: []string{"RENAME TABLE outbox TO outbox_base", "CREATE VIEW outbox AS SELECT * FROM outbox_base"},
			want: []Problem{
				{SeverityError, "", "outbox is a view; map the relay to the base table, whose rows the binlog logs"},
				{SeverityError, ColID, "table outbox has no AUTO_INCREMENT primary key; add one with ALTER TABLE `outbox` ADD `id` BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY FIRST"},
				{SeverityWarning, ColSentAt, "no index starts with column sent_at, so the poller's WHERE `sent_at` IS NULL ORDER BY id scans the whole table; add KEY (`sent_at`, `id`)"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alter := tt.alter
			if tt.drop {
				alter = []string{"DROP TABLE outbox"}
			}
			db, dbName := newOutbox(t, alter...)
			m := mustMapping(t, tt.mapping...)
			tbl, got, err := Validate(context.Background(), db, dbName, "outbox", m)
			if err != nil {
				t.Fatalf("Validate() error = %v", err)
			}
			if tt.drop != (tbl == nil) {
				t.Errorf("Validate() table = %v, want nil only for a missing table", tbl)
			}
			want := slices.Clone(tt.want)
			for i := range want {
				want[i].Message = replaceDB(want[i].Message, dbName)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Validate() problems:\n got %s\nwant %s", fmtProblems(got), fmtProblems(want))
			}
			hasErr := slices.ContainsFunc(got, func(p Problem) bool { return p.Severity == SeverityError })
			if err := ProblemsError("outbox", got); (err != nil) != hasErr {
				t.Errorf("ProblemsError() = %v, want an error only for error-level problems", err)
			}
		})
	}
}

func replaceDB(s, db string) string {
	const ph = "%DB%"
	for i := 0; i+len(ph) <= len(s); i++ {
		if s[i:i+len(ph)] == ph {
			return s[:i] + db + s[i+len(ph):]
		}
	}
	return s
}

func fmtProblems(ps []Problem) string {
	s := ""
	for _, p := range ps {
		s += fmt.Sprintf("\n  %s [%s] %s", p.Severity, p.Column, p.Message)
	}
	return s
}

// TestValidate_SeedTables checks tables shaped like the ones existing
// applications already have, with the mapping that describes them.
func TestValidate_SeedTables(t *testing.T) {
	tests := []struct {
		name    string
		ddl     string
		mapping []string
	}{
		{
			name: "type and no aggregate_type",
			ddl: `CREATE TABLE outbox (
				id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
				message_id CHAR(26) NOT NULL UNIQUE,
				aggregate_id VARCHAR(64) NOT NULL,
				type VARCHAR(100) NOT NULL,
				payload JSON NOT NULL,
				occurred_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
			) ENGINE=InnoDB`,
			mapping: []string{"event_type=type", "aggregate_type=-", "schema_version=-", "headers=-", "sent_at=-"},
		},
		{
			name: "event_type, created_at and no message_id",
			ddl: `CREATE TABLE outbox (
				id BIGINT AUTO_INCREMENT PRIMARY KEY,
				aggregate_type VARCHAR(255) NOT NULL,
				aggregate_id BIGINT UNSIGNED NOT NULL,
				event_type VARCHAR(255) NOT NULL,
				payload MEDIUMTEXT NOT NULL,
				headers JSON NULL,
				created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
				sent_at TIMESTAMP NULL DEFAULT NULL,
				KEY (sent_at)
			) ENGINE=InnoDB`,
			mapping: []string{"occurred_at=created_at", "message_id=-", "schema_version=-"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testsvc.SharedMariaDB(t)
			dbName := srv.NewDatabase(t)
			db := srv.Open(t, dbName)
			if _, err := db.Exec(tt.ddl); err != nil {
				t.Fatal(err)
			}
			m := mustMapping(t, tt.mapping...)
			_, got, err := Validate(context.Background(), db, dbName, "outbox", m)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 {
				t.Errorf("Validate() problems = %s, want none", fmtProblems(got))
			}
			_, withDefault, err := Validate(context.Background(), db, dbName, "outbox", DefaultMapping())
			if err != nil {
				t.Fatal(err)
			}
			if ProblemsError("outbox", withDefault) == nil {
				t.Errorf("Validate() with the default mapping found no error, want one for each renamed column")
			}
		})
	}
}

// TestValidate_OnlyTablePrivileges runs as a user that may only read the
// outbox table: information_schema shows such a user that table alone, so
// every query must filter on it.
func TestValidate_OnlyTablePrivileges(t *testing.T) {
	_, dbName := newOutbox(t)
	srv := testsvc.SharedMariaDB(t)
	user := fmt.Sprintf("bo_schema_%d", os.Getpid())
	srv.Exec(t, "DROP USER IF EXISTS '"+user+"'@'%'", "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT ON "+QuoteIdent(dbName)+".outbox TO '"+user+"'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER IF EXISTS '"+user+"'@'%'") })
	ro, err := sql.Open("mysql", srv.UserDSN(user, "pw", dbName))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tbl, got, err := Validate(context.Background(), ro, "", "outbox", DefaultMapping())
	if err != nil {
		t.Fatalf("Validate() as a user with SELECT on the table only: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("Validate() problems = %s, want none", fmtProblems(got))
	}
	if c, _ := tbl.Column("payload"); !c.JSON {
		t.Errorf("payload JSON = false, want true: the user can see the table's CHECK constraints")
	}
}
