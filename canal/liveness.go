package canal

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errDeadConnection reports a binlog connection the watchdog closed.
var errDeadConnection = errors.New("binlog connection silent")

// errLinkDead refuses connections of a session whose link the watchdog
// declared dead.
var errLinkDead = errors.New("binlog link declared dead")

// link dials the connections of one session (the dump connection and the one
// go-mysql opens to KILL it on Close) and counts the bytes they receive: any
// byte is progress, even the middle of an event far larger than what the
// link carries within ReadTimeout.
type link struct {
	bytes atomic.Uint64 // received on every connection of the session

	mu    sync.Mutex
	conns []net.Conn
	dead  bool
	// closeTimeout, once set (closing), bounds every connection dialed
	// from then on.
	closeTimeout time.Duration
	// beforeRead, when set, runs before every read of the connections:
	// the event queue hands over the events it holds back. Once the
	// session ends it has nothing to do, and the read of the connection
	// go-mysql's Close dials to KILL the dump thread must go on.
	beforeRead func()
}

// closing bounds the connections dialed from now on to timeout, handshake
// and all. go-mysql's Close dials one to KILL the dump thread, and neither
// its handshake nor the KILL has a deadline: when the session ends for
// another reason (Redis failed) while the MySQL link is silently dead, that
// handshake would wait forever, and the reader, and its shutdown, with it.
func (l *link) closing(timeout time.Duration) {
	l.mu.Lock()
	l.closeTimeout = timeout
	l.mu.Unlock()
}

// dial is the session's replication.BinlogSyncerConfig.Dialer.
func (l *link) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		// go-mysql's Close opens a connection to KILL the dump thread; on a
		// dead link its handshake would wait forever, and the reader with it.
		return nil, errLinkDead
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if l.closeTimeout > 0 {
		if err := c.SetDeadline(time.Now().Add(l.closeTimeout)); err != nil {
			c.Close()
			return nil, err
		}
	}
	l.conns = append(l.conns, c)
	return &countingConn{Conn: c, n: &l.bytes, before: l.beforeRead}, nil
}

// kill closes every connection of the session and refuses new ones. Closing
// is what unblocks a read on a silent peer: go-mysql's own Close only sets a
// read deadline on the dump connection, and none on a handshake in progress.
func (l *link) kill() {
	l.mu.Lock()
	l.dead = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// countingConn counts the bytes read; one atomic add per read of go-mysql's
// 64 KiB buffered reader costs nothing measurable.
type countingConn struct {
	net.Conn
	n      *atomic.Uint64
	before func()
}

func (c *countingConn) Read(b []byte) (int, error) {
	if c.before != nil {
		c.before()
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.n.Add(uint64(n))
	}
	return n, err
}

// SetReadDeadline ignores the error of a connection kill closed. go-mysql's
// Close sets a read deadline to end its reading goroutine and, when that
// fails, closes its packet connection at once, writing the sequence number
// that goroutine is still reading with (a data race -race reports); the
// read has failed already, and Close then waits for the goroutine first.
func (c *countingConn) SetReadDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// watchdog notices a binlog connection that went silent: the server sends a
// heartbeat every HeartbeatPeriod when it has nothing else, so a reader that
// waits a whole ReadTimeout without receiving a single byte is talking to a
// dead peer (a broken NAT, a pulled cable). It counts bytes, not events: a
// row larger than the link carries within ReadTimeout is slow, not dead, and
// closing the connection in the middle of it would repeat it forever.
// Counting instead of arming a deadline per packet keeps the check off the
// hot path.
type watchdog struct {
	bytes   *atomic.Uint64 // received from the server
	seen    atomic.Uint64  // events (or errors) the reader got
	waiting atomic.Bool    // the reader waits for the server
	fired   atomic.Bool
}

// watch calls kill once the reader waited a full period while nothing
// arrived.
func (w *watchdog) watch(ctx context.Context, period time.Duration, kill func()) {
	t := time.NewTicker(period / 2)
	defer t.Stop()
	progress := func() uint64 { return w.seen.Load() + w.bytes.Load() }
	last, since := progress(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := progress()
		if n != last || !w.waiting.Load() {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= period {
			w.fired.Store(true)
			kill()
			return
		}
	}
}
