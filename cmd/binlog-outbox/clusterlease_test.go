package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// leaderMetric returns the binlog_outbox_leader line of the relay serving
// metrics on port, "" when it cannot be read.
func leaderMetric(port int) string {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "binlog_outbox_leader{") {
			return line
		}
	}
	return ""
}

// TestRun_RedisClusterStandbyTakesOverExactlyOnce is
// TestRun_StandbyTakesOverExactlyOnce on a Redis Cluster, with streams in
// many slots: two relays with the lease under load, the active one paused
// (SIGSTOP until the standby appended), then killed (kill -9, restarted as
// a standby): two rounds, as each costs a lease TTL of suite time. Each time the standby appends within 10s; the
// woken relay, whose every slot the new holder fenced, appends nothing and
// waits; no relay exits; status and the metrics show the leader; every committed event
// is in its stream exactly once.
func TestRun_RedisClusterStandbyTakesOverExactlyOnce(t *testing.T) {
	// Its Redis Cluster is its own, its database too.
	t.Parallel()
	env := relaytest.NewClusterEnv(t, testsvc.SharedMariaDB(t), testsvc.StartRedisCluster(t))
	rec := relaytest.NewProduced()
	args := slices.DeleteFunc(slices.Clone(clusterArgs), func(a string) bool { return a == "--lease=false" })
	ports := map[*relayProc]int{}
	// A server id of its own per relay process: under this load a frozen
	// relay's binlog connection has a full socket buffer, and MariaDB
	// cannot end its dump thread for the new holder's connection with the
	// same id until net_write_timeout: the new holder would read nothing.
	started := 0
	start := func() *relayProc {
		port := closedPort(t)
		started++
		full := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--log-format", "json",
			"--server-id", strconv.Itoa(5000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000) + started), "--redis-cluster", "run"}
		full = append(append(full, args...), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
		p := &relayProc{Process: relaytest.StartProcess(t, binary(t), full...)}
		go p.watchMemory()
		ports[p] = port
		return p
	}
	active := start()
	waitLog(t, active, "reading binlog")
	standby := start()
	waitLog(t, standby, "waiting for the lease held by ")
	if got := leaseHolder(env); got != pid(active) {
		t.Fatalf("lease held by pid %d, want the first relay %d", got, pid(active))
	}
	stop := produceInBackground(t, env, rec, relaytest.ProduceOptions{Producers: 2, Transactions: 100000, Pause: 2 * time.Millisecond})
	defer stop()

	active, standby = takeovers(t, env, active, standby, []string{"SIGSTOP", "SIGKILL"}, start)

	// status shows who reads, from the lease key in its slot.
	out, errOut, code := run(t, "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--redis-cluster", "status", "--json")
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if r.Lease == nil || pidOf(r.Lease.Holder) != pid(active) || r.Lease.TTLSeconds <= 0 {
		t.Errorf("status --json lease = %+v, want the active relay %d with TTL left", r.Lease, pid(active))
	}
	relaytest.WaitFor(t, 15*time.Second, "the metrics to show the roles", func() bool {
		return leaderMetric(ports[active]) == `binlog_outbox_leader{mode="binlog"} 1` &&
			leaderMetric(ports[standby]) == `binlog_outbox_leader{mode="binlog"} 0`
	})
	stop()
	if standby.Exited() {
		t.Fatalf("the standby exited:\n%s", relaytest.TailLines(standby.Out.String(), 20))
	}
	stopRelay(t, standby)
	n := finishCluster(t, env, active, rec)
	t.Logf("2 takeovers, %d committed events, %d entries", len(rec.Committed), n)
}
