package relaytest

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Process is a command under test running as its own process, so that a test
// can kill -9 it or send it signals. Its output is kept in Out; it is killed
// when the test ends, and the end of its output is logged if the test failed.
type Process struct {
	Cmd  *exec.Cmd
	Out  *logging.Buffer
	done chan struct{}
}

// StartProcess starts bin with args, failing the test if it cannot.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return StartCommand(t, exec.Command(bin, args...))
}

// StartCommand starts a command set up by the caller (its environment, its
// directory), as StartProcess does; its output goes to Out.
func StartCommand(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	bin := cmd.Path
	p := &Process{Cmd: cmd, Out: &logging.Buffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", bin, TailLines(p.Out.String(), 40))
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Said reports whether the process's output holds s, waiting up to within
// for it: what the process wrote before an effect a test saw (an entry in
// Redis) can still be on its way through the pipe into Out.
func (p *Process) Said(s string, within time.Duration) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(p.Out.String(), s) {
			return true
		}
		if p.Exited() {
			// Cmd.Wait copied all of the output before done closed.
			return strings.Contains(p.Out.String(), s)
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it); it fails the test after timeout.
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.Cmd.Path, timeout)
	}
	if p.Cmd.ProcessState == nil {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// TailLines returns the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
