package redisstream_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

var serverIDs atomic.Uint32

// TestAppendMulti_Conformance runs the binlog reader's conformance suite
// (restarts, stalls, cuts, lost replies, OOM) with every batch appended by
// MULTI/EXEC, on a standalone Redis and Sentinel, each without and with a
// lease (which the transaction WATCHes). The reader's own run of the suite
// (canal) uses the default Config.MultiMin, where its small live batches go
// through the script; a Cluster appends per slot, never by MULTI/EXEC.
func TestAppendMulti_Conformance(t *testing.T) {
	// Every case has its own database, Redis database or stream prefix,
	// and proxies (relaytest.RunSuiteOn).
	t.Parallel()
	for _, tp := range relaytest.Topologies() {
		if tp.Redis == relaytest.Cluster {
			continue
		}
		t.Run(tp.String(), func(t *testing.T) {
			t.Parallel()
			relaytest.RunSuiteOn(t, tp, startMulti, relaytest.Features{ExactlyOnce: true, PerAggregateOrder: true, PromptStopOnDeadMySQLLink: true})
		})
	}
}

// startMulti starts a binlog reader for env whose sink appends every batch
// by MULTI/EXEC.
func startMulti(t *testing.T, env *relaytest.Env) func() error {
	client, err := redisconn.NewClient(env.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	key := "binlog-outbox:position:" + env.Database + "." + env.Table
	var lease *redisstream.Lease
	if env.Topology.Lease {
		if lease, err = redisstream.NewLease(client, redisstream.LeaseConfig{Key: redisstream.KeysFor(env.Database, env.Table, "").Lease}); err != nil {
			t.Fatal(err)
		}
	}
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: key, MultiMin: 1, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	var version string
	if err := env.DB.QueryRow("SELECT @@version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	flavor := position.FlavorMySQL
	if strings.Contains(strings.ToLower(version), "mariadb") {
		flavor = position.FlavorMariaDB
	}
	host, port := env.MySQLHostPort(t)
	cfg := canal.Config{
		Host: host, Port: port, User: env.MariaDB.User(), Password: env.MariaDB.Password(),
		Flavor: flavor, Database: env.Database, Table: env.Table, PositionKey: key,
		Mapping: env.Mapping, Extra: env.Extra,
		ServerID:        3000 + serverIDs.Add(1),
		HeartbeatPeriod: 200 * time.Millisecond,
		MaxBackoff:      100 * time.Millisecond,
	}
	if lease != nil {
		cfg.Lease = lease
	}
	r, err := canal.New(env.RelayDB(t), sink, cfg, relaytest.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// The reader's Stats, not the sink's Position, which only the reader's
	// goroutine calls while it runs.
	relaytest.WaitFor(t, 30*time.Second, "the reader to store its start position", func() bool {
		s := r.Stats()
		return s.Stored.File != "" || !s.Stored.GTIDSet.IsZero()
	})
	return func() error {
		cancel()
		return <-done
	}
}
