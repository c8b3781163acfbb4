package servers

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestLookBinary_NotFound(t *testing.T) {
	_, err := LookBinary("binlog-outbox-no-such-server")
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
	bin, err := LookBinary("redis-server")
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

// Two starts that find no template build it at once; both must get the one
// that won, complete, and a copy of it must be a data directory of its own.
func TestTemplateDataDir_ConcurrentBuilds(t *testing.T) {
	bin, err := LookBinary("mariadbd")
	if err != nil {
		t.Fatal(err)
	}
	installDB, err := LookBinary("mariadb-install-db")
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
