package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// pollTenantArgs are the run flags of a poll relay of every tenant under
// prefix, with a stream per tenant database. The dedupe window makes poll
// mode exactly once across a kill between a round's append and its COMMIT,
// as in the one-table poll tests.
func pollTenantArgs(prefix string) []string {
	return []string{"--mode", "poll", "--table", relaytest.TenantPattern(prefix), "--stream", "outbox:{database}:{aggregate_type}",
		"--dedupe-window", "1h", "--poll-list-interval", "300ms"}
}

// Twenty tenant databases polled by one relay, producers in each, the relay
// killed with SIGKILL and restarted under the load: every committed event is
// in its tenant's streams exactly once and in aggregate order. A tenant
// created while the relay runs is polled from its first row; a tenant
// dropped has its poller stopped with a log line while the others go on;
// another database's outbox is left alone; every table's mode key says poll.
func TestRun_PollManyTenantsKilledExactlyOncePerTenant(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, 20)
	other := relaytest.NewTenant(t, srv, prefix+"_other")
	args := pollTenantArgs(prefix)
	p := startRelay(t, env, args...)
	waitLog(t, p, "polling several outbox tables")

	var wg sync.WaitGroup
	produce := func(tn *relaytest.Tenant, o relaytest.ProduceOptions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relaytest.Produce(ctx, t, tn.DB, "outbox", o, tn.Rec)
		}()
	}
	for _, tn := range append(tenants, other) {
		produce(tn, relaytest.ProduceOptions{Producers: 2, Transactions: 40, Pause: 2 * time.Millisecond})
	}
	time.Sleep(600 * time.Millisecond)
	p.Signal(t, syscall.SIGKILL)
	p.Wait(t, 10*time.Second)
	p = startRelay(t, env, args...)
	waitLog(t, p, "polling several outbox tables")
	// A tenant signs up while the relay runs: the next listing finds it.
	late := relaytest.NewTenant(t, srv, relaytest.TenantName(prefix, 21))
	produce(late, relaytest.ProduceOptions{Producers: 2, Transactions: 20})
	wg.Wait()

	all := append(tenants, late)
	waitTenantsDelivered(t, env, all, 60*time.Second)
	if !p.Said("polling an outbox table found since the start", 5*time.Second) || !p.Said(late.Database+".outbox", 5*time.Second) {
		t.Errorf("no log line about the late tenant's table:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}

	// A tenant leaves: its poller stops, the others go on.
	srv.Exec(t, "DROP DATABASE `"+tenants[19].Database+"`")
	waitLog(t, p, "outbox table no longer listed")
	before := tenants[0].Committed()
	relaytest.Produce(ctx, t, tenants[0].DB, "outbox", relaytest.ProduceOptions{Producers: 1, Transactions: 10}, tenants[0].Rec)
	if tenants[0].Committed() == before {
		t.Fatal("no event committed after the drop")
	}
	relaytest.WaitFor(t, 30*time.Second, "events after the drop", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:"+tenants[0].Database+":") >= tenants[0].Committed()
	})

	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0\n%s", code, relaytest.TailLines(p.Out.String(), 20))
	}
	total, committed := 0, 0
	for _, tn := range all {
		total += relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + tn.Database + ":"})
		committed += tn.Committed()
	}
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != total {
		t.Errorf("the streams hold %d entries, the tenants' streams %d: entries of no tenant (%s's %d events are not to be relayed)", n, total, other.Database, other.Committed())
	}
	for _, tn := range all {
		if m := env.RDB.Get(ctx, "binlog-outbox:mode:"+tn.Database+".outbox").Val(); m != "poll" {
			t.Errorf("mode of %s = %q, want poll", tn.Database, m)
		}
	}
	if n := strings.Count(p.Out.String(), "poll relay stopped"); n != len(all) {
		t.Errorf("%d pollers logged their stop, want %d (one per table)", n, len(all))
	}
	t.Logf("%d tenants, 1 kill, %d committed events, %d entries", len(all), committed, total)
}

// check --mode poll with several tables reports each table's poll readiness
// and is ready only when every table is; --mode auto on a server whose user
// lacks the REPLICATION privileges polls every table.
func TestCheckAndRun_PollSeveralTablesWithoutBinlogAccess(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, 3)
	pattern := relaytest.TenantPattern(prefix)
	// A managed server's application user: the tenants' rows, no
	// REPLICATION privileges. A second one may update two tables only.
	dbs := "`" + prefix + "\\_tenant\\_%`.*"
	full, partial := prefix+"full", prefix+"part"
	srv.Exec(t, "CREATE USER '"+full+"'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT, UPDATE, DELETE ON "+dbs+" TO '"+full+"'@'%'",
		"CREATE USER '"+partial+"'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON "+dbs+" TO '"+partial+"'@'%'",
		"GRANT UPDATE ON `"+tenants[0].Database+"`.outbox TO '"+partial+"'@'%'", "GRANT UPDATE ON `"+tenants[1].Database+"`.outbox TO '"+partial+"'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER '"+full+"'@'%'", "DROP USER '"+partial+"'@'%'") })
	global := func(user string) []string {
		return []string{"--mysql-dsn", srv.UserDSN(user, "pw", tenants[0].Database), "--redis-url", env.RedisURL, "--table", pattern}
	}

	out, errOut, code := run(t, append(global(full), "check", "--mode", "poll")...)
	if code != 0 {
		t.Fatalf("check --mode poll: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"3 tables match", "PASS  skip locked", "on all 3 tables", "PASS  poll write privilege", "poll mode: ready", "binlog mode: not ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, append(global(partial), "check", "--mode", "poll")...)
	failing := tenants[2].Database + ".outbox"
	if code == 0 || !strings.Contains(out, "FAIL  poll write privilege") || !strings.Contains(out, "1 of 3 tables: "+failing) ||
		strings.Contains(out, tenants[0].Database+".outbox: poll mode") || !strings.Contains(out, "poll mode: not ready") {
		t.Errorf("check --mode poll with a table the user cannot update: exit %d, want a failure naming %s alone:\n%s", code, failing, out)
	}

	// --mode auto, the default.
	port := closedPort(t)
	p := startRelayDSN(t, env, srv.UserDSN(full, "pw", tenants[0].Database), "--table", pattern, "--position-key", "binlog-outbox:position:"+prefix,
		"--stream", "outbox:{database}:{aggregate_type}", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--probe-interval", "200ms")
	committed := 0
	for _, tn := range tenants {
		relaytest.Produce(ctx, t, tn.DB, "outbox", relaytest.ProduceOptions{Producers: 2, Transactions: 10}, tn.Rec)
		committed += tn.Committed()
	}
	waitTenantsDelivered(t, env, tenants, 30*time.Second)
	// The metrics sum the tables.
	s := scraper{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	s.waitValue(`binlog_outbox_events_appended_total{mode="poll"}`, fmt.Sprintf("= the %d events of all tables", committed), func(v float64) bool { return v == float64(committed) })
	s.waitValue(`binlog_outbox_unsent_rows{mode="poll"}`, "= 0 once relayed", func(v float64) bool { return v == 0 })
	s.waitReady(http.StatusOK, "ready")
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0\n%s", code, relaytest.TailLines(p.Out.String(), 20))
	}
	if out := p.Out.String(); !strings.Contains(out, "using poll mode") || !strings.Contains(out, "REPLICATION") {
		t.Errorf("no log line saying why auto mode polls:\n%s", relaytest.TailLines(out, 20))
	}
	for _, tn := range tenants {
		relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{Prefix: "outbox:" + tn.Database + ":"})
		if m := env.RDB.Get(ctx, "binlog-outbox:mode:"+tn.Database+".outbox").Val(); m != "poll" {
			t.Errorf("mode of %s = %q, want poll", tn.Database, m)
		}
	}
}

// The relay in-process (so that -race sees the pollers, the listing and the
// metrics together), scraped all along: a tenant created while it polls is
// polled, one dropped has its poller stopped, and a table created that fails
// the checks (a required column missing) is never skipped in silence: while
// it holds no row the relay warns and looks again at every listing; its
// first row stops the relay with the reason.
func TestRun_PollSeveralTablesComeAndGo(t *testing.T) {
	// Its databases and Redis database are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	relaytest.NewTenants(t, srv, prefix, 1)
	out := &logging.Buffer{}
	app := NewApp()
	app.Writer, app.ErrWriter = out, out
	runCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	port := closedPort(t)
	done := make(chan error, 1)
	parsed := parseAlone(app)
	go func() {
		defer parsed()
		done <- app.RunContext(runCtx, append([]string{"binlog-outbox", "--mysql-dsn", srv.DSN(env.Database), "--redis-url", env.RedisURL, "--log-format", "json", "run"},
			append(pollTenantArgs(prefix), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--probe-interval", "20ms")...))
	}()
	waitIn := func(what string) {
		t.Helper()
		relaytest.WaitFor(t, 30*time.Second, "the relay to log "+what, func() bool { return strings.Contains(out.String(), what) })
	}
	waitIn("polling several outbox tables")
	scrapes := make(chan int)
	go func() {
		n := 0
		s := scraper{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		for runCtx.Err() == nil {
			if code, _ := s.get("/metrics"); code == http.StatusOK {
				n++
			}
			time.Sleep(5 * time.Millisecond)
		}
		scrapes <- n
	}()

	late := relaytest.NewTenant(t, srv, relaytest.TenantName(prefix, 2))
	relaytest.Produce(ctx, t, late.DB, "outbox", relaytest.ProduceOptions{Producers: 1, Transactions: 5}, late.Rec)
	relaytest.WaitFor(t, 30*time.Second, "the late tenant's events", func() bool {
		return relaytest.CountEntries(ctx, env.RDB, "outbox:"+late.Database+":") >= late.Committed()
	})
	relaytest.Check(ctx, t, env.RDB, late.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + late.Database + ":"})
	srv.Exec(t, "DROP DATABASE `"+late.Database+"`")
	waitIn("outbox table no longer listed")

	unfit := relaytest.TenantName(prefix, 3)
	t.Cleanup(func() { srv.Exec(t, "DROP DATABASE IF EXISTS `"+unfit+"`") })
	srv.Exec(t, "CREATE DATABASE `"+unfit+"`",
		"CREATE TABLE `"+unfit+"`.outbox (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, message_id CHAR(26) NOT NULL, "+
			"aggregate_type VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL, payload JSON NOT NULL, headers JSON NULL, sent_at DATETIME(6) NULL)")
	waitIn("not polled yet")
	time.Sleep(time.Second) // listings that find it again, still empty
	select {
	case err := <-done:
		t.Fatalf("the relay stopped at an empty unfit table: %v\n%s", err, relaytest.TailLines(out.String(), 20))
	default:
	}
	srv.Exec(t, "INSERT INTO `"+unfit+"`.outbox (message_id, aggregate_type, aggregate_id, payload) VALUES ('"+relaytest.MessageID()+"', 'order', 'o-1', '{}')")
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay went on with an unfit table holding a row:\n%s", relaytest.TailLines(out.String(), 20))
	}
	cancel()
	if err == nil || !strings.Contains(err.Error(), "cannot be polled") || !strings.Contains(err.Error(), unfit+".outbox") ||
		!strings.Contains(err.Error(), "event_type") || outbox.HintOf(err) == "" {
		t.Errorf("the relay stopped with %v (hint %q); want the table, the missing column and the fix", err, outbox.HintOf(err))
	}
	if n := strings.Count(out.String(), "not polled yet"); n != 1 {
		t.Errorf("the empty unfit table was warned of %d times, want once", n)
	}
	if n := <-scrapes; n == 0 {
		t.Error("no scrape of /metrics succeeded")
	}
}

// questions reads the server's count of statements received
// (SHOW GLOBAL STATUS Questions).
func questions(t *testing.T, srv *testsvc.MariaDB) int64 {
	t.Helper()
	db := srv.Open(t, "")
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		t.Fatalf("read Questions: %v", err)
	}
	return n
}

// A hundred idle tenant tables cost the server what their rows ask for, not
// a round per table and poll interval (which was 1,500 statements/s): one
// probe statement finds the tables with unsent rows, and only their pollers
// run rounds. A row in any table is still relayed within about one
// --poll-interval, and every tenant's events arrive once.
func TestRun_PollIdleTenantsCostFollowsTheRows(t *testing.T) {
	const tenantCount = 100
	// Questions counts the whole server's statements: a private server
	// keeps other tests' out of it, so this test can run beside them. An
	// external server is shared, and serial tests run before any parallel
	// one starts.
	var srv *testsvc.MariaDB
	if os.Getenv(testsvc.EnvMySQLDSN) != "" {
		srv = testsvc.SharedMariaDB(t)
	} else {
		t.Parallel()
		srv = testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	}
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	prefix := relaytest.TenantPrefix(t)
	tenants := relaytest.NewTenants(t, srv, prefix, tenantCount)
	p := startRelay(t, env, append(pollTenantArgs(prefix), "--poll-interval", "200ms")...)
	waitLog(t, p, "polling several outbox tables")
	// Every poller's first round, then parked.
	time.Sleep(2 * time.Second)

	const window = 3 * time.Second
	before := questions(t, srv)
	time.Sleep(window)
	rate := float64(questions(t, srv)-before) / window.Seconds()
	t.Logf("%d idle tables: %.0f statements/s", tenantCount, rate)
	if rate > 100 {
		t.Errorf("%d idle tables cost %.0f statements/s, want at most 100", tenantCount, rate)
	}

	// A row in one table: relayed within about one poll interval (the
	// probe runs twice per interval; the bound leaves room for a loaded
	// machine).
	for _, tn := range []*relaytest.Tenant{tenants[tenantCount/2], tenants[tenantCount-1], tenants[0]} {
		start := time.Now()
		relaytest.Produce(ctx, t, tn.DB, "outbox", relaytest.ProduceOptions{Producers: 1, Transactions: 1, RollbackRatio: -1}, tn.Rec)
		relaytest.WaitFor(t, 10*time.Second, tn.Database+"'s row in its stream", func() bool {
			return relaytest.CountEntries(ctx, env.RDB, "outbox:"+tn.Database+":") >= tn.Committed()
		})
		took := time.Since(start)
		t.Logf("a row in %s relayed in %s", tn.Database, took)
		if took > time.Second {
			t.Errorf("a row in %s took %s to be relayed, want about --poll-interval (200ms)", tn.Database, took)
		}
	}

	var wg sync.WaitGroup
	for _, tn := range tenants[:20] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relaytest.Produce(ctx, t, tn.DB, "outbox", relaytest.ProduceOptions{Producers: 1, Transactions: 10}, tn.Rec)
		}()
	}
	wg.Wait()
	waitTenantsDelivered(t, env, tenants, 60*time.Second)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0\n%s", code, relaytest.TailLines(p.Out.String(), 20))
	}
	for _, tn := range tenants {
		relaytest.Check(ctx, t, env.RDB, tn.Rec, relaytest.CheckOptions{ExactlyOnce: true, Prefix: "outbox:" + tn.Database + ":"})
	}
}
