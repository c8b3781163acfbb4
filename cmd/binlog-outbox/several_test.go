package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/settings"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
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
				t.Setenv(settings.Env("table"), tt.env)
			} else {
				os.Unsetenv(settings.Env("table"))
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
	// Its database, Redis database and server id are its own.
	t.Parallel()
	dsn := "u@tcp(127.0.0.1:1)/app"
	several := []string{"--mysql-dsn", dsn, "--table", "tenant_*.outbox", "--table", "app.legacy"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no position key", append(several, "run", "--mode", "binlog"), "give it a key with --position-key"},
		{"auto mode without a position key", append(several, "run"), "give it a key with --position-key"},
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

// tenantArgs are the run flags of a relay of every tenant under prefix, with
// a stream per tenant database.
func tenantArgs(prefix, key string) []string {
	return []string{"--mode", "binlog", "--table", relaytest.TenantPattern(prefix), "--position-key", key,
		"--stream", "outbox:{database}:{aggregate_type}"}
}

// waitReading waits until the relay process reads the binlog.
// waitTenantsDelivered waits until each tenant's streams
// (outbox:<database>:*) hold at least the events it committed.
func waitTenantsDelivered(t *testing.T, env *relaytest.Env, tenants []*relaytest.Tenant, timeout time.Duration) {
	t.Helper()
	for _, tn := range tenants {
		relaytest.WaitFor(t, timeout, tn.Database+"'s events in its streams", func() bool {
			return relaytest.CountEntries(context.Background(), env.RDB, "outbox:"+tn.Database+":") >= tn.Committed()
		})
	}
}

func waitReading(t *testing.T, p *relayProc) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the relay reading the binlog", func() bool {
		return strings.Contains(p.Out.String(), "reading binlog")
	})
}

// Twenty tenant databases, producers in each, and a relay of all of them
// killed and restarted under the load: every committed event is in its
// tenant's streams exactly once, a tenant created while the relay runs is
// followed from its first row, and another database's outbox is left alone.
func TestRun_ManyTenantsKilledExactlyOncePerTenant(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, 20)
	other := relaytest.NewTenant(t, srv, prefix+"_other")
	key := "binlog-outbox:position:tenants"
	args := tenantArgs(prefix, key)
	p := startRelay(t, env, args...)
	waitStoredPosition(t, env, key)

	var wg sync.WaitGroup
	produce := func(tn *relaytest.Tenant, o relaytest.ProduceOptions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relaytest.Produce(ctx, t, tn.DB, "outbox", o, tn.Rec)
		}()
	}
	load := relaytest.ProduceOptions{Producers: 2, Transactions: 40, Pause: 2 * time.Millisecond}
	for _, tn := range append(tenants, other) {
		produce(tn, load)
	}
	for i := 0; i < 2; i++ {
		time.Sleep(time.Duration(300+i*170) * time.Millisecond)
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		p = startRelay(t, env, args...)
	}
	// A tenant signs up while the relay reads: its first rows come right
	// after its CREATE DATABASE and CREATE TABLE in the binlog.
	waitReading(t, p)
	late := relaytest.NewTenant(t, srv, relaytest.TenantName(prefix, 21))
	produce(late, relaytest.ProduceOptions{Producers: 2, Transactions: 20})
	wg.Wait()

	all := append(tenants, late)
	waitTenantsDelivered(t, env, all, 60*time.Second)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0", code)
	}
	total, committed := 0, 0
	for _, tn := range all {
		total += relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + tn.Database + ":"})
		committed += tn.Committed()
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != total {
		t.Errorf("the streams hold %d entries, the tenants' streams %d: entries of no tenant (%s's %d events are not to be relayed)", n, total, other.Database, other.Committed())
	}
	if late.Committed() == 0 || other.Committed() == 0 {
		t.Errorf("the late tenant committed %d events, the other database %d; want some of each", late.Committed(), other.Committed())
	}
	for _, tn := range all {
		if mode := env.RDB.Get(ctx, "binlog-outbox:mode:"+tn.Database+".outbox").Val(); tn != late && mode != "binlog" {
			t.Errorf("mode of %s = %q, want binlog", tn.Database, mode)
		}
	}
	t.Logf("%d tenants, 2 kills, %d committed events, %d entries", len(all), committed, total)
}

// check lists the tables a pattern matches, warns of a pattern that matches
// none yet, and checks poll mode on every table.
func TestCheck_SeveralTables(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	prefix := relaytest.TenantPrefix(t)
	relaytest.NewTenants(t, srv, prefix, 3)
	global := []string{"--mysql-dsn", srv.DSN(env.Database), "--redis-url", env.RedisURL}

	out, errOut, code := run(t, append(global, "--table", relaytest.TenantPattern(prefix), "--table", env.Table, "--table", prefix+"_later_*.outbox",
		"check", "--position-key", "binlog-outbox:position:tenants")...)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"4 tables match (" + relaytest.TenantPattern(prefix) + ": 3, " + env.Database + ".outbox: 1, " + prefix + "_later_*.outbox: 0)",
		relaytest.TenantName(prefix, 2) + ".outbox",
		"WARN  outbox tables", prefix + "_later_*.outbox matches no table yet",
		"PASS  select privilege", "SELECT works on all 4 tables",
		"PASS  skip locked", "SELECT ... FOR UPDATE SKIP LOCKED works on all 4 tables",
		"PASS  poll write privilege", "on all 4 tables",
		"binlog mode: ready", "poll mode: ready",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, " fits ("); n != 4 {
		t.Errorf("check output has %d table lines that fit, want 4:\n%s", n, out)
	}

	out, _, code = run(t, append(global, "--table", relaytest.TenantPattern(prefix), "check", "--mode", "binlog")...)
	if code == 0 || !strings.Contains(out, "FAIL  position key") || !strings.Contains(out, "--position-key binlog-outbox:position:tenants") {
		t.Errorf("check without --position-key: exit %d, want a failure naming the flag:\n%s", code, out)
	}
}

// TestLoadConfig_ConnectionCharset checks that every connection of the relay
// reads text as utf8mb4, whatever character set the DSN asks for: poll
// mode's bytes are what the connection converts to, and binlog mode's are
// UTF-8.
func TestLoadConfig_ConnectionCharset(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"u@tcp(127.0.0.1:3306)/app", "charset=utf8mb4&collation=utf8mb4_general_ci"},
		{"u@tcp(127.0.0.1:3306)/app?charset=latin1", "charset=utf8mb4&collation=utf8mb4_general_ci"},
		{"u@tcp(127.0.0.1:3306)/app?collation=utf8mb4_unicode_ci", "charset=utf8mb4&collation=utf8mb4_unicode_ci"},
	} {
		cfg, err := loadArgs(t, "--mysql-dsn", tt.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.DSN(); !strings.Contains(got, tt.want) {
			t.Errorf("--mysql-dsn %s: the relay connects with %s, want %s in it", tt.dsn, got, tt.want)
		}
	}
}
