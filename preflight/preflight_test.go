package preflight

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// secret is the password of the users the tests create: special characters,
// and easy to look for in messages.
const secret = "s3cr@t:p/w"

// newOutbox creates a database with a default outbox table.
func newOutbox(t *testing.T, m *testsvc.MariaDB) string {
	t.Helper()
	database := m.NewDatabase(t)
	if err := schema.Apply(ctx(t), m.Open(t, database), "outbox", schema.DefaultMapping()); err != nil {
		t.Fatalf("create outbox table: %v", err)
	}
	return database
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

var userCounter atomic.Int64

// newUser creates a user with a unique name and the given grants ("%s" in a
// grant is replaced by the account), dropped when the test ends.
func newUser(t *testing.T, m *testsvc.MariaDB, grants ...string) string {
	t.Helper()
	user := fmt.Sprintf("pf%d_%d", os.Getpid(), userCounter.Add(1))
	acct := "'" + user + "'@'%'"
	stmts := []string{"CREATE USER " + acct + " IDENTIFIED BY '" + secret + "'"}
	for _, g := range grants {
		stmts = append(stmts, strings.ReplaceAll(g, "%s", acct))
	}
	m.Exec(t, stmts...)
	t.Cleanup(func() { m.Exec(t, "DROP USER IF EXISTS "+acct) })
	return user
}

func config(t *testing.T, dsn, redisURL string) Config {
	t.Helper()
	target, err := redisconn.ParseTarget(redisURL, "")
	if err != nil {
		t.Fatalf("the test's Redis URL does not parse: %v", err)
	}
	return Config{MySQLDSN: dsn, Redis: target, Table: "outbox", ServerID: 1001}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func find(t *testing.T, rep Report, name string) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result %q in %s", name, dump(rep))
	return Result{}
}

// expect asserts the status of the named results, and that every Warn and
// Fail carries a fix and no result shows the test password.
func expect(t *testing.T, rep Report, want map[string]Status) {
	t.Helper()
	for name, status := range want {
		if r := find(t, rep, name); r.Status != status {
			t.Errorf("%s: status %v (%s), want %v", name, r.Status, r.Detail, status)
		}
	}
	for _, r := range rep.Results {
		if (r.Status == Warn || r.Status == Fail) && r.Fix == "" {
			t.Errorf("%s: %v without a fix (%s)", r.Name, r.Status, r.Detail)
		}
		if r.Detail == "" || len(r.Modes) == 0 {
			t.Errorf("%s: empty detail or modes: %+v", r.Name, r)
		}
		if logging.Leaks(r.Detail+r.Fix, secret) || strings.Contains(r.Detail, "t:p") {
			t.Errorf("%s shows the password: %s / %s", r.Name, r.Detail, r.Fix)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(dump(rep))
	}
}

func dump(rep Report) string {
	var b strings.Builder
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n%s %s: %s", r.Status, r.Name, r.Detail)
		if r.Fix != "" {
			fmt.Fprintf(&b, " (fix: %s)", r.Fix)
		}
	}
	return b.String()
}

func allPass() map[string]Status {
	want := map[string]Status{}
	for _, r := range append(append([]requirement{{NameMySQL, both}}, afterMySQL...), append([]requirement{{NameRedis, both}}, afterRedis...)...) {
		want[r.name] = Pass
	}
	// The test servers trade durability for speed (testsvc.DefaultMariaDBArgs):
	// a warning, which leaves every mode ready.
	want[NameSyncBinlog], want[NameFlushLogAtCommit] = Warn, Warn
	want[NameFailover] = Pass
	return want
}

func TestRun_AllPass(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	database := newOutbox(t, m)
	rep := Run(ctx(t), config(t, m.DSN(database), testsvc.SharedRedis(t).URL(0)))
	expect(t, rep, allPass())
	if len(rep.Results) != len(allPass()) {
		t.Errorf("%d results, want %d", len(rep.Results), len(allPass()))
	}
	for _, mode := range AllModes {
		if err := rep.Err(mode); err != nil {
			t.Errorf("Err(%s) = %v, want nil", mode, err)
		}
	}
	if s := rep.Server; s.Flavor != mysqlserver.FlavorMariaDB || s.Major < 10 || s.ServerID != 1 {
		t.Errorf("Server = %+v, want MariaDB >= 10 with server_id 1", s)
	}
}

// TestRun_ServerSettings runs one private server per setting that breaks
// binlog mode; poll mode must stay usable on each.
func TestRun_ServerSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want map[string]Status
		poll bool
	}{
		{"statement format", []string{"--binlog-format=STATEMENT"}, map[string]Status{NameBinlogFormat: Fail, NameLogBin: Pass}, true},
		{"minimal row image and metadata", []string{"--binlog-row-image=MINIMAL", "--binlog-row-metadata=MINIMAL"},
			map[string]Status{NameBinlogRowImage: Fail, NameBinlogRowMetadata: Warn, NameBinlogFormat: Pass}, true},
		{"binlog off", []string{"--skip-log-bin"}, map[string]Status{NameLogBin: Fail, NameSyncBinlog: Pass}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: tt.args})
			database := newOutbox(t, m)
			rep := Run(ctx(t), config(t, m.DSN(database), testsvc.SharedRedis(t).URL(0)))
			expect(t, rep, tt.want)
			if len(rep.Failed(ModeBinlog)) == 0 {
				t.Errorf("binlog mode passes, want it to fail")
			}
			if got := len(rep.Failed(ModePoll)) == 0; got != tt.poll {
				t.Errorf("poll mode usable = %v, want %v", got, tt.poll)
			}
			if err := rep.Err(ModeBinlog); err == nil || !strings.Contains(err.Error(), rep.Failed(ModeBinlog)[0].Name) {
				t.Errorf("Err(binlog) = %v, want it to name the failed requirement", err)
			}
		})
	}
}

// TestRun_Durability checks the warnings about settings that let an OS crash
// take back transactions the relay may have appended, each way, on one
// private server whose settings the test changes with SET GLOBAL.
func TestRun_Durability(t *testing.T) {
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	database := newOutbox(t, m)
	redisURL := testsvc.SharedRedis(t).URL(0)
	tests := []struct {
		syncBinlog, flushLog string
		want                 map[string]Status
		fix                  map[string]string
	}{
		{"0", "2", map[string]Status{NameSyncBinlog: Warn, NameFlushLogAtCommit: Warn},
			map[string]string{NameSyncBinlog: "SET GLOBAL sync_binlog=1", NameFlushLogAtCommit: "SET GLOBAL innodb_flush_log_at_trx_commit=1"}},
		{"1", "1", map[string]Status{NameSyncBinlog: Pass, NameFlushLogAtCommit: Pass}, nil},
		{"100", "1", map[string]Status{NameSyncBinlog: Warn, NameFlushLogAtCommit: Pass}, map[string]string{NameSyncBinlog: "my.cnf"}},
		{"1", "0", map[string]Status{NameSyncBinlog: Pass, NameFlushLogAtCommit: Warn}, map[string]string{NameFlushLogAtCommit: "my.cnf"}},
		{"1", "3", map[string]Status{NameSyncBinlog: Pass, NameFlushLogAtCommit: Pass}, nil},
	}
	for _, tt := range tests {
		t.Run("sync_binlog="+tt.syncBinlog+",flush="+tt.flushLog, func(t *testing.T) {
			m.Exec(t, "SET GLOBAL sync_binlog="+tt.syncBinlog, "SET GLOBAL innodb_flush_log_at_trx_commit="+tt.flushLog)
			rep := Run(ctx(t), config(t, m.DSN(database), redisURL))
			expect(t, rep, tt.want)
			for name, fix := range tt.fix {
				if r := find(t, rep, name); !strings.Contains(r.Fix, fix) {
					t.Errorf("%s: fix %q does not say %q", name, r.Fix, fix)
				}
			}
			// Warnings, not failures: both modes still run, and run logs them.
			for _, mode := range AllModes {
				if err := rep.Err(mode); err != nil {
					t.Errorf("Err(%s) = %v, want nil", mode, err)
				}
				if got := len(rep.Warned(mode)); got < len(tt.fix) {
					t.Errorf("Warned(%s) has %d results, want at least %d", mode, got, len(tt.fix))
				}
			}
		})
	}
}

func TestRun_Privileges(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	redisURL := testsvc.SharedRedis(t).URL(0)
	database := newOutbox(t, m)
	table := "`" + database + "`.`outbox`"
	tests := []struct {
		name   string
		grants []string
		want   map[string]Status
	}{
		{"all needed", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s", "GRANT SELECT, UPDATE, DELETE ON " + table + " TO %s"},
			map[string]Status{NameReplicationSlave: Pass, NameReplicationClient: Pass, NameSelect: Pass, NameTable: Pass, NamePollWrite: Pass,
				NameServerID: Pass}}, // SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN; the claims in Redis stand in
		{"no replication slave", []string{"GRANT BINLOG MONITOR ON *.* TO %s", "GRANT SELECT, UPDATE ON " + table + " TO %s"},
			map[string]Status{NameReplicationSlave: Fail, NameReplicationClient: Pass, NameSelect: Pass, NamePollWrite: Pass}},
		{"no replication client", []string{"GRANT REPLICATION SLAVE ON *.* TO %s", "GRANT SELECT, DELETE ON " + table + " TO %s"},
			map[string]Status{NameReplicationSlave: Pass, NameReplicationClient: Fail, NamePollWrite: Pass}},
		{"no select", []string{"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s"},
			map[string]Status{NameSelect: Fail, NameTable: Skip, NamePollWrite: Fail, NameReplicationSlave: Pass}},
		{"select only", []string{"GRANT SELECT ON " + table + " TO %s"},
			map[string]Status{NameSelect: Pass, NameTable: Pass, NameSkipLocked: Pass, NamePollWrite: Fail, NameReplicationSlave: Fail, NameReplicationClient: Fail}},
		{"through a role", []string{"CREATE ROLE IF NOT EXISTS pf_relay_role", "GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICATION MASTER ADMIN ON *.* TO pf_relay_role",
			"GRANT SELECT, UPDATE, DELETE ON " + table + " TO pf_relay_role", "GRANT pf_relay_role TO %s", "SET DEFAULT ROLE pf_relay_role FOR %s"},
			map[string]Status{NameReplicationSlave: Pass, NameReplicationClient: Pass, NameSelect: Pass, NamePollWrite: Pass, NameServerID: Pass}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := newUser(t, m, tt.grants...)
			rep := Run(ctx(t), config(t, m.UserDSN(user, secret, database), redisURL))
			expect(t, rep, tt.want)
		})
	}
	m.Exec(t, "DROP ROLE IF EXISTS pf_relay_role")
}

func TestRun_ServerID(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	database := newOutbox(t, m)
	redisURL := testsvc.SharedRedis(t).URL(0)
	for _, tt := range []struct {
		id   uint32
		want Status
	}{{1001, Pass}, {1, Fail}, {0, Fail}} {
		cfg := config(t, m.DSN(database), redisURL)
		cfg.ServerID = tt.id
		rep := Run(ctx(t), cfg)
		expect(t, rep, map[string]Status{NameServerID: tt.want})
		if tt.want == Fail && len(rep.Failed(ModePoll)) != 0 {
			t.Errorf("server id %d fails poll mode, which registers no replica", tt.id)
		}
		if r := find(t, rep, NameServerID); r.Cause != CauseNone {
			t.Errorf("server id %d: cause %v, want CauseNone (no replica holds it)", tt.id, r.Cause)
		}
	}
}

// TestRun_ServerIDUsedByReplica attaches a real replica with server_id 1001
// to a private primary; the relay's default id must then fail.
func TestRun_ServerIDUsedByReplica(t *testing.T) {
	t.Parallel()
	primary := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	replica := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--server-id=1001", "--report-host=127.0.0.1"}})
	replica.Exec(t, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s'",
		primary.Port(), primary.User(), primary.Password()), "START SLAVE")
	t.Cleanup(func() { replica.Exec(t, "STOP SLAVE") })
	db := primary.Open(t, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows, err := queryRows(ctx(t), db, "SHOW SLAVE HOSTS")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not register with the primary")
		}
		time.Sleep(100 * time.Millisecond)
	}
	database := newOutbox(t, primary)
	rep := Run(ctx(t), config(t, primary.DSN(database), testsvc.SharedRedis(t).URL(0)))
	expect(t, rep, map[string]Status{NameServerID: Fail})
	r := find(t, rep, NameServerID)
	if !strings.Contains(r.Detail, "127.0.0.1") {
		t.Errorf("detail %q does not say where the replica is", r.Detail)
	}
	if r.Cause != CauseServerIDInUse {
		t.Errorf("cause %v, want CauseServerIDInUse (run tolerates it for a while)", r.Cause)
	}
}

func TestRun_MySQLProblems(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	redisURL := testsvc.SharedRedis(t).URL(0)
	database := newOutbox(t, m)
	empty := m.NewDatabase(t)
	user := newUser(t, m, "GRANT SELECT ON `"+database+"`.* TO %s")
	skipped := map[string]Status{NameLogBin: Skip, NameTable: Skip, NameSkipLocked: Skip, NameRedis: Pass}
	tests := []struct {
		name string
		dsn  string
		want map[string]Status
	}{
		{"unreachable", fmt.Sprintf("%s:%s@tcp(127.0.0.1:%d)/app", user, secret, closedPort(t)), merge(map[string]Status{NameMySQL: Fail}, skipped)},
		{"wrong password", m.UserDSN(user, "wrong-"+secret, database), merge(map[string]Status{NameMySQL: Fail}, skipped)},
		{"invalid dsn", user + ":" + secret + "@tcp(127.0.0.1:3306", merge(map[string]Status{NameMySQL: Fail}, skipped)},
		{"no database", m.UserDSN(user, secret, ""), map[string]Status{NameMySQL: Pass, NameSelect: Fail, NameTable: Skip}},
		{"no table", m.DSN(empty), map[string]Status{NameSelect: Skip, NameTable: Fail, NamePollWrite: Skip, NameLogBin: Pass}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Run(ctx(t), config(t, tt.dsn, redisURL))
			expect(t, rep, tt.want)
			for _, mode := range AllModes {
				if len(rep.Failed(mode)) == 0 {
					t.Errorf("%s mode passes, want it to fail", mode)
				}
			}
		})
	}
}

func merge(a, b map[string]Status) map[string]Status {
	out := map[string]Status{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestRun_Redis(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	database := newOutbox(t, m)
	evicting := testsvc.StartRedis(t, testsvc.RedisOptions{Args: []string{"--maxmemory-policy", "allkeys-lru", "--appendonly", "no"}})
	lazy := testsvc.StartRedis(t, testsvc.RedisOptions{Args: []string{"--appendfsync", "no"}})
	port := closedPort(t)
	tests := []struct {
		name  string
		url   string
		want  map[string]Status
		fails bool
	}{
		{"unreachable", fmt.Sprintf("redis://relay:%s@127.0.0.1:%d/0", strings.ReplaceAll(secret, "/", "%2F"), port),
			map[string]Status{NameRedis: Fail, NameRedisEviction: Skip, NameRedisPersistence: Skip}, true},
		{"evicting, no AOF", evicting.URL(0), map[string]Status{NameRedis: Pass, NameRedisEviction: Warn, NameRedisPersistence: Warn}, false},
		{"appendfsync no", lazy.URL(0), map[string]Status{NameRedisEviction: Pass, NameRedisPersistence: Warn}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Run(ctx(t), config(t, m.DSN(database), tt.url))
			expect(t, rep, tt.want)
			for _, mode := range AllModes {
				if got := len(rep.Failed(mode)) > 0; got != tt.fails {
					t.Errorf("%s mode fails = %v, want %v", mode, got, tt.fails)
				}
			}
		})
	}
}

// TestRun_PollWriteWithoutSentAt: on a table without a sent_at column,
// --on-sent mark has nothing to map; the fix names the column to add, and
// --on-sent delete only where DELETE works, and that step passes.
func TestRun_PollWriteWithoutSentAt(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	redisURL := testsvc.SharedRedis(t).URL(0)
	database := newOutbox(t, m)
	m.Exec(t, "ALTER TABLE `"+database+"`.outbox DROP COLUMN sent_at")
	withDelete := newUser(t, m, "GRANT SELECT, UPDATE, DELETE ON `"+database+"`.outbox TO %s")
	selectOnly := newUser(t, m, "GRANT SELECT ON `"+database+"`.outbox TO %s")
	for _, tt := range []struct {
		user       string
		wantDelete bool
	}{{withDelete, true}, {selectOnly, false}} {
		cfg := config(t, m.UserDSN(tt.user, secret, database), redisURL)
		cfg.OnSent = "mark"
		r := find(t, Run(ctx(t), cfg), NamePollWrite)
		if r.Status != Fail || !strings.Contains(r.Fix, "add a sent_at DATETIME(6) NULL column") ||
			strings.Contains(r.Fix, "--on-sent delete") != tt.wantDelete {
			t.Errorf("%s: %s %s (fix: %s); want a failure whose fix adds sent_at, and offers --on-sent delete: %v", tt.user, r.Status, r.Detail, r.Fix, tt.wantDelete)
		}
		if !tt.wantDelete {
			continue
		}
		// Follow the fix.
		cfg.OnSent = "delete"
		if r := find(t, Run(ctx(t), cfg), NamePollWrite); r.Status != Pass {
			t.Errorf("--on-sent delete: %s %s, want a pass", r.Status, r.Detail)
		}
	}
}

// TestRun_ServerIDWithDocumentedGrants: with the documented grants MariaDB
// does not list its replicas, and check warned of every --server-id, the
// demo's included. The claims relays record in Redis say what the relay can
// know: no claim or its own position's passes, another position's claim of
// the id fails as run refuses it.
func TestRun_ServerIDWithDocumentedGrants(t *testing.T) {
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	database := newOutbox(t, m)
	rs := testsvc.SharedRedis(t)
	user := newUser(t, m, "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s", "GRANT SELECT ON `"+database+"`.outbox TO %s")
	cfg := config(t, m.UserDSN(user, secret, database), rs.URL(0))
	cfg.ServerID = 1_500_000_000 + uint32(userCounter.Add(1))
	cfg.PositionKey = "binlog-outbox:position:" + database + ".outbox"
	rep := Run(ctx(t), cfg)
	if r := find(t, rep, NameServerID); r.Status != Pass {
		t.Fatalf("server id line with the documented grants and no claim: %s %q; want PASS", r.Status, r.Detail)
	}
	client := rs.Client(t, rs.URL(0))
	key := redisstream.ServerIDKey(cfg.ServerID)
	t.Cleanup(func() { client.Del(context.Background(), key) })
	other := redisstream.NewServerIDClaimer(client, cfg.ServerID, "binlog-outbox:position:billing.outbox", "web-2/4242", 0)
	if _, taken, err := other.Claim(ctx(t)); err != nil || !taken {
		t.Fatalf("Claim() = %v, %v", taken, err)
	}
	rep = Run(ctx(t), cfg)
	r := find(t, rep, NameServerID)
	if r.Status != Fail || r.Cause != CauseServerIDInUse || !strings.Contains(r.Detail, "web-2/4242") || !strings.Contains(r.Detail, "billing.outbox") || r.Fix == "" {
		t.Errorf("server id line with another position's claim: %s %q (cause %v); want FAIL naming the holder and its position, with a fix", r.Status, r.Detail, r.Cause)
	}
	own := redisstream.NewServerIDClaimer(client, cfg.ServerID, cfg.PositionKey, "web-1/1", 0)
	if _, taken, err := own.Claim(ctx(t)); err != nil || taken {
		t.Fatalf("a relay of another position took a held claim: %v, %v", taken, err)
	}
	client.Del(ctx(t), key)
	if _, taken, err := own.Claim(ctx(t)); err != nil || !taken {
		t.Fatalf("Claim() of a free id = %v, %v", taken, err)
	}
	if r := find(t, Run(ctx(t), cfg), NameServerID); r.Status != Pass {
		t.Errorf("server id line with this position's own claim: %s %q; want PASS", r.Status, r.Detail)
	}
}
