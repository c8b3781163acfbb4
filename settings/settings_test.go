package settings

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// TestResolve_Precedence: the command line over the environment over the
// .env over the defaults, for the MySQL connection, the Redis URL and the
// table.
func TestResolve_Precedence(t *testing.T) {
	dotEnv := writeFile(t, ".env", "DB_HOST=dotenv\nDB_DATABASE=app\nDB_USERNAME=u\nREDIS_HOST=dotenv\n", 0o600)
	flags := map[string][]string{"mysql-dsn": {"u@tcp(flag:3306)/app"}, "redis-url": {"redis://flag:6379/0"}, "table": {"flag_t"}}
	env := map[string]string{"BINLOG_OUTBOX_MYSQL_DSN": "u@tcp(env:3306)/app", "BINLOG_OUTBOX_REDIS_URL": "redis://env:6379/0", "BINLOG_OUTBOX_TABLE": "env_t"}
	tests := []struct {
		name                string
		flags               map[string][]string
		env                 map[string]string
		dotEnv              bool
		mysql, redis, table string
		source              Source
	}{
		{"the command line over everything", flags, env, true, "flag:3306", "flag:6379", "flag_t", CommandLine},
		{"the environment over the .env", nil, env, true, "env:3306", "env:6379", "env_t", Environment},
		{"the .env over the defaults", nil, nil, true, "dotenv:3306", "dotenv:6379", DefaultTable, Default},
		{"the defaults", map[string][]string{"mysql-dsn": {"u@tcp(flag:3306)/app"}}, nil, false, "flag:3306", "127.0.0.1:6379", DefaultTable, Default},
		{"an empty variable is unset", map[string][]string{"mysql-dsn": {"u@tcp(flag:3306)/app"}}, map[string]string{"BINLOG_OUTBOX_REDIS_URL": "", "BINLOG_OUTBOX_TABLE": ""},
			false, "flag:3306", "127.0.0.1:6379", DefaultTable, Default},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{CommandLine: map[string][]string{}, LookupEnv: envOf(tt.env), Command: "check", ClusterOK: true}
			for k, v := range tt.flags {
				in.CommandLine[k] = v
			}
			if tt.dotEnv {
				in.CommandLine["laravel-env"] = []string{dotEnv}
			}
			cfg, err := Resolve(in)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MySQL.Addr != tt.mysql || cfg.Redis.Options.Addr != tt.redis || cfg.Table != tt.table {
				t.Errorf("MySQL %s, Redis %s, table %s; want %s, %s, %s", cfg.MySQL.Addr, cfg.Redis.Options.Addr, cfg.Table, tt.mysql, tt.redis, tt.table)
			}
			if got := cfg.Values["table"].Source; got != tt.source {
				t.Errorf("--table from the %s, want the %s", got, tt.source)
			}
		})
	}
}

// TestResolve_UnknownSetting: a name that is no global setting is a
// programming error, not silently ignored.
func TestResolve_UnknownSetting(t *testing.T) {
	if _, err := Resolve(Input{CommandLine: map[string][]string{"mysql-dns": {"x"}}}); err == nil {
		t.Error("an unknown setting was accepted")
	}
}

// TestResolve_SecretFileModes: a password file that others, or a group
// the relay is not in, may access is used, with a warning naming it and
// the chmod that fixes it, as ssh warns of a private key; one only its
// owner or the relay's own group reads is not.
func TestResolve_SecretFileModes(t *testing.T) {
	foreign := foreignGroup(t)
	for _, tt := range []struct {
		mode    os.FileMode
		foreign bool
		warn    bool
	}{{0o600, false, false}, {0o400, false, false}, {0o640, false, false}, {0o440, false, false},
		{0o644, false, true}, {0o604, false, true}, {0o602, false, true}, {0o640, true, true}, {0o620, true, true}} {
		if tt.foreign && foreign < 0 {
			continue
		}
		pw := writeFile(t, "pw", "hunter2pw\n", tt.mode)
		if tt.foreign {
			if err := os.Chown(pw, -1, foreign); err != nil {
				t.Fatal(err)
			}
		}
		var log bytes.Buffer
		cfg, err := Resolve(Input{CommandLine: map[string][]string{"mysql-dsn": {"u@tcp(h:3306)/app"}, "mysql-password-file": {pw}}, LogWriter: &log})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MySQL.Passwd != "hunter2pw" {
			t.Errorf("mode %04o: password %q, want the file's", tt.mode, cfg.MySQL.Passwd)
		}
		warned := strings.Contains(log.String(), "chmod 600 "+pw) && strings.Contains(log.String(), "--mysql-password-file "+pw)
		if warned != tt.warn {
			t.Errorf("mode %04o (a group the relay is not in: %v): warned %v, want %v:\n%s", tt.mode, tt.foreign, warned, tt.warn, log.String())
		}
		if strings.Contains(log.String(), "hunter2pw") {
			t.Errorf("the log shows the password:\n%s", log.String())
		}
	}
}

// TestResolve_CommandLineValuesAsGiven: a list given on the command line
// replaces the default and the environment's whole, not element by element.
func TestResolve_CommandLineValuesAsGiven(t *testing.T) {
	cfg, err := Resolve(Input{
		CommandLine: map[string][]string{"mysql-dsn": {"u@tcp(h:3306)/app"}, "table": {"a", "b"}},
		LookupEnv:   envOf(map[string]string{"BINLOG_OUTBOX_TABLE": "x, y, z"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.TableString(); got != "app.a, app.b" {
		t.Errorf("tables %s, want app.a, app.b", got)
	}
	cfg, err = Resolve(Input{CommandLine: map[string][]string{"mysql-dsn": {"u@tcp(h:3306)/app"}}, LookupEnv: envOf(map[string]string{"BINLOG_OUTBOX_TABLE": "x, y"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.TableString(); got != "app.x, app.y" {
		t.Errorf("tables %s, want app.x, app.y from the comma-separated variable", got)
	}
}

func TestSpreadServerID(t *testing.T) {
	for _, tt := range []struct {
		base, n uint
		host    string
	}{
		{1001, 1000, "binlog-outbox-7d9f6c8b5-abcde"},
		{1001, 1000, "binlog-outbox-7d9f6c8b5-fghij"},
		{5000, 2, "relay-a"},
		{1, 4294967295, "h"},
	} {
		got := SpreadServerID(tt.base, tt.n, tt.host)
		if got < tt.base || got >= tt.base+tt.n {
			t.Errorf("SpreadServerID(%d, %d, %q) = %d, want within [%d, %d)", tt.base, tt.n, tt.host, got, tt.base, tt.base+tt.n)
		}
		if again := SpreadServerID(tt.base, tt.n, tt.host); again != got {
			t.Errorf("SpreadServerID(%d, %d, %q) = %d, then %d: want the same id for the same host", tt.base, tt.n, tt.host, got, again)
		}
	}
	if a, b := SpreadServerID(1001, 1000, "binlog-outbox-7d9f6c8b5-abcde"), SpreadServerID(1001, 1000, "binlog-outbox-7d9f6c8b5-fghij"); a == b {
		t.Errorf("two pods of one Deployment got the same id %d", a)
	}
}

// selfSigned writes a certificate and its key (with the key's mode).
func selfSigned(t *testing.T, keyMode os.FileMode) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
	keyFile = writeFile(t, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})), keyMode)
	return certFile, keyFile
}

// TestResolve_TLSKeyFileModes: a TLS client key others may read is used,
// with the same warning as a password file's; a certificate, which is no
// secret, is not warned of.
func TestResolve_TLSKeyFileModes(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o644, true}} {
		cert, key := selfSigned(t, tt.mode)
		var log bytes.Buffer
		_, err := Resolve(Input{CommandLine: map[string][]string{"mysql-dsn": {"u@tcp(h:3306)/app"}, "mysql-tls-cert": {cert}, "mysql-tls-key": {key},
			"redis-url": {"rediss://r:6380/0"}, "redis-tls-cert": {cert}, "redis-tls-key": {key}}, LogWriter: &log})
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"--mysql-tls-key ", "--redis-tls-key "} {
			if warned := strings.Contains(log.String(), flag+key); warned != tt.warn {
				t.Errorf("key mode %04o: %s warned %v, want %v:\n%s", tt.mode, flag, warned, tt.warn, log.String())
			}
		}
		if strings.Contains(log.String(), cert) {
			t.Errorf("warned of the certificate:\n%s", log.String())
		}
	}
}

// TestResolve_EmptyOrZeroRefused: an empty value of a setting with a
// default, and --server-id-range 0, are refused, not read as the default.
func TestResolve_EmptyOrZeroRefused(t *testing.T) {
	for _, given := range []map[string][]string{
		{"log-format": {""}}, {"log-level": {""}}, {"redis-url": {""}}, {"table": {""}}, {"server-id-range": {"0"}}, {"server-id": {"0"}},
	} {
		given["mysql-dsn"] = []string{"u@tcp(h:3306)/app"}
		_, err := Resolve(Input{CommandLine: given})
		if err == nil {
			t.Errorf("%v: accepted", given)
			continue
		}
		for name := range given {
			if name != "mysql-dsn" && !strings.Contains(err.Error(), "--"+name) {
				t.Errorf("%v: %v, want an error naming --%s", given, err, name)
			}
		}
	}
}

// foreignGroup is a group the test process is not in that it may give a
// file to (root may give any), -1 for none.
func foreignGroup(t *testing.T) int {
	if os.Geteuid() != 0 {
		t.Log("not root: the case of a group the relay is not in is left out")
		return -1
	}
	own, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	for gid := 60000; gid < 60100; gid++ {
		if gid != os.Getegid() && !slices.Contains(own, gid) {
			return gid
		}
	}
	return -1
}

// TestDefaultServerIDFor: without --server-id the id is taken from the host
// name and the position key, the same on every start, in its documented
// range, and different between hosts and between positions, where the one
// fixed default made relays of distinct positions drop each other's binlog
// connections.
func TestDefaultServerIDFor(t *testing.T) {
	seen := map[uint32]string{}
	for _, host := range []string{"web-1", "web-2", "binlog-outbox-7d9f6c8b5-abcde", "binlog-outbox-7d9f6c8b5-fghij"} {
		for _, key := range []string{"binlog-outbox:position:app.outbox", "binlog-outbox:position:billing.outbox", "binlog-outbox:position:tenants"} {
			got := DefaultServerIDFor(host, key)
			if got < DefaultServerIDBase || got >= DefaultServerIDBase+DefaultServerIDSpan {
				t.Errorf("DefaultServerIDFor(%q, %q) = %d, want within [%d, %d)", host, key, got, DefaultServerIDBase, DefaultServerIDBase+DefaultServerIDSpan)
			}
			if again := DefaultServerIDFor(host, key); again != got {
				t.Errorf("DefaultServerIDFor(%q, %q) = %d, then %d: want it stable across restarts", host, key, got, again)
			}
			if other, ok := seen[got]; ok {
				t.Errorf("DefaultServerIDFor(%q, %q) = %d, the id of %s", host, key, got, other)
			}
			seen[got] = host + " " + key
		}
	}
}
