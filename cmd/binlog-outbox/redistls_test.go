package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/servers"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// userURL is env's Redis URL with the user name (and password, if any) put in.
func userURL(env *relaytest.Env, userinfo string) string {
	scheme, rest, _ := strings.Cut(env.RedisURL, "://")
	return scheme + "://" + userinfo + "@" + rest
}

// runProcess runs the relay binary to its end and returns what it printed
// and its exit code.
func runProcess(t *testing.T, args ...string) (string, int) {
	t.Helper()
	p := relaytest.StartProcess(t, binary(t), args...)
	code := p.Wait(t, 60*time.Second)
	return p.Out.String(), code
}

// checkAndRunFail runs check and then run with the global flags, and wants
// check to fail with lines (its result lines) and run to stop with one
// error, each saying every text of want and neither showing secret.
func checkAndRunFail(t *testing.T, global, lines, want []string, secret string) {
	t.Helper()
	out, errOut, code := run(t, append(global, "check", "--mode", "binlog")...)
	if code == 0 {
		t.Errorf("check: exit 0, want a failure\n%s%s", out, errOut)
	}
	for _, w := range append(lines, want...) {
		if !strings.Contains(out, w) {
			t.Errorf("check does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(out+errOut, secret) {
		t.Errorf("check shows the password:\n%s%s", out, errOut)
	}

	out, code = runProcess(t, append(global, "run", "--mode", "binlog")...)
	if code == 0 || strings.Count("\n"+out, "\nerror: ") != 1 {
		t.Errorf("run: exit %d, want one error\n%s", code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("run does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("run shows the password:\n%s", out)
	}
}

// TestRedisTLS: against a Redis that speaks TLS only and requires client
// certificates, check, run, status and verify connect with a rediss:// URL
// and the --redis-tls-* flags, as an ACL user whose password comes from a
// file; a wrong CA, an expired certificate, a wrong server name and a
// missing client certificate are each one clear error from check and from
// run, and no output carries the password.
func TestRedisTLS(t *testing.T) {
	// Its Redis servers are its own, its database too.
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	caFile := filepath.Join(dir, "ca.pem")
	serverCert, serverKey := ca.issue(t, "server", time.Now().Add(24*time.Hour), "redis.test")
	clientCert, clientKey := ca.issue(t, "client", time.Now().Add(24*time.Hour))
	serverTLS := servers.RedisTLS{CertFile: serverCert, KeyFile: serverKey, CAFile: caFile, ClientCertFile: clientCert, ClientKeyFile: clientKey}
	rs := testsvc.StartRedis(t, testsvc.RedisOptions{TLS: &serverTLS})
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), rs)

	const pw = "tls-secret-3q"
	rs.SetUser(t, "relay", pw, redisconn.ACLRules)
	pwFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := userURL(env, "relay")
	if !strings.HasPrefix(url, "rediss://") {
		t.Fatalf("the TLS Redis's URL is %s, want rediss://", url)
	}
	tlsArgs := []string{"--redis-tls-ca", caFile, "--redis-tls-cert", clientCert, "--redis-tls-key", clientKey}
	global := func(url string, tlsArgs ...string) []string {
		return append([]string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", url, "--redis-password-file", pwFile}, tlsArgs...)
	}
	noSecret := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, pw) {
			t.Errorf("the Redis password appears in the output:\n%s", out)
		}
	}

	t.Run("check, run, status and verify over TLS", func(t *testing.T) {
		out, errOut, code := run(t, append(global(url, tlsArgs...), "check", "--mode", "binlog")...)
		if code != 0 || !strings.Contains(out, "PASS  redis server") || !strings.Contains(out, "over TLS, certificate verified for 127.0.0.1") {
			t.Fatalf("check: exit %d, want Redis reached over TLS, saying so\n%s%s", code, out, errOut)
		}
		noSecret(t, out+errOut)
		p := relaytest.StartProcess(t, binary(t), append(global(url, tlsArgs...), "--log-format", "json", "--server-id", "4712",
			"run", "--mode", "binlog", "--heartbeat", "500ms")...)
		waitStoredPosition(t, env, posKey(env))
		rec := relaytest.NewProduced()
		ctx := context.Background()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		if p.Exited() {
			t.Fatalf("relay exited:\n%s", p.Out.String())
		}
		for _, cmd := range []string{"status", "verify"} {
			out, errOut, code := run(t, append(global(url, tlsArgs...), cmd)...)
			if code != 0 {
				t.Errorf("%s over TLS: exit %d, want 0\n%s%s", cmd, code, out, errOut)
			}
			noSecret(t, out+errOut)
		}
		noSecret(t, p.Out.String())
	})

	other := newTestCA(t, t.TempDir(), "other")
	expCert, expKey := ca.issue(t, "expired", time.Now().Add(-time.Hour), "redis.test")
	expiredTLS := serverTLS
	expiredTLS.CertFile, expiredTLS.KeyFile = expCert, expKey
	expired := testsvc.StartRedis(t, testsvc.RedisOptions{TLS: &expiredTLS})
	tests := []struct {
		name string
		url  string
		args []string
		// want are texts the one failure must carry: the cause and the flag
		// that fixes it.
		want []string
	}{
		{"a wrong CA", url, []string{"--redis-tls-ca", filepath.Join(other.dir, "other.pem"), "--redis-tls-cert", clientCert, "--redis-tls-key", clientKey},
			[]string{"unknown authority", "--redis-tls-ca"}},
		{"a wrong server name", url, append([]string{"--redis-tls-server-name", "other.test"}, tlsArgs...),
			[]string{"other.test", "--redis-tls-server-name"}},
		{"an expired server certificate", "rediss://relay@" + expired.Addr() + "/0", tlsArgs, []string{"expired", "renew the server's certificate"}},
		{"no client certificate", url, []string{"--redis-tls-ca", caFile}, []string{"certificate", "--redis-tls-cert"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAndRunFail(t, global(tt.url, tt.args...), []string{"FAIL  redis server"}, tt.want, pw)
		})
	}

	t.Run("TLS flags with a redis:// URL", func(t *testing.T) {
		plain := "redis://relay@" + rs.Addr() + "/0"
		_, errOut, code := run(t, append(global(plain, tlsArgs...), "check")...)
		if code != exitUsage || !strings.Contains(errOut, "rediss://") || !strings.Contains(errOut, "--redis-tls-ca") {
			t.Errorf("exit %d, want %d telling to use rediss://\n%s", code, exitUsage, errOut)
		}
	})
	t.Run("the certificate without its key", func(t *testing.T) {
		_, errOut, code := run(t, append(global(url, "--redis-tls-cert", clientCert), "check")...)
		if code != exitUsage || !strings.Contains(errOut, "--redis-tls-key") {
			t.Errorf("exit %d, want %d naming --redis-tls-key\n%s", code, exitUsage, errOut)
		}
	})
}
