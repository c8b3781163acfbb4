package schema

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file: %v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -update after checking it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// customMapping renames columns, leaves the optional ones out but sent_at,
// and needs quoting, which the golden files show.
func customMapping(t *testing.T) Mapping {
	t.Helper()
	m, err := ParseMapping([]string{"id=outbox id", "message_id=-", "aggregate_type=-", "schema_version=-", "headers=-",
		"event_type=type", "occurred_at=created_at", "payload=it's"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCreateTableSQL(t *testing.T) {
	golden(t, "create_table_default.sql", CreateTableSQL("outbox", DefaultMapping())+"\n")
	golden(t, "create_table_custom.sql", CreateTableSQL("app events", customMapping(t))+"\n")
}

func TestLaravelMigration(t *testing.T) {
	golden(t, "laravel_default.php", LaravelMigration("outbox", DefaultMapping()))
	golden(t, "laravel_custom.php", LaravelMigration(`app\events`, customMapping(t)))
}

func TestCreateTableSQL_LeavesOutAbsentColumns(t *testing.T) {
	m, err := ParseMapping([]string{"sent_at=-", "message_id=-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{CreateTableSQL("outbox", m), LaravelMigration("outbox", m)} {
		for _, absent := range []string{"sent_at", "message_id", IndexUnsent, IndexMessageID} {
			if strings.Contains(out, absent) {
				t.Errorf("output mentions %s, which the mapping leaves out:\n%s", absent, out)
			}
		}
	}
}

func TestApply(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	ctx := context.Background()
	tests := []struct {
		name  string
		table string
		m     Mapping
	}{
		{"default", "outbox", DefaultMapping()},
		{"custom", "app events", customMapping(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dbName := srv.NewDatabase(t)
			db := srv.Open(t, dbName)
			for range 2 { // the second run finds the table and leaves it
				if err := Apply(ctx, db, tt.table, tt.m); err != nil {
					t.Fatalf("Apply() = %v, want nil", err)
				}
			}
			tbl, problems, err := Validate(ctx, db, dbName, tt.table, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 0 {
				t.Errorf("Validate() of the generated table = %v, want no problems", problems)
			}
			for _, l := range []string{ColPayload, ColHeaders} {
				if p, ok := tt.m.Physical(l); ok {
					if c, _ := tbl.Column(p); !c.JSON {
						t.Errorf("column %s: JSON = false, want true (%+v)", p, c)
					}
				}
			}
			if id, _ := tt.m.Physical(ColID); tbl.AutoIncrementPK != id {
				t.Errorf("AutoIncrementPK = %q, want %q", tbl.AutoIncrementPK, id)
			}
		})
	}
}

func TestApply_InvalidInput(t *testing.T) {
	db := testsvc.SharedMariaDB(t).Open(t, "")
	tests := []struct {
		name  string
		table string
		m     Mapping
	}{
		{"backtick in table name", "a`b", DefaultMapping()},
		{"required column unmapped", "outbox", Mapping{ColID: "id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Apply(context.Background(), db, tt.table, tt.m)
			if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
				t.Errorf("Apply() = %v, want ErrConfig with a hint", err)
			}
		})
	}
}

func TestApply_ExistingUnfitTable(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	dbName := srv.NewDatabase(t)
	db := srv.Open(t, dbName)
	srv.Exec(t, "CREATE TABLE "+QuoteIdent(dbName)+".outbox (id INT PRIMARY KEY) ENGINE=InnoDB")
	err := Apply(context.Background(), db, "outbox", DefaultMapping())
	if !errors.Is(err, ErrTableUnfit) {
		t.Fatalf("Apply() over an unfit table = %v, want ErrTableUnfit", err)
	}
	if !strings.Contains(err.Error(), "column payload is missing") {
		t.Errorf("Apply() error = %v, want it to name the missing payload column", err)
	}
}
