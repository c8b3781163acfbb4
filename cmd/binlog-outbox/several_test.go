package main

import (
	"os"
	"strings"
	"testing"
)

func TestLoadConfig_Tables(t *testing.T) {
	dsn := "u@tcp(127.0.0.1:3306)/app"
	tests := []struct {
		name    string
		env     string
		args    []string
		several bool
		db      string
		table   string
		sources string
	}{
		{"default", "", nil, false, "app", "outbox", "app.outbox"},
		{"one table replaces the default", "", []string{"--table", "events"}, false, "app", "events", "app.events"},
		{"one table in another database", "", []string{"--table", "billing.outbox"}, false, "billing", "outbox", "billing.outbox"},
		{"two tables", "", []string{"--table", "outbox", "--table", "billing.outbox"}, true, "app", "", "app.outbox, billing.outbox"},
		{"a pattern", "", []string{"--table", "tenant_*.outbox"}, true, "app", "", "tenant_*.outbox"},
		{"comma-separated environment variable", "tenant_*.outbox,app.legacy", nil, true, "app", "", "tenant_*.outbox, app.legacy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(envTable, tt.env)
			} else {
				os.Unsetenv(envTable)
			}
			cfg, err := loadArgs(t, append([]string{"--mysql-dsn", dsn}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Several != tt.several || cfg.Database != tt.db || cfg.Table != tt.table {
				t.Errorf("config: several %v, database %q, table %q; want %v, %q, %q", cfg.Several, cfg.Database, cfg.Table, tt.several, tt.db, tt.table)
			}
			var got []string
			for _, s := range cfg.Sources {
				got = append(got, s.Pattern.String())
			}
			if strings.Join(got, ", ") != tt.sources {
				t.Errorf("sources %v, want %s", got, tt.sources)
			}
		})
	}
}

func TestSeveralTables_Errors(t *testing.T) {
	dsn := "u@tcp(127.0.0.1:1)/app"
	several := []string{"--mysql-dsn", dsn, "--table", "tenant_*.outbox", "--table", "app.legacy"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"poll mode", append(several, "run", "--mode", "poll"), "poll mode relays one table"},
		{"no position key", append(several, "run", "--mode", "binlog"), "give it a key with --position-key"},
		{"position without a key", append(several, "position", "show"), "give it a key with --position-key"},
		{"a command of one table", append(several, "verify"), "verify works on one table"},
		{"schema print", append(several, "schema", "print"), "schema print works on one table"},
		{"a column of another table", append(several, "--column", "app.other:payload=body", "check"), "is for table app.other"},
		{"a table twice", []string{"--mysql-dsn", dsn, "--table", "a", "--table", "a", "check"}, "--table a is given twice"},
		{"a bad pattern", []string{"--mysql-dsn", dsn, "--table", "a.b.c", "check"}, "more than one '.'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "hint:") {
				t.Errorf("exit %d, stderr %q; want exit %d, %q and a hint", code, errOut, exitUsage, tt.want)
			}
		})
	}
}
