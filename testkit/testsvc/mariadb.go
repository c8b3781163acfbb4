package testsvc

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// DefaultMariaDBArgs are the server settings the relay needs; a test passes
// Args to override single ones (a later --x=y wins over an earlier one).
var DefaultMariaDBArgs = []string{
	"--log-bin=mysql-bin",
	"--binlog-format=ROW",
	"--binlog-row-image=FULL",
	"--binlog-row-metadata=FULL",
	"--server-id=1",
	// Durability is not what the tests measure; a killed process loses
	// nothing the kernel already has, and the suite stays fast.
	"--innodb-flush-log-at-trx-commit=2",
	"--sync-binlog=0",
	"--innodb-buffer-pool-size=128M",
	"--innodb-log-file-size=64M",
	"--max-connections=500",
	"--skip-name-resolve",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_unicode_ci",
}

// MariaDBOptions configures a private MariaDB server.
type MariaDBOptions struct {
	// Args are appended to DefaultMariaDBArgs, e.g. "--binlog-format=STATEMENT"
	// or "--skip-log-bin".
	Args []string
}

// MariaDB is a MariaDB server for tests: a private process or, with
// BINLOG_OUTBOX_TEST_MYSQL_DSN, an external server.
type MariaDB struct {
	external *mysql.Config // set in external mode

	dir string // the private server's directory, removed at shutdown
	srv *servers.MariaDB
}

var dbCounter atomic.Int64

// SharedMariaDB returns the test binary's shared server, starting it on first
// use. It fails the test when the server cannot start.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedDB == nil && sharedErrDB == nil {
		sharedDB, sharedErrDB = startMariaDB(MariaDBOptions{}, true)
		if sharedErrDB == nil {
			m := sharedDB
			registerCleanup(func() { m.shutdown() })
		}
	}
	if sharedErrDB != nil {
		t.Fatalf("start shared MariaDB: %v", sharedErrDB)
	}
	return sharedDB
}

// StartMariaDB starts a private server for one test, stopped when the test
// ends. In external mode the test is skipped: it needs its own server.
func StartMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	if os.Getenv(EnvMySQLDSN) != "" {
		skipExternal(t, "start a server with its own settings "+strings.Join(opts.Args, " "), EnvMySQLDSN)
	}
	m, err := startMariaDB(opts, false)
	if err != nil {
		t.Fatalf("start MariaDB: %v", err)
	}
	t.Cleanup(m.shutdown)
	return m
}

func startMariaDB(opts MariaDBOptions, allowExternal bool) (*MariaDB, error) {
	if dsn := os.Getenv(EnvMySQLDSN); dsn != "" && allowExternal {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", EnvMySQLDSN, err)
		}
		return &MariaDB{external: cfg}, nil
	}
	dir, err := tempDir("bo-mariadb-")
	if err != nil {
		return nil, err
	}
	srv, err := servers.StartMariaDBFromTemplate(context.Background(), templateDir(), dir, append(append([]string{}, DefaultMariaDBArgs...), opts.Args...))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &MariaDB{dir: dir, srv: srv}, nil
}

// External reports whether the server is an external one the tests cannot
// kill or restart.
func (m *MariaDB) External() bool { return m.external != nil }

// Host returns the server's host.
func (m *MariaDB) Host() string {
	if m.external != nil {
		host, _, _ := strings.Cut(m.external.Addr, ":")
		return host
	}
	return "127.0.0.1"
}

// Port returns the server's TCP port.
func (m *MariaDB) Port() int {
	if m.external != nil {
		_, port, _ := strings.Cut(m.external.Addr, ":")
		p, _ := strconv.Atoi(port)
		if p == 0 {
			p = 3306
		}
		return p
	}
	return m.srv.Port()
}

// Addr returns host:port.
func (m *MariaDB) Addr() string { return m.Host() + ":" + strconv.Itoa(m.Port()) }

// User and Password are the administrative credentials.
func (m *MariaDB) User() string {
	if m.external != nil {
		return m.external.User
	}
	return "root"
}

// Password returns the administrative password ("" for private servers).
func (m *MariaDB) Password() string {
	if m.external != nil {
		return m.external.Passwd
	}
	return ""
}

// DSN returns a go-sql-driver DSN for the administrative user on database
// (which may be "").
func (m *MariaDB) DSN(database string) string {
	return m.UserDSN(m.User(), m.Password(), database)
}

// UserDSN returns a go-sql-driver DSN for another user.
func (m *MariaDB) UserDSN(user, password, database string) string {
	cfg := mysql.NewConfig()
	cfg.User = user
	cfg.Passwd = password
	cfg.Net = "tcp"
	cfg.Addr = m.Addr()
	cfg.DBName = database
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	return cfg.FormatDSN()
}

// DataDir returns the private server's data directory ("" when external), where
// its binlog files live.
func (m *MariaDB) DataDir() string {
	if m.external != nil {
		return ""
	}
	return m.srv.DataDir()
}

// LogPath returns the private server's error log ("" when external).
func (m *MariaDB) LogPath() string {
	if m.external != nil {
		return ""
	}
	return m.srv.LogPath()
}

// Open opens an administrative connection pool, closed at the end of the test.
func (m *MariaDB) Open(t testing.TB, database string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", m.DSN(database))
	if err != nil {
		t.Fatalf("open MariaDB: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Exec runs statements as the administrative user and fails the test on error.
func (m *MariaDB) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatalf("open MariaDB: %v", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("exec %q: %v", s, err)
		}
	}
}

// NewDatabase creates a fresh database for the test and drops it afterwards. It
// returns the database name.
func (m *MariaDB) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d_%s", os.Getpid(), dbCounter.Add(1), sanitize(t.Name()))
	if len(name) > 64 {
		name = name[:64]
	}
	m.Exec(t, "CREATE DATABASE "+quote(name))
	t.Cleanup(func() {
		db, err := sql.Open("mysql", m.DSN(""))
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quote(name))
	})
	return name
}

// Kill sends SIGKILL to the server. Restart brings it back on the same port and
// data directory. External servers skip the test.
func (m *MariaDB) Kill(t testing.TB) {
	t.Helper()
	if m.external != nil {
		skipExternal(t, "kill the MySQL server", EnvMySQLDSN)
	}
	m.srv.Kill()
}

// Restart kills the server if it runs and starts it again.
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	if m.external != nil {
		skipExternal(t, "restart the MySQL server", EnvMySQLDSN)
	}
	m.srv.Kill()
	if err := m.srv.Start(context.Background()); err != nil {
		t.Fatalf("restart MariaDB: %v", err)
	}
}

// RequirePrivate skips the test in external mode, for tests that control the
// server process.
func (m *MariaDB) RequirePrivate(t testing.TB, what string) {
	t.Helper()
	if m.external != nil {
		skipExternal(t, what, EnvMySQLDSN)
	}
}

func (m *MariaDB) shutdown() {
	if m.external != nil {
		return
	}
	m.srv.Stop(20 * time.Second)
	_ = os.RemoveAll(m.dir)
}

// templateDir is where the data directory templates live across test
// binaries and runs; the user id keeps users of one machine apart.
func templateDir() string {
	return filepath.Join(os.TempDir(), "binlog-outbox-templates-"+strconv.Itoa(os.Getuid()))
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func quote(ident string) string { return "`" + strings.ReplaceAll(ident, "`", "``") + "`" }
