package canal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestReader_BinlogConnectionOnAnotherServer: the checks before a session
// (identity, binlog files) run on the connection pool, the dump on a
// connection of its own. When they reach different servers (the address
// moved between them, or the pool kept a connection to the old server) a
// file position checked on one would be read on the other, whose binlog
// files have the same names. The dump connection checks the identity
// itself: nothing is read until both reach the same server.
func TestReader_BinlogConnectionOnAnotherServer(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	primary := testsvc.StartPrimary(t, testsvc.MariaDBOptions{})
	replica := testsvc.StartReplica(t, primary, 2, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, primary, testsvc.SharedRedis(t))
	replica.WaitReplicated(t, primary)
	ctx := context.Background()
	// The pool reaches the primary directly; the binlog connection dials
	// the address, behind which is the replica.
	vip := testsvc.StartProxy(t, replica.Addr())
	logs := &relaytest.Logs{}
	r, _ := newReaderLogging(t, env, func(c *Config) {
		c.Host, c.Port = vip.Host(), uint16(vip.Port())
		c.MaxBackoff = 100 * time.Millisecond
	}, logs.Logger())
	stop := startReader(r)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	relaytest.WaitFor(t, 30*time.Second, "a refused binlog connection", func() bool {
		return strings.Contains(logs.String(), "the binlog connection to "+vip.Addr()+" reached server_id 2, the checks before it server_id 1")
	})
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	replica.WaitReplicated(t, primary)
	sessions := r.Stats().Sessions
	relaytest.WaitFor(t, 30*time.Second, "more sessions", func() bool { return r.Stats().Sessions >= sessions+3 })
	if n := r.Stats().Events; n != 0 {
		t.Fatalf("%d events appended from a binlog connection to another server than the checks'", n)
	}

	vip.Retarget(primary.Addr())
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(200 * time.Millisecond)
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
}
