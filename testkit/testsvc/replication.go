package testsvc

import (
	"context"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
)

// replicationTimeout bounds waiting for a replica: on a loaded machine it
// applies a test's few thousand transactions in seconds.
const replicationTimeout = 60 * time.Second

// StartPrimary starts a private server for one test that replicas can follow
// by GTID (StartReplica): server_id 1, servers.ReplicationArgs. opts.Args
// follow those.
func StartPrimary(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	return StartMariaDB(t, MariaDBOptions{Args: append(servers.ReplicationArgs(1), opts.Args...)})
}

// StartReplica starts a private server for one test with serverID (distinct
// from every other server of the topology and from the relays' ids), makes
// it a GTID replica of primary (log_slave_updates, gtid_strict_mode) and
// waits until it has caught up.
func StartReplica(t testing.TB, primary *MariaDB, serverID int, opts MariaDBOptions) *MariaDB {
	t.Helper()
	primary.RequirePrivate(t, "replicate from a private primary")
	m := StartMariaDB(t, MariaDBOptions{Args: append(servers.ReplicationArgs(serverID), opts.Args...)})
	if err := m.srv.ReplicateFrom(context.Background(), primary.srv); err != nil {
		t.Fatal(err)
	}
	m.WaitReplicated(t, primary)
	return m
}

// WaitReplicated waits until the replica m has applied every transaction in
// from's binlog as of now.
func (m *MariaDB) WaitReplicated(t testing.TB, from *MariaDB) {
	t.Helper()
	ctx := context.Background()
	pos, err := from.srv.GTIDBinlogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.srv.WaitReplicated(ctx, pos, replicationTimeout); err != nil {
		t.Fatal(err)
	}
}

// Promote makes the replica m a primary (STOP SLAVE, RESET SLAVE ALL,
// read_only=0), as a failover does once its primary is gone.
func (m *MariaDB) Promote(t testing.TB) {
	t.Helper()
	m.RequirePrivate(t, "promote a private replica")
	if err := m.srv.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// GTIDBinlogPos returns the server's @@gtid_binlog_pos, a GTID position to
// start a relay from.
func (m *MariaDB) GTIDBinlogPos(t testing.TB) string {
	t.Helper()
	m.RequirePrivate(t, "read a private server's GTID position")
	pos, err := m.srv.GTIDBinlogPos(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pos
}
