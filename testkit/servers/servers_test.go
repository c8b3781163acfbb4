package servers

import (
	"context"
	"errors"
	"net"
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
