package testsvc

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy a test puts between the relay and a server
// (MariaDB, Redis) to inject the network faults the relay must survive: a
// silently dead peer (Stall), a reset (Cut), a reply lost after the server
// applied the request (DropNextReply), a slow link (Throttle), and another
// server behind the same address (Retarget: a VIP, DNS or proxy flip).
//
// Every control is safe to call from any goroutine at any time.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string
	conns  map[*proxyConn]struct{}
	gate   chan struct{} // closed while forwarding; open (blocking) while stalled
	drop   bool          // the next client request's reply is dropped
	closed bool

	down, up atomic.Int64 // bytes/second limits; 0 is unlimited
	dropped  atomic.Int64
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
	dropReply      atomic.Bool // cut at the server's next bytes instead of forwarding them
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
}

// StartProxy listens on a free loopback port and forwards every connection
// to target (host:port). It is closed, with all its connections, when the
// test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, gate: open}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Host is the host part of Addr.
func (p *Proxy) Host() string { return "127.0.0.1" }

// Port is the port part of Addr.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Stall stops forwarding in both directions, on open connections and on
// those accepted later, without closing anything: the peer looks alive to
// the kernel but says nothing, as behind a broken NAT or a pulled cable.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already stalled
	}
}

// Resume forwards again what Stall held back, and everything after it.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Retarget sends the connections accepted from now on to target (host:port)
// and cuts the open ones, as a virtual IP moved to another server, a DNS
// name pointed elsewhere or a database proxy switched over would: clients
// reconnect to the same address and reach another server.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Cut()
}

// Cut closes all current connections (both sides); new ones are accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// DropNextReply arms a lost reply: the next bytes a client sends (on any
// connection) reach the server, and when the server starts to answer, that
// connection is cut instead of the answer being forwarded. The server has
// applied the request; the client gets a connection error. Dropped counts
// the replies dropped so far.
func (p *Proxy) DropNextReply() {
	p.mu.Lock()
	p.drop = true
	p.mu.Unlock()
}

// Dropped returns how many replies DropNextReply has dropped.
func (p *Proxy) Dropped() int { return int(p.dropped.Load()) }

// Throttle limits each connection's server-to-client direction to
// bytesPerSec (0: unlimited), from the next chunk on.
func (p *Proxy) Throttle(bytesPerSec int) { p.down.Store(int64(bytesPerSec)) }

// ThrottleBoth limits both directions of each connection to bytesPerSec
// (0: unlimited).
func (p *Proxy) ThrottleBoth(bytesPerSec int) {
	p.down.Store(int64(bytesPerSec))
	p.up.Store(int64(bytesPerSec))
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		if p.target != target {
			// Retargeted while dialing: the client must reach the new one.
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(c, c.server, c.client, &p.up, true)
		go p.pump(c, c.client, c.server, &p.down, false)
	}
}

// pump forwards src to dst in chunks until either side closes; it then
// closes the connection, so that a reset on one side reaches the other.
func (p *Proxy) pump(c *proxyConn, dst, src net.Conn, limit *atomic.Int64, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		size := len(buf)
		rate := limit.Load()
		if rate > 0 {
			// Chunks of a twentieth of a second keep the pace even.
			size = int(min(int64(size), max(rate/20, 1)))
		}
		n, err := src.Read(buf[:size])
		if n > 0 {
			if !p.forward(c, dst, buf[:n], rate, fromClient) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forward writes one chunk after the stall gate and the throttle let it
// through; false ends the connection.
func (p *Proxy) forward(c *proxyConn, dst net.Conn, b []byte, rate int64, fromClient bool) bool {
	p.mu.Lock()
	gate := p.gate
	if fromClient && p.drop {
		p.drop = false
		c.dropReply.Store(true)
	}
	p.mu.Unlock()
	select {
	case <-gate:
	case <-c.done:
		return false
	}
	if !fromClient && c.dropReply.Load() {
		p.dropped.Add(1)
		return false
	}
	if _, err := dst.Write(b); err != nil {
		return false
	}
	if rate > 0 {
		t := time.NewTimer(time.Duration(len(b)) * time.Second / time.Duration(rate))
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return false
		}
	}
	return true
}
