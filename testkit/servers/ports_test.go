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
	reserved.Unlock()
	if hi == 0 {
		// This machine's ephemeral range leaves no room below it: the
		// ports come from the kernel, and the rest does not apply.
		return
	}
	// Two ports in the middle of the range, after the first: one whose lock
	// another holder has (a second open file description of the file
	// conflicts as another process's would), and one a program outside the
	// run listens on. Ports that other processes of the run hold are passed
	// over.
	var locked int
	var l net.Listener
	for c := lo + (hi-lo)/2; c < hi-1 && l == nil; c += 2 {
		if c == first || c+1 == first {
			continue
		}
		f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(c)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		if l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(c+1)); err != nil {
			f.Close()
			l = nil
			continue
		}
		defer f.Close()
		defer l.Close()
		locked = c
	}
	if l == nil {
		t.Fatalf("no two free ports from %d to %d", lo+(hi-lo)/2, hi-1)
	}
	reserved.Lock()
	reserved.next = locked
	reserved.Unlock()

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
