package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/relaytest"
	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
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

	t.Run("check, run, status, verify and position", func(t *testing.T) {
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
		stopRelay(t, p)
		noSecret(t, p.Out.String())
		for _, cmd := range [][]string{{"status"}, {"verify"}, {"position", "show"}} {
			out, errOut, code := run(t, append(sentinelArgs(env, env.RedisURL, auth...), cmd...)...)
			if code != 0 {
				t.Errorf("%s through Sentinel: exit %d, want 0\n%s%s", cmd[0], code, out, errOut)
			}
			noSecret(t, out+errOut)
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
			out, errOut, code := run(t, append(sentinelArgs(env, tt.url, tt.args...), "check", "--mode", "binlog")...)
			if code == 0 || !strings.Contains(out, "FAIL  redis sentinel") || !strings.Contains(out, "SKIP  redis server") {
				t.Errorf("check: exit %d, want the sentinel check failed\n%s%s", code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("check does not say %q:\n%s", w, out)
				}
			}
			noSecret(t, out+errOut)

			out, code = runProcess(t, append(sentinelArgs(env, tt.url, tt.args...), "run", "--mode", "binlog")...)
			if code == 0 || strings.Count("\n"+out, "\nerror: ") != 1 {
				t.Errorf("run: exit %d, want one error\n%s", code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("run does not say %q:\n%s", w, out)
				}
			}
			noSecret(t, out)
		})
	}
}
