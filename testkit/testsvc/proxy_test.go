package testsvc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every chunk it reads with the same bytes and records
// what it received, so a test can tell what reached the server.
type echoServer struct {
	ln  net.Listener
	mu  sync.Mutex
	got bytes.Buffer
}

func startEcho(t *testing.T) *echoServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.got.Write(buf[:n])
						e.mu.Unlock()
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func (e *echoServer) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got.String()
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg and reads the echo back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func TestProxy_Forwards(t *testing.T) {
	p := StartProxy(t, startEcho(t).ln.Addr().String())
	c := dialProxy(t, p)
	if got, err := roundTrip(c, "hello", 2*time.Second); err != nil || got != "hello" {
		t.Fatalf("echo: got %q, %v; want %q", got, err, "hello")
	}
}

func TestProxy_StallAndResume(t *testing.T) {
	p := StartProxy(t, startEcho(t).ln.Addr().String())
	c := dialProxy(t, p)
	if _, err := roundTrip(c, "a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if got, err := roundTrip(c, "b", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled: got %q, %v; want a read timeout", got, err)
	}
	// A connection opened while stalled is accepted but stalled too.
	c2 := dialProxy(t, p)
	if got, err := roundTrip(c2, "c", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection while stalled: got %q, %v; want a read timeout", got, err)
	}
	p.Resume()
	// What Stall held back arrives now, in order, on the same connections.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "b" {
		t.Fatalf("after resume: got %q, %v; want %q", buf, err, "b")
	}
	if got, err := roundTrip(c, "d", 2*time.Second); err != nil || got != "d" {
		t.Fatalf("after resume: got %q, %v; want %q", got, err, "d")
	}
	_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c2, buf); err != nil || string(buf) != "c" {
		t.Fatalf("second connection after resume: got %q, %v; want %q", buf, err, "c")
	}
}

func TestProxy_Cut(t *testing.T) {
	p := StartProxy(t, startEcho(t).ln.Addr().String())
	c := dialProxy(t, p)
	if _, err := roundTrip(c, "a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after cut: read %d bytes, %v; want the connection closed", n, err)
	}
	if got, err := roundTrip(dialProxy(t, p), "b", 2*time.Second); err != nil || got != "b" {
		t.Fatalf("new connection after cut: got %q, %v", got, err)
	}
}

func TestProxy_DropNextReply(t *testing.T) {
	e := startEcho(t)
	p := StartProxy(t, e.ln.Addr().String())
	c := dialProxy(t, p)
	if _, err := roundTrip(c, "a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.DropNextReply()
	got, err := roundTrip(c, "request", 2*time.Second)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || got != "" {
		t.Fatalf("dropped reply: got %q, %v; want no bytes and the connection closed", got, err)
	}
	waitUntil(t, func() bool { return e.received() == "arequest" }, "the server to get the request")
	if n := p.Dropped(); n != 1 {
		t.Errorf("Dropped() = %d, want 1", n)
	}
	// Armed once: the next connection works.
	if got, err := roundTrip(dialProxy(t, p), "b", 2*time.Second); err != nil || got != "b" {
		t.Fatalf("after the drop: got %q, %v", got, err)
	}
}

func TestProxy_Throttle(t *testing.T) {
	p := StartProxy(t, startEcho(t).ln.Addr().String())
	const size, rate = 64 << 10, 256 << 10 // a quarter of a second
	msg := string(bytes.Repeat([]byte("x"), size))
	p.Throttle(rate)
	begin := time.Now()
	if got, err := roundTrip(dialProxy(t, p), msg, 5*time.Second); err != nil || len(got) != size {
		t.Fatalf("throttled: got %d bytes, %v", len(got), err)
	}
	if d, want := time.Since(begin), 200*time.Millisecond; d < want {
		t.Errorf("%d bytes at %d B/s took %s, want at least %s", size, rate, d, want)
	}
	// Unthrottled, 2 MiB would take 8 s at the old rate: a bound far from
	// both, which a loaded machine's scheduling does not reach (150 ms for
	// 64 KiB did).
	p.Throttle(0)
	big := strings.Repeat("y", 2<<20)
	begin = time.Now()
	if got, err := roundTrip(dialProxy(t, p), big, 10*time.Second); err != nil || len(got) != len(big) {
		t.Fatalf("unthrottled: got %d bytes, %v", len(got), err)
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Errorf("unthrottled: %d bytes took %s, as if still throttled", len(big), d)
	}
	// Both directions: the request itself takes a quarter of a second to
	// reach the server.
	e := startEcho(t)
	p2 := StartProxy(t, e.ln.Addr().String())
	p2.ThrottleBoth(rate)
	begin = time.Now()
	if _, err := dialProxy(t, p2).Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(e.received()) == size }, "the server to get the request")
	if d, want := time.Since(begin), 200*time.Millisecond; d < want {
		t.Errorf("throttled request: %d bytes at %d B/s took %s, want at least %s", size, rate, d, want)
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProxy_Retarget(t *testing.T) {
	first, second := startEcho(t), startEcho(t)
	p := StartProxy(t, first.ln.Addr().String())
	c := dialProxy(t, p)
	if _, err := roundTrip(c, "a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Retarget(second.ln.Addr().String())
	// The open connection is cut, as a moved address cuts it.
	if _, err := roundTrip(c, "b", 2*time.Second); err == nil {
		t.Fatal("the connection opened before Retarget still works; want it cut")
	}
	c2 := dialProxy(t, p)
	if got, err := roundTrip(c2, "c", 2*time.Second); err != nil || got != "c" {
		t.Fatalf("after retarget: got %q, %v; want %q", got, err, "c")
	}
	if got := first.received(); got != "a" {
		t.Errorf("first server received %q, want %q", got, "a")
	}
	if got := second.received(); got != "c" {
		t.Errorf("second server received %q, want %q", got, "c")
	}
}
