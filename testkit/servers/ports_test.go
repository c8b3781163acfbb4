package servers

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// FreePort skips a port another process holds the lock of, a port something
// listens on, and the ports it handed out already, and stays below the
// kernel's ephemeral range, where proxies' ports (port 0) are.
func TestFreePort_ReservesPorts(t *testing.T) {
	first, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	reserved.Lock()
	lo, hi := reserved.lo, reserved.hi
	if hi == 0 {
		reserved.Unlock()
		t.Skip("this machine's ephemeral port range leaves no range for the servers; FreePort asks the kernel")
	}
	// Two ports in the middle of the range: the search goes on from the first.
	locked := lo + (hi-lo)/2
	if locked == first || locked+1 == first {
		locked += 2
	}
	reserved.next = locked
	reserved.Unlock()

	// Another process's lock: a second open file description of the same
	// file conflicts as one of another process would.
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(locked)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Skipf("port %d is held by another process of this run: %v", locked, err)
	}
	// A program outside the run that listens.
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(locked+1))
	if err != nil {
		t.Skipf("port %d is in use: %v", locked+1, err)
	}
	defer l.Close()

	seen := map[int]bool{first: true}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case p == locked:
			t.Fatalf("FreePort returned %d, whose lock another holder has", p)
		case p == locked+1:
			t.Fatalf("FreePort returned %d, which another program listens on", p)
		case seen[p]:
			t.Fatalf("FreePort returned %d twice", p)
		case p < lo || p >= hi:
			t.Fatalf("FreePort returned %d, outside %d-%d", p, lo, hi-1)
		}
		seen[p] = true
	}
}
