package canal

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/relaytest"
	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// freezingProxy forwards TCP connections to a server and can stop forwarding
// on the open ones without closing them: a silently dead peer, as a broken
// NAT or a pulled cable leaves it.
type freezingProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed: existing connections stall
	conns  int
}

func newFreezingProxy(t *testing.T, target string) *freezingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln, target: target, frozen: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *freezingProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	p.mu.Lock()
	frozen := p.frozen
	p.conns++
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-frozen:
				// Swallow everything from now on, keep the socket open.
				_, _ = io.Copy(io.Discard, src)
				return
			default:
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	done := make(chan struct{}, 2)
	go func() { pipe(s, c); done <- struct{}{} }()
	go func() { pipe(c, s); done <- struct{}{} }()
	<-done
}

// freeze stalls the open connections; new ones work.
func (p *freezingProxy) freeze() {
	p.mu.Lock()
	close(p.frozen)
	p.frozen = make(chan struct{})
	p.mu.Unlock()
}

func (p *freezingProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

func TestReader_NoticesSilentlyDeadConnection(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	proxy := newFreezingProxy(t, env.MariaDB.Addr())
	r, _ := newReader(t, env, func(c *Config) {
		c.Host, c.Port = "127.0.0.1", proxy.port()
		c.HeartbeatPeriod = 200 * time.Millisecond
		c.ReadTimeout = 600 * time.Millisecond
		c.MaxBackoff = 100 * time.Millisecond
	})
	stop := startReader(r)
	waitStarted(t, r)
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	sessions := r.Stats().Sessions
	proxy.freeze()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if got := r.Stats().Sessions; got <= sessions {
		t.Errorf("sessions %d after the freeze, was %d: the dead connection was not noticed", got, sessions)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestReader_GTIDMode starts from a GTID set, so the stored position
// is a GTID set too, and resumes by it after a restart.
func TestReader_GTIDMode(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	var gtid string
	q := "SELECT @@GLOBAL.gtid_binlog_pos"
	if flavorOf(t, env.DB) == position.FlavorMySQL {
		q = "SELECT @@GLOBAL.gtid_executed"
	}
	if err := env.DB.QueryRow(q).Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	if gtid == "" {
		t.Fatalf("%s is empty: GTID mode needs gtid_mode=ON on MySQL (docker-compose.yml sets it)", q)
	}
	start, err := position.ParseStart(gtid)
	if err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewProduced()
	r, sink := newReader(t, env, func(c *Config) { c.Start = start })
	stop := startReader(r)
	waitStarted(t, r)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	raw, _ := sink.Position(ctx)
	b, err := position.Decode(raw)
	if err != nil || !b.GTIDMode() {
		t.Fatalf("stored position %s (%v): want a GTID set", raw, err)
	}
	// Written while stopped; the next reader resumes by the stored GTID set.
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	r2, _ := newReader(t, env, nil)
	stop = startReader(r2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	raw, _ = sink.Position(ctx)
	t.Logf("final position %s", raw)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}

// TestReader_PositionFollowsOtherTraffic: transactions on other tables move
// the stored position (throttled), so a restart does not re-read them and a
// binlog purge does not overtake an idle outbox.
func TestReader_PositionFollowsOtherTraffic(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	r, sink := newReader(t, env, func(c *Config) { c.IdleCheckpoint = 100 * time.Millisecond })
	stop := startReader(r)
	defer func() { _ = stop() }()
	waitStarted(t, r)
	before, _ := sink.Position(ctx)
	env.MariaDB.Exec(t, "CREATE TABLE `"+env.Database+"`.other (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB")
	relaytest.WaitFor(t, 30*time.Second, "the position to move without outbox rows", func() bool {
		if _, err := env.DB.Exec("INSERT INTO other (v) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		after, _ := sink.Position(ctx)
		a, errA := position.Decode(after)
		b, errB := position.Decode(before)
		return errA == nil && errB == nil && a.Pos > b.Pos
	})
	if n := relaytest.CountEntries(ctx, env.RDB, "outbox:"); n != 0 {
		t.Fatalf("%d entries from another table's rows", n)
	}
}
