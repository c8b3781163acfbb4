package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// testCA signs the certificates of one test.
type testCA struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	dir  string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: dir}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return ca
}

// issue writes name.pem and name-key.pem: a certificate for the DNS names
// and 127.0.0.1, valid until notAfter.
func (ca *testCA) issue(t *testing.T, name string, notAfter time.Time, dns ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter,
		DNSNames: dns, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMySQLTLS: with --mysql-tls-* the SQL pool and the binlog connection
// both speak TLS to a server that requires it of the relay's user, and a
// wrong CA, an expired certificate and a wrong server name are each one
// clear error.
func TestMySQLTLS(t *testing.T) {
	// Its MariaDB servers are its own.
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	caFile := filepath.Join(dir, "ca.pem")
	serverCert, serverKey := ca.issue(t, "server", time.Now().Add(24*time.Hour), "mysql.test")
	clientCert, clientKey := ca.issue(t, "client", time.Now().Add(24*time.Hour))
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--ssl-ca=" + caFile, "--ssl-cert=" + serverCert, "--ssl-key=" + serverKey}})
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t))
	m.Exec(t, "CREATE USER 'tlsrelay'@'%' IDENTIFIED BY 'pw' REQUIRE SSL")
	m.Exec(t, "GRANT ALL ON `"+env.Database+"`.* TO 'tlsrelay'@'%'")
	m.Exec(t, "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'tlsrelay'@'%'")
	dsn := m.UserDSN("tlsrelay", "pw", env.Database)
	tlsArgs := []string{"--mysql-tls-ca", caFile, "--mysql-tls-cert", clientCert, "--mysql-tls-key", clientKey}
	global := []string{"--mysql-dsn", dsn, "--redis-url", env.RedisURL}

	t.Run("without TLS the user is refused", func(t *testing.T) {
		out, _, code := run(t, append(global, "check", "--mode", "binlog")...)
		if code == 0 || !strings.Contains(out, "FAIL  mysql server") {
			t.Errorf("exit %d, want the connection refused without TLS\n%s", code, out)
		}
	})
	t.Run("check and run over TLS", func(t *testing.T) {
		out, errOut, code := run(t, append(append(global, tlsArgs...), "check", "--mode", "binlog")...)
		if code != 0 || !strings.Contains(out, "PASS  mysql server") || !strings.Contains(out, "over TLS, certificate verified for 127.0.0.1") {
			t.Fatalf("check: exit %d, want ready over TLS, saying so\n%s%s", code, out, errOut)
		}
		args := append(append(global, tlsArgs...), "--log-format", "json", "--server-id", "4711", "run", "--mode", "binlog", "--heartbeat", "500ms")
		p := relaytest.StartProcess(t, binary(t), args...)
		waitStoredPosition(t, env, posKey(env))
		rec := relaytest.NewProduced()
		ctx := context.Background()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)
		relaytest.WaitDelivered(t, env, rec, 30*time.Second)
		relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
		if p.Exited() {
			t.Fatalf("relay exited:\n%s", p.Out.String())
		}
	})
	t.Run("a wrong CA", func(t *testing.T) {
		other := newTestCA(t, t.TempDir(), "other")
		otherFile := filepath.Join(other.dir, "other.pem")
		out, _, code := run(t, append(global, "--mysql-tls-ca", otherFile, "--mysql-tls-cert", clientCert, "--mysql-tls-key", clientKey, "check")...)
		if code == 0 || !strings.Contains(out, "--mysql-tls-ca") || !strings.Contains(out, "unknown authority") {
			t.Errorf("exit %d, want one failure naming the unknown authority and --mysql-tls-ca\n%s", code, out)
		}
	})
	t.Run("a wrong server name", func(t *testing.T) {
		out, _, code := run(t, append(append(global, tlsArgs...), "--mysql-tls-server-name", "other.test", "check")...)
		if code == 0 || !strings.Contains(out, "--mysql-tls-server-name") || !strings.Contains(out, "other.test") {
			t.Errorf("exit %d, want one failure about the name other.test\n%s", code, out)
		}
	})
	t.Run("an expired server certificate", func(t *testing.T) {
		expCert, expKey := ca.issue(t, "expired", time.Now().Add(-time.Hour), "mysql.test")
		m2 := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--ssl-ca=" + caFile, "--ssl-cert=" + expCert, "--ssl-key=" + expKey}})
		dsn2 := m2.UserDSN(m2.User(), m2.Password(), "mysql")
		out, _, code := run(t, append([]string{"--mysql-dsn", dsn2, "--redis-url", env.RedisURL}, append(tlsArgs, "check")...)...)
		if code == 0 || !strings.Contains(out, "expired") {
			t.Errorf("exit %d, want one failure saying the certificate expired\n%s", code, out)
		}
	})
}
