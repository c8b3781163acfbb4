package servers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Servers get their ports from a range below the kernel's ephemeral one,
// and each port stays reserved for the life of the process that took it, by
// a lock on a file that every process of a run sees. A test kills a server
// and starts it again on its port; with ports from the kernel (port 0),
// another test binary's proxy or server could take the port in between,
// and a Redis Cluster node or a sentinel that knew the address then spoke
// to a stranger (a start-up that never became healthy, a relay whose
// events never arrived). Proxies keep listening on port 0: those ports are
// in the ephemeral range, which the servers' never are.
var reserved struct {
	sync.Mutex
	lo, hi int // the range, hi excluded; 0 when ports come from the kernel
	next   int // where the search goes on
	// held are the ports handed out and their locks, held until the
	// process exits.
	held map[int]*os.File
}

// portLockDir holds one lock file per port handed out; the files stay, the
// locks go with the processes that held them.
var portLockDir = filepath.Join(os.TempDir(), "binlog-outbox-test-ports")

// serverPortRange is the range servers' ports come from: from 10000 up to
// the kernel's ephemeral range (32768 by default), or nothing (ports from
// the kernel) where that leaves fewer than 2000 ports.
func serverPortRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	ephemeral, err := strconv.Atoi(f[0])
	if err != nil || ephemeral-10000 < 2000 {
		return 0, 0
	}
	return 10000, ephemeral
}

// FreePort returns a loopback port that is free, that no other process of
// the run holds, and that this process has not handed out before. Another
// program may still bind it before the server does; the starts retry on a
// bind failure.
func FreePort() (int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.held == nil {
		reserved.held = map[int]*os.File{}
		reserved.lo, reserved.hi = serverPortRange()
		if reserved.hi > 0 {
			reserved.next = reserved.lo + rand.IntN(reserved.hi-reserved.lo)
			if err := os.MkdirAll(portLockDir, 0o777); err != nil {
				return 0, fmt.Errorf("find free port: %w", err)
			}
		}
	}
	if reserved.hi == 0 {
		return kernelPort()
	}
	for range reserved.hi - reserved.lo {
		p := reserved.next
		if reserved.next++; reserved.next == reserved.hi {
			reserved.next = reserved.lo
		}
		if reserved.held[p] != nil {
			continue
		}
		ok, err := reservePort(p)
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		if ok {
			return p, nil
		}
	}
	return 0, fmt.Errorf("find free port: every port from %d to %d is in use or held by another process (locks in %s)", reserved.lo, reserved.hi-1, portLockDir)
}

// reservePort takes port p if no other process holds its lock and nothing
// listens on it. The caller holds reserved's lock.
func reservePort(p int) (bool, error) {
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		f.Close() // a program outside the run has it
		return false, nil
	}
	l.Close()
	reserved.held[p] = f
	return true, nil
}

// kernelPort asks the kernel for a free loopback port.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
