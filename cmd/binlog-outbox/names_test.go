package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// With lower_case_table_names=1 (Windows, macOS, Azure Database for MySQL)
// the server stores and logs names in lower case: `--table Outbox` in a DSN
// database written in upper case is app.outbox in the binlog. The relay
// must relay its rows, keep its position under the server's name, and
// check must say so.
func TestRun_LowerCaseTableNames(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--lower-case-table-names=1"}})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	upper := *env
	upper.Database = strings.ToUpper(env.Database)

	out, errOut, code := run(t, "--mysql-dsn", srv.DSN(upper.Database), "--redis-url", env.RedisURL, "--table", "Outbox", "check", "--mode", "binlog")
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"binlog mode: ready", "lower_case_table_names=1", upper.Database + ".Outbox is " + env.Database + ".outbox"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	p := startRelay(t, &upper, "--mode", "binlog", "--table", "Outbox")
	old := "binlog-outbox:position:" + upper.Database + ".Outbox"
	relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
		return env.RDB.Exists(ctx, posKey(env), old).Val() > 0
	})
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	if env.RDB.Exists(ctx, old).Val() != 0 {
		t.Errorf("a second position key %s exists beside %s", old, posKey(env))
	}
	if p.Exited() {
		t.Fatalf("relay exited:\n%s", p.Out.String())
	}

	// A position under the name as written is what an earlier version,
	// which skipped the rows, left behind: no silent second position.
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("relay exit %d after SIGTERM", code)
	}
	if err := env.RDB.Set(ctx, old, "{}", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p = startRelay(t, &upper, "--mode", "binlog", "--table", "Outbox")
	if code := p.Wait(t, 60*time.Second); code == 0 || !strings.Contains(p.Out.String(), old) {
		t.Errorf("relay with a position stored under %s: exit %d, want a failure naming it:\n%s", old, code, p.Out.String())
	}
}

// With lower_case_table_names=0 names are case-sensitive: `--table Outbox`
// is no table when only outbox exists, and both check and run say so, with
// the name that exists.
func TestRun_CaseSensitiveTableNameMissing(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	out, errOut, code := run(t, "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--table", "Outbox", "check", "--mode", "binlog")
	if code == 0 || !strings.Contains(out, "binlog mode: not ready") || !strings.Contains(out, "--table outbox") {
		t.Errorf("check with --table Outbox: exit %d, want a failure naming --table outbox:\n%s%s", code, out, errOut)
	}
	p := startRelay(t, env, "--mode", "binlog", "--table", "Outbox")
	if code := p.Wait(t, 60*time.Second); code == 0 {
		t.Fatal("relay started with a table name that matches no table")
	}
	if out := p.Out.String(); !strings.Contains(out, "does not exist") || !strings.Contains(out, "--table outbox") {
		t.Errorf("relay output does not explain the case-sensitive name:\n%s", out)
	}
}
