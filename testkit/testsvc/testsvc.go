// Package testsvc starts private MariaDB and Redis server processes for tests:
// own loopback ports, own temporary data directories, binlog on, so that a test
// can kill -9 and restart them without touching any other server on the
// machine.
//
// A test package calls Main from TestMain; SharedMariaDB and SharedRedis then
// start one server of each kind for the whole test binary on first use, and
// tests isolate themselves with NewDatabase and NewRedisDB. StartMariaDB and
// StartRedis start a dedicated server, e.g. with binlog_format=STATEMENT to test
// an error path, or one that a test kills.
//
// Environment variables point the tests at external servers instead:
// BINLOG_OUTBOX_TEST_MYSQL_DSN (a go-sql-driver DSN of a user that may create
// databases and users, e.g. root:secret@tcp(127.0.0.1:3306)/) and
// BINLOG_OUTBOX_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379/0). Tests that must
// kill or restart a server, or need other server settings, skip in that mode
// with a log line saying so.
//
// Two more choose which binaries the private servers run, which every test
// may kill and restart as usual: BINLOG_OUTBOX_TEST_ROOT, a Debian 13 tree's
// root (scripts/trixie-tree.sh), and BINLOG_OUTBOX_TEST_REDIS=valkey for
// Valkey in place of Redis (testkit/servers).
package testsvc

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// Environment variables that select external servers.
const (
	EnvMySQLDSN = "BINLOG_OUTBOX_TEST_MYSQL_DSN"
	EnvRedisURL = "BINLOG_OUTBOX_TEST_REDIS_URL"
)

// InstallHint is the command that installs the server binaries the tests need.
const InstallHint = servers.InstallCommand

var (
	sharedMu    sync.Mutex
	sharedDB    *MariaDB
	sharedRedis *Redis
	// The shared Sentinel set and Redis Cluster, for the conformance
	// suite's topologies.
	sharedSentinels   *Sentinels
	sharedCluster     *RedisCluster
	sharedErrSentinel error
	sharedErrCluster  error
	sharedErrDB       error
	sharedErrRDS      error
	cleanups          []func()
)

// Main runs the tests of a package and stops the shared servers afterwards.
// Use it from TestMain: func TestMain(m *testing.M) { testsvc.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	sharedMu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	sharedMu.Unlock()
	os.Exit(code)
}

// MainParallel is Main with at least n parallel tests at a time where the
// command line does not say -test.parallel: the default, GOMAXPROCS, keeps a
// 2-core machine at two tests that spend their time waiting on the servers
// and relay processes they started, not on the CPU.
func MainParallel(m *testing.M, n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && n > runtime.GOMAXPROCS(0) {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic("testsvc: set -test.parallel: " + err.Error())
		}
	}
	Main(m)
}

// AtExit registers fn to run after the package's tests, when Main stops the
// shared servers: for what a test binary keeps across its tests (a relay
// binary it built), which t.Cleanup would remove after the first test.
func AtExit(fn func()) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	registerCleanup(fn)
}

// registerCleanup remembers fn for Main; shared servers outlive single tests.
// The caller holds sharedMu.
func registerCleanup(fn func()) {
	cleanups = append(cleanups, fn)
}

// tempDir makes a directory that survives the test that created it, for the
// shared servers; a short path keeps unix socket paths under 108 bytes.
func tempDir(prefix string) (string, error) {
	return os.MkdirTemp("", prefix)
}

// skipExternal skips a test that needs to control the server process.
func skipExternal(t testing.TB, what, env string) {
	t.Helper()
	t.Logf("skipping: this test needs to %s, which is impossible with the external server from %s", what, env)
	t.SkipNow()
}
