package schema

import (
	"context"
	"errors"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestName_Matches(t *testing.T) {
	tests := []struct {
		lctn      int
		db, table string
		want      bool
	}{
		{0, "app", "outbox", true},
		{0, "APP", "outbox", false},
		{0, "app", "Outbox", false},
		{1, "APP", "Outbox", true},
		{2, "App", "OUTBOX", true},
		{1, "app", "outbox2", false},
	}
	for _, tt := range tests {
		n := Name{Database: "app", Table: "outbox", LowerCaseTableNames: tt.lctn}
		if got := n.Matches(tt.db, tt.table); got != tt.want {
			t.Errorf("lower_case_table_names=%d: %s.Matches(%s, %s) = %v, want %v", tt.lctn, n, tt.db, tt.table, got, tt.want)
		}
	}
}

func TestResolveName_CaseSensitive(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	database := srv.NewDatabase(t)
	db := srv.Open(t, database)
	if err := Apply(context.Background(), db, "outbox", DefaultMapping()); err != nil {
		t.Fatal(err)
	}
	n, err := ResolveName(context.Background(), db, database, "outbox")
	if err != nil || n.Database != database || n.Table != "outbox" || n.LowerCaseTableNames != 0 {
		t.Fatalf("ResolveName(outbox): got %+v, %v; want %s.outbox", n, err, database)
	}
	_, err = ResolveName(context.Background(), db, database, "Outbox")
	if !errors.Is(err, ErrTableNotFound) || !strings.Contains(outbox.HintOf(err), "--table outbox") {
		t.Errorf("ResolveName(Outbox): got %v (hint %q), want ErrTableNotFound naming --table outbox", err, outbox.HintOf(err))
	}
}
