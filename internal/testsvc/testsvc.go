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
package testsvc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables that select external servers.
const (
	EnvMySQLDSN = "BINLOG_OUTBOX_TEST_MYSQL_DSN"
	EnvRedisURL = "BINLOG_OUTBOX_TEST_REDIS_URL"
)

// InstallHint is the command that installs the server binaries the tests need.
const InstallHint = "apt-get update && apt-get install -y mariadb-server redis-server"

var (
	sharedMu     sync.Mutex
	sharedDB     *MariaDB
	sharedRedis  *Redis
	sharedErrDB  error
	sharedErrRDS error
	cleanups     []func()
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

// registerCleanup remembers fn for Main; shared servers outlive single tests.
func registerCleanup(fn func()) {
	cleanups = append(cleanups, fn)
}

// lookBinary finds a server binary in PATH or in the sbin directories Debian
// installs servers to, which are not in a normal user's PATH.
func lookBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or /usr/sbin; install it with: %s", name, InstallHint)
}

// freePort asks the kernel for a free loopback port. Another process may take it
// before the server binds it; callers retry the start on a bind failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tempDir makes a directory that survives the test that created it, for the
// shared servers; a short path keeps unix socket paths under 108 bytes.
func tempDir(prefix string) (string, error) {
	return os.MkdirTemp("", prefix)
}

// waitFor polls ready until it returns nil or the deadline passes, reporting the
// last error and the tail of the server log.
func waitFor(timeout time.Duration, ready func() error, exited <-chan struct{}, logPath string) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("server exited during start-up: %v\n%s", last, tail(logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("server not ready after %s: %v\n%s", timeout, last, tail(logPath, 20))
}

// tail returns the last n lines of a file, for start-up error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- " + path + "\n" + strings.Join(lines, "\n")
}

// process is a started server process whose exit is observed by one goroutine.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startProcess(bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the process to exit with SIGTERM and waits; it falls back to
// SIGKILL after the timeout.
func (p *process) stop(timeout time.Duration) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
	}
}

// skipExternal skips a test that needs to control the server process.
func skipExternal(t testing.TB, what, env string) {
	t.Helper()
	t.Logf("skipping: this test needs to %s, which is impossible with the external server from %s", what, env)
	t.SkipNow()
}
