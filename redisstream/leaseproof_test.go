package redisstream

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// selfProcess is this test process's identity; the tests need /proc.
func selfProcess(t *testing.T) Process {
	t.Helper()
	p, ok := SelfProcess()
	if !ok {
		t.Fatal("SelfProcess: this process's identity cannot be read from /proc")
	}
	return p
}

// goneProcess is the identity of a process that ran on this machine and
// exited.
func goneProcess(t *testing.T) Process {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	p := selfProcess(t)
	p.PID, p.Start = cmd.Process.Pid, p.Start+1
	return p
}

// aliveProcess is the identity of a running process other than this one:
// the test binary's parent.
func aliveProcess(t *testing.T) Process {
	t.Helper()
	p := selfProcess(t)
	start, state := processStart(os.Getppid())
	if state != processAlive {
		t.Fatalf("the parent process %d: state %d", os.Getppid(), state)
	}
	p.PID, p.Start = os.Getppid(), start
	return p
}

// A restarted relay takes the lease of a holder it proves gone at once:
// same boot and PID namespace, and no process with the holder's PID and
// start time. Anything less certain leaves the lease to expire: a live
// holder, one of another boot or namespace, one that recorded no process.
func TestLease_TakesTheLeaseOfAGoneHolderAtOnce(t *testing.T) {
	r := testsvc.SharedRedis(t)
	self := selfProcess(t)
	for _, tt := range []struct {
		name   string
		holder func() *Process
		taken  bool
	}{
		{"process exited", func() *Process { p := goneProcess(t); return &p }, true},
		{"PID now of a process started later", func() *Process { p := self; p.Start--; return &p }, true},
		{"process alive", func() *Process { p := aliveProcess(t); return &p }, false},
		{"another boot", func() *Process { p := goneProcess(t); p.BootID = "another-boot"; return &p }, false},
		{"another PID namespace", func() *Process { p := goneProcess(t); p.PIDNamespace = "pid:[1]"; return &p }, false},
		{"no process recorded", func() *Process { return nil }, false},
	} {
		for _, cluster := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "", true: ", cluster epochs"}[cluster], func(t *testing.T) {
				_, c := newSink(t, r.NewDB(t), Config{})
				ctx := context.Background()
				// a is the holder as a crashed relay left it: a lease
				// that would live a minute.
				a, err := NewLease(c, LeaseConfig{Key: testLeaseKey, TTL: time.Minute, Holder: "host/1", Process: tt.holder(), Cluster: cluster})
				if err != nil {
					t.Fatal(err)
				}
				if held, _, err := a.TryAcquire(ctx); !held || err != nil {
					t.Fatalf("a.TryAcquire = %v, %v", held, err)
				}
				var logs strings.Builder
				b, err := NewLease(c, LeaseConfig{Key: testLeaseKey, TTL: time.Minute, Holder: "host/2", Cluster: cluster, Log: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				held, holder, err := b.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if held != tt.taken {
					t.Fatalf("b.TryAcquire while %s holds it: held %v, want %v (holder %q)", tt.name, held, tt.taken, holder)
				}
				info, _, _, err := ReadLease(ctx, c, testLeaseKey)
				if err != nil {
					t.Fatal(err)
				}
				if !tt.taken {
					if info.Holder != "host/1" || strings.Contains(logs.String(), "gone") {
						t.Errorf("lease held by %q, log %q; want a's lease left alone", info.Holder, logs.String())
					}
					return
				}
				if info.Holder != "host/2" || info.Process == nil || *info.Process != self || !strings.HasPrefix(holder, "host/2/") {
					t.Errorf("lease after the take: %+v (holder %q); want b's, with this process", info, holder)
				}
				if cluster && info.Epoch != 2 {
					t.Errorf("epoch of the take: %d, want 2 (a's was 1)", info.Epoch)
				}
				if held, err := a.Renew(ctx); held || err != nil {
					t.Errorf("a.Renew after b took its lease = %v, %v; want lost", held, err)
				}
				if !strings.Contains(logs.String(), "took the lease of a relay that is gone") || !strings.Contains(logs.String(), "has exited") {
					t.Errorf("log %q does not say the lease was taken from a gone process", logs.String())
				}
			})
		}
	}
}

// The lease records its holder's process, as JSON an operator reads with
// redis-cli GET.
func TestLease_RecordsItsProcess(t *testing.T) {
	r := testsvc.SharedRedis(t)
	_, c := newSink(t, r.NewDB(t), Config{})
	l := newLease(t, c, "host/1", time.Minute)
	if _, _, err := l.TryAcquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(l.Value()), &raw); err != nil {
		t.Fatal(err)
	}
	p, _ := raw["process"].(map[string]any)
	self := selfProcess(t)
	if p["boot_id"] != self.BootID || p["pid_ns"] != self.PIDNamespace || p["pid"] != float64(os.Getpid()) || p["start"] != float64(self.Start) {
		t.Errorf("process in the lease: %v, want %+v", p, self)
	}
}
