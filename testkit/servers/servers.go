// Package servers starts private MariaDB and Redis server processes on
// loopback ports, with their data in a directory the caller owns: the test
// service launcher (testkit/testsvc) and the benchmark (package bench, run by
// cmd/binlog-outbox-bench) share it.
//
// It imports no testing package, so the benchmark's binary can link it; failing a
// test, cleaning up after one and pointing tests at external servers are
// testkit/testsvc's business. Which binaries it runs, the machine's or a
// Debian 13 tree's, Redis or Valkey, two environment variables say
// (EnvRoot, EnvRedis).
package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// InstallCommand installs the server binaries.
const InstallCommand = "apt-get update && apt-get install -y mariadb-server redis-server"

// ErrNotFound means a server binary is neither in PATH nor in an sbin directory.
var ErrNotFound = errors.New("server binary not found")

// errPortInUse means the server could not bind its port: another process
// took it between FreePort and the bind. Start retries on another port.
var errPortInUse = errors.New("port already in use")

// startAttempts is how many ports a start tries before it gives up.
const startAttempts = 3

// onFreePort runs start on free ports until it does not fail for want of the
// port, at most startAttempts times.
func onFreePort(start func(port int) error) (int, error) {
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		err = start(port)
		if err == nil || attempt == startAttempts || !errors.Is(err, errPortInUse) {
			return port, err
		}
	}
}

// process is a started server process whose exit is observed by one goroutine.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startProcess starts bin with its standard output and error appended to
// outPath.
func startProcess(bin binary, args []string, outPath string) (*process, error) {
	if err := bin.sees(filepath.Dir(outPath)); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open server output: %w", err)
	}
	cmd := bin.command(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL and waits for the process to be gone. A nil process is
// no process.
func (p *process) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the process to exit with SIGTERM and waits; it falls back to
// SIGKILL after timeout.
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

// handle is the running process of a server, which MariaDB and Redis embed.
type handle struct {
	proc *process
}

// run starts bin and waits until ready succeeds (see waitReady).
func (h *handle) run(ctx context.Context, bin binary, args []string, outPath, logPath string, timeout time.Duration, ready func(ctx context.Context) error) error {
	p, err := startProcess(bin, args, outPath)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, p, timeout, logPath, ready); err != nil {
		return err
	}
	h.proc = p
	return nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (h *handle) Kill() {
	h.proc.kill()
	h.proc = nil
}

// Stop shuts the server down (SIGTERM, SIGKILL after timeout). It leaves the
// directory to the caller.
func (h *handle) Stop(timeout time.Duration) {
	h.proc.stop(timeout)
	h.proc = nil
}

// Pid returns the server's process id, 0 when it is not running.
func (h *handle) Pid() int {
	if h.proc == nil {
		return 0
	}
	return h.proc.cmd.Process.Pid
}

// Running reports whether the server was started and not killed or stopped.
func (h *handle) Running() bool { return h.proc != nil }

// waitReady polls ready until it returns nil, the process exits, ctx ends or
// timeout passes, and kills the process unless it became ready. Its errors
// carry the tail of the server log; a server that exited because its port
// was taken gives errPortInUse.
func waitReady(ctx context.Context, p *process, timeout time.Duration, logPath string, ready func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = ready(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			log := tail(logPath, 20)
			// The server's log is the only account of why it exited.
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("server exited during start-up: %w\n%s", errPortInUse, log)
			}
			return fmt.Errorf("server exited during start-up: %v\n%s", last, log)
		case <-ctx.Done():
			p.kill()
			return fmt.Errorf("server not ready after %s: %v\n%s", timeout, last, tail(logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
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
