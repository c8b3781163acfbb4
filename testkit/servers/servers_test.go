package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLookBinary_NotFound(t *testing.T) {
	_, err := lookBinary("binlog-outbox-no-such-server")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestOnFreePort(t *testing.T) {
	other := errors.New("other")
	tests := []struct {
		name      string
		errs      []error // what each attempt returns
		wantCalls int
		wantErr   error
	}{
		{"first attempt", []error{nil}, 1, nil},
		{"port taken once", []error{errPortInUse, nil}, 2, nil},
		{"port always taken", []error{errPortInUse, errPortInUse, errPortInUse, nil}, startAttempts, errPortInUse},
		{"other error is final", []error{other, nil}, 1, other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			_, err := onFreePort(func(port int) error {
				if port <= 0 {
					t.Errorf("port %d", port)
				}
				calls++
				return tt.errs[calls-1]
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("got %d calls, error %v; want %d calls, error %v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
}

// A server whose port another process holds exits at once; Start must say
// so in a way the retry recognises.
func TestRedis_StartOnTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bin, err := lookBinary("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{bin: bin, dir: t.TempDir(), port: l.Addr().(*net.TCPAddr).Port}
	err = r.Start(context.Background())
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("got %v, want errPortInUse", err)
	}
	if r.Running() {
		t.Errorf("Running after a failed start")
	}
}

// A Redis started under a wrapper is the wrapper's process, which runs
// redis-server with its own command line: a shell that leaves a mark and
// execs it here, valgrind in the bench.
func TestStartRedisUnder(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "wrapped")
	r, err := StartRedisUnder(context.Background(), t.TempDir(), nil, []string{"sh", "-c", `touch "$0" && exec "$@"`, mark})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(10 * time.Second)
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", r.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil || string(comm) != "redis-server\n" {
		t.Errorf("process %d is %q, the wrapper's mark: %v; want redis-server, run by the wrapper", r.Pid(), comm, err)
	}
	t.Setenv(EnvRoot, t.TempDir())
	if _, err := StartRedisUnder(context.Background(), t.TempDir(), nil, []string{"sh"}); err == nil || !strings.Contains(err.Error(), EnvRoot) {
		t.Errorf("under %s: got %v, want an error naming it: the wrapper would run outside the tree", EnvRoot, err)
	}
}

// Two starts that find no template build it at once; both must get the one
// that won, complete, and a copy of it must be a data directory of its own.
func TestTemplateDataDir_ConcurrentBuilds(t *testing.T) {
	bin, err := lookBinary("mariadbd")
	if err != nil {
		t.Fatal(err)
	}
	installDB, err := lookBinary("mariadb-install-db")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	type result struct {
		dir string
		err error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			dir, err := templateDataDir(context.Background(), root, bin, installDB)
			results <- result{dir, err}
		}()
	}
	a, b := <-results, <-results
	if a.err != nil || b.err != nil {
		t.Fatalf("templateDataDir: %v, %v", a.err, b.err)
	}
	if a.dir != b.dir {
		t.Fatalf("templates %q and %q, want one", a.dir, b.dir)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "mysql", "user.frm")); err != nil {
		t.Errorf("template is not an installed data directory: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(root, "*.build-*"))
	if len(left) != 0 {
		t.Errorf("build directories left: %v", left)
	}
	copied := filepath.Join(t.TempDir(), "data")
	if err := copyTree(a.dir, copied); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ibdata1", "ib_logfile0", filepath.Join("mysql", "user.frm")} {
		want, err := os.ReadFile(filepath.Join(a.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(copied, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("copy of %s: %d bytes, error %v; want %d bytes equal", name, len(got), err, len(want))
		}
	}
}

func TestRedisProgram(t *testing.T) {
	tests := []struct {
		env, suffix, want string
		wantErr           bool
	}{
		{"", "-server", "redis-server", false},
		{"redis", "-cli", "redis-cli", false},
		{"valkey", "-server", "valkey-server", false},
		{"valkey", "-cli", "valkey-cli", false},
		{"keydb", "-server", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.env+tt.suffix, func(t *testing.T) {
			t.Setenv(EnvRedis, tt.env)
			got, err := redisProgram(tt.suffix)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// A tree's binary is found inside it and runs chrooted; a directory the
// tree does not share is refused before a server fails on it.
func TestLookBinary_InTree(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr", "bin", "valkey-server"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRoot, root)
	b, err := lookBinary("valkey-server")
	if err != nil || b.root != root || b.path != "/usr/bin/valkey-server" {
		t.Fatalf("got %+v, %v; want /usr/bin/valkey-server in %s", b, err, root)
	}
	cmd := b.command(context.Background(), "--version")
	if cmd.Path != "/usr/bin/valkey-server" || cmd.SysProcAttr == nil || cmd.SysProcAttr.Chroot != root || cmd.Dir != "/" {
		t.Errorf("command %s in %q, chroot %+v; want it chrooted into %s", cmd.Path, cmd.Dir, cmd.SysProcAttr, root)
	}
	if _, err := lookBinary("mariadbd"); !errors.Is(err, ErrNotFound) {
		t.Errorf("mariadbd: got %v, want ErrNotFound", err)
	}
	if err := b.sees(t.TempDir()); err == nil || !strings.Contains(err.Error(), "trixie-tree.sh run") {
		t.Errorf("sees a directory outside the tree: got %v, want the refusal naming trixie-tree.sh run", err)
	}
	if err := (binary{path: "/usr/sbin/mariadbd"}).sees(t.TempDir()); err != nil {
		t.Errorf("a binary of this machine: %v", err)
	}
}
