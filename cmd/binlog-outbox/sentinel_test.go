package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// sentinelArgs are the global flags of a command against env, whose
// RedisURL is a redis+sentinel:// URL.
func sentinelArgs(env *relaytest.Env, url string, more ...string) []string {
	return append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", url}, more...)
}

// TestSentinel_Commands: through a redis+sentinel:// URL, check says it is
// Sentinel, names the master and the address the sentinels gave, and every
// command connects: run appends, status, verify and position show read what
// it wrote. An unknown master name and sentinels that do not answer are one
// clear failure each, from check and from run. The sentinels' password
// comes from --redis-sentinel-password-file and appears nowhere.
func TestSentinel_Commands(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	const pw = "q9Zx-77-kW"
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{Password: pw})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	pwFile := filepath.Join(t.TempDir(), "sentinel-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := []string{"--redis-sentinel-password-file", pwFile}
	noSecret := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, pw) {
			t.Errorf("the sentinels' password appears in the output:\n%s", out)
		}
	}

	t.Run("check, run, status, verify, position and repair", func(t *testing.T) {
		out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), "check", "--mode", "binlog")...)
		noSecret(t, out+errOut)
		master := s.MasterAddr(t)
		for _, want := range []string{"PASS  redis sentinel", `master "` + testsvc.SentinelMaster + `" is at ` + master, "(of 3 given)",
			"PASS  redis server", "at " + master + ` (master "` + testsvc.SentinelMaster + `")`, "WARN  redis failover"} {
			if !strings.Contains(out, want) {
				t.Errorf("check does not say %q:\n%s%s", want, out, errOut)
			}
		}
		if code != 0 {
			t.Fatalf("check: exit %d, want 0\n%s%s", code, out, errOut)
		}
		p := startRelay(t, env, append([]string{"--mode", "binlog", "--heartbeat", "500ms"}, auth...)...)
		waitStoredPosition(t, env, posKey(env))
		rec := relaytest.NewProduced()
		relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		if p.Exited() {
			t.Fatalf("relay exited:\n%s", p.Out.String())
		}
		// While the relay runs, so that verify sees its position pass the
		// snapshot although other tests write to the shared database.
		for _, cmd := range [][]string{{"status"}, {"verify"}, {"position", "show"}} {
			out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), cmd...)...)
			if code != 0 {
				t.Errorf("%s through Sentinel: exit %d, want 0\n%s%s", cmd[0], code, out, errOut)
			}
			if strings.Contains(out+errOut, "did not pass the snapshot") {
				t.Errorf("%s through Sentinel did not see the running relay's position:\n%s%s", cmd[0], out, errOut)
			}
			noSecret(t, out+errOut)
		}
		stopRelay(t, p)
		noSecret(t, p.Out.String())

		// Rows committed while the relay is stopped, then skipped by a
		// position set to now (as a purged binlog skips them): repair
		// through Sentinel finds them, --apply appends each once, and run
		// goes on from the position it stored.
		relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 10, RollbackRatio: -1}, rec)
		if out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), "position", "set", "--start-from", "now")...); code != 0 {
			t.Fatalf("position set now: exit %d\n%s%s", code, out, errOut)
		}
		if out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), "repair")...); code != 1 || !strings.Contains(out, "missing:") {
			t.Fatalf("repair (dry run) through Sentinel: exit %d, want 1 and the missing rows\n%s%s", code, out, errOut)
		}
		if out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), "repair", "--apply")...); code != 0 {
			t.Fatalf("repair --apply through Sentinel: exit %d, want 0\n%s%s", code, out, errOut)
		}
		p = startRelay(t, env, append([]string{"--mode", "binlog", "--heartbeat", "500ms"}, auth...)...)
		relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		stopRelay(t, p)
	})

	t.Run("users with the documented rules on the sentinels and the servers", func(t *testing.T) {
		const userPW, relayPW = "w8Tq-51-xR", "h4Kc-08-pZ"
		for _, doc := range []string{"../../docs/redis-tls-acl.md", "../../docs/redis-sentinel.md"} {
			b, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), redisconn.SentinelACLRules) {
				t.Errorf("%s does not show the sentinels' rules the relay is tested with:\n%s", doc, redisconn.SentinelACLRules)
			}
		}
		s.SetSentinelUser(t, "relay-watch", userPW, redisconn.SentinelACLRules)
		s.SetUser(t, "relay", relayPW, redisconn.ACLRules)
		userFile := filepath.Join(t.TempDir(), "sentinel-user-password")
		if err := os.WriteFile(userFile, []byte(userPW), 0o600); err != nil {
			t.Fatal(err)
		}
		user := []string{"--redis-sentinel-user", "relay-watch", "--redis-sentinel-password-file", userFile}
		env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
		env.RedisURL = strings.Replace(env.RedisURL, "://", "://relay:"+relayPW+"@", 1)
		out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, user...), "check", "--mode", "binlog")...)
		if code != 0 || !strings.Contains(out, "PASS  redis sentinel") {
			t.Fatalf("check as the sentinels' and the servers' users: exit %d, want 0\n%s%s", code, out, errOut)
		}
		p := startRelay(t, env, append([]string{"--mode", "binlog", "--log-level", "debug"}, user...)...)
		waitStoredPosition(t, env, posKey(env))
		rec := relaytest.NewProduced()
		relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		stopRelay(t, p)
		// go-redis logs a refused SUBSCRIBE or SENTINEL SENTINELS at debug level.
		if out := p.Out.String(); strings.Contains(out, "NOPERM") || strings.Contains(out, userPW) || strings.Contains(out, relayPW) {
			t.Errorf("the sentinels refused the relay a command, or it printed the password:\n%s", out)
		}
		for i, log := range s.ACLLog(t) {
			t.Errorf("sentinel %d refused: %s", i, log)
		}
	})

	closed := "127.0.0.1:" + strconv.Itoa(closedPort(t))
	tests := []struct {
		name string
		url  string
		args []string
		// want are texts the one failure must carry: the cause and the fix.
		want []string
	}{
		{"an unknown master name", strings.Replace(env.RedisURL, testsvc.SentinelMaster, "no-such-master", 1), auth,
			[]string{`knows no master named "no-such-master"`, `they monitor "` + testsvc.SentinelMaster + `"`}},
		{"no sentinel answers", "redis+sentinel://" + closed + "/" + testsvc.SentinelMaster + "/0", auth,
			[]string{"no sentinel answered", closed, "check the sentinel addresses"}},
		{"no sentinel password", env.RedisURL, nil, []string{"no sentinel answered", "NOAUTH", "--redis-sentinel-password-file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAndRunFail(t, sentinelArgs(env, tt.url, tt.args...), []string{"FAIL  redis sentinel", "SKIP  redis server"}, tt.want, pw)
		})
	}
}

// underLoad runs fault while producers write to env's table and the relay
// appends: once the streams hold entries, it runs fault (a failover), waits
// until the relay has stored a new position on the master the sentinels
// name after it, and stops the producers.
func underLoad(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, fault func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 1 << 30, Pause: 2 * time.Millisecond}, rec)
	}()
	waitAppended(t, env, 200)
	fault()
	before := env.RDB.Get(ctx, posKey(env)).Val()
	relaytest.WaitFor(t, 60*time.Second, "the relay to append on the new master", func() bool {
		now, err := env.RDB.Get(ctx, posKey(env)).Result()
		return err == nil && now != before
	})
	cancel()
	wg.Wait()
}

// finishAfterFailover waits until every committed event is in the streams,
// checks that the relay ran on all along, stops it and checks each event is
// there once, in order.
func finishAfterFailover(t *testing.T, env *relaytest.Env, rec *relaytest.Produced, p *relayProc, from, to string) {
	t.Helper()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	if p.Exited() {
		t.Fatalf("the relay exited at the failover:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	stopRelay(t, p)
	n := relaytest.Check(context.Background(), t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("master %s failed over to %s; %d committed events (%d whose COMMIT was interrupted), %d entries", from, to, len(rec.Committed), len(rec.Unknown), n)
}

// TestRun_SentinelFailoverUnderLoad: SENTINEL FAILOVER while producers
// write and the relay appends in binlog mode: the relay follows the
// sentinels to the promoted replica, re-appends whatever the old master
// acknowledged after the promotion (its position rolled back with it), and
// every committed event is in the streams exactly once.
func TestRun_SentinelFailoverUnderLoad(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	s.WaitReplicated(t)
	var from, to string
	underLoad(t, env, rec, func() { from, to = s.Failover(t) })
	finishAfterFailover(t, env, rec, p, from, to)
}

// TestRun_SentinelMasterKilledUnderLoad: the master's replication is cut,
// so that it acknowledges appends (and positions) the replica never gets,
// then it is killed with SIGKILL under load. The sentinels promote the
// replica, whose stored position is older than the relay's last one and
// whose streams lack the same entries: the relay reads the binlog again
// from that position, and every committed event is in the streams exactly
// once, those the failover lost included.
func TestRun_SentinelMasterKilledUnderLoad(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	target, err := redisconn.ParseTarget(env.RedisURL, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	s.WaitReplicated(t)
	var from, to string
	var acked, replicated int
	underLoad(t, env, rec, func() {
		s.CutReplication(t)
		waitAppended(t, env, relaytest.CountEntries(context.Background(), env.RDB, "outbox:")+50)
		ctx := context.Background()
		acked = relaytest.CountEntries(ctx, s.Node(t, false, target.Options.DB), "outbox:")
		replicated = relaytest.CountEntries(ctx, s.Node(t, true, target.Options.DB), "outbox:")
		from, to = s.KillMaster(t)
	})
	if acked <= replicated {
		t.Fatalf("the master had %d entries and the replica %d when the master was killed; want the replica behind", acked, replicated)
	}
	t.Logf("the failover lost %d acknowledged entries (%d on the master, %d on the replica)", acked-replicated, acked, replicated)
	finishAfterFailover(t, env, rec, p, from, to)
}

// TestRun_SentinelFailoverPollMode: poll mode follows a failover too.
// Between rounds nothing is in flight, so nothing is lost; what a failover
// does to appends in flight is in docs/redis-sentinel.md.
func TestRun_SentinelFailoverPollMode(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "poll", "--poll-interval", "100ms")
	ctx := context.Background()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	s.WaitReplicated(t)
	from, to := s.Failover(t)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	finishAfterFailover(t, env, rec, p, from, to)
}

// TestRun_SentinelMasterKilledPollMode: what docs/redis-sentinel.md says poll mode
// loses to a failover, and how to get it back. The master acknowledges
// appends its replica never gets (replication cut), poll mode marks their
// rows sent, and the master is killed: the promoted replica lacks them,
// which verify reports as missing. Setting sent_at back to NULL for the
// rows marked since shortly before the failover makes poll mode append
// them again, and the dedupe window, whose keys rolled back with the
// streams, skips those the promoted replica has: every event once.
func TestRun_SentinelMasterKilledPollMode(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	rec := relaytest.NewProduced()
	p := startRelay(t, env, "--mode", "poll", "--poll-interval", "100ms", "--dedupe-window", "1h")
	ctx := context.Background()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	s.WaitReplicated(t)

	var before string
	if err := env.DB.QueryRowContext(ctx, "SELECT DATE_FORMAT(NOW(6) - INTERVAL 1 SECOND, '%Y-%m-%d %H:%i:%s.%f')").Scan(&before); err != nil {
		t.Fatal(err)
	}
	s.CutReplication(t)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	from, to := s.KillMaster(t)

	global := sentinelArgs(env, env.RedisURL)
	r, code := verifyJSON(t, global)
	if code == 0 || r.Missing == 0 {
		t.Fatalf("verify after the failover: exit %d, %d missing; want the events the failover lost reported missing", code, r.Missing)
	}
	res, err := env.DB.ExecContext(ctx, "UPDATE `"+env.Table+"` SET sent_at = NULL WHERE sent_at >= ?", before)
	if err != nil {
		t.Fatal(err)
	}
	reset, _ := res.RowsAffected()
	t.Logf("the failover lost %d events; %d rows marked since the second before the cut set unsent again", r.Missing, reset)
	finishAfterFailover(t, env, rec, p, from, to)
	if r, code := verifyJSON(t, global); code != 0 || r.Missing+r.Duplicated != 0 {
		t.Errorf("verify after the rows were appended again: exit %d, %d missing, %d duplicated; want 0", code, r.Missing, r.Duplicated)
	}
}

// TestRun_SentinelFailoverLosesThePosition: the replica never got the
// relay's position (its replication was cut before the relay started), and
// the master is killed under load. The promoted replica has no position at
// all, which the relay cannot tell from an operator's reset: the session
// that starts after the kill stops with the way on instead of starting over
// from --start-from now, which would skip every event since the relay
// started.
func TestRun_SentinelFailoverLosesThePosition(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	s := testsvc.StartSentinels(t, testsvc.SentinelOptions{})
	env := relaytest.NewSentinelEnv(t, testsvc.SharedMariaDB(t), s)
	binary(t) // before the cut: the replica must be promoted within seconds of it
	s.CutReplication(t)
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 1 << 30, Pause: 2 * time.Millisecond}, relaytest.NewProduced())
	}()
	waitAppended(t, env, 50)
	s.KillMaster(t)
	code := p.Wait(t, 60*time.Second)
	cancel()
	<-done
	if code == 0 {
		t.Fatalf("the relay exited with 0 after its position was lost")
	}
	out := p.Out.String()
	for _, want := range []string{"the position was deleted while the relay ran", "Redis lost it", "repair --apply"} {
		if !strings.Contains(out, want) {
			t.Errorf("the relay's output does not say %q:\n%s", want, relaytest.TailLines(out, 10))
		}
	}
}
