package settings

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// MySQLTLSName is the name the relay's TLS configuration is registered
// under with the MySQL driver, so that the DSN the SQL pool opens carries it
// (tls=binlog-outbox) as the binlog connection does.
const MySQLTLSName = "binlog-outbox"

// TLSFiles are the values of one server's TLS flags, --<server>-tls-ca,
// -cert, -key and -server-name.
type TLSFiles struct {
	// Server is "mysql" or "redis".
	Server              string
	CA, Cert, Key, Name string
}

func readTLSFiles(vs values, server string) TLSFiles {
	p := server + "-tls-"
	return TLSFiles{Server: server, CA: vs.str(p + "ca"), Cert: vs.str(p + "cert"), Key: vs.str(p + "key"), Name: vs.str(p + "server-name")}
}

// TLS returns the values of server's TLS flags ("mysql" or "redis").
func (c Config) TLS(server string) TLSFiles { return readTLSFiles(c.Values, server) }

// Set says some of the flags are given.
func (f TLSFiles) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" || f.Name != "" }

func (f TLSFiles) flag(what string) string { return "--" + f.Server + "-tls-" + what }

// Given names the flags that are set, for an error about them.
func (f TLSFiles) Given() string {
	var names []string
	for _, v := range []struct{ what, value string }{{"ca", f.CA}, {"cert", f.Cert}, {"key", f.Key}, {"server-name", f.Name}} {
		if v.value != "" {
			names = append(names, f.flag(v.what))
		}
	}
	return strings.Join(names, ", ")
}

// applyMySQLTLS builds the TLS configuration the TLS flags ask for and sets
// it on my, for the SQL pool (through the registered name in the DSN) and
// the binlog connection (my.TLS). The server's name is always verified.
// Without the flags the DSN's own tls= setting stays as it is.
func applyMySQLTLS(f TLSFiles, my *mysql.Config, files secretReader) error {
	if !f.Set() {
		return nil
	}
	if my.TLSConfig != "" && my.TLSConfig != MySQLTLSName {
		return outbox.WithHint(fmt.Errorf("%w: --mysql-dsn sets tls=%s and the --mysql-tls-* flags are set", outbox.ErrConfig, my.TLSConfig),
			"configure TLS in one place: drop tls= from the DSN when using the --mysql-tls-* flags")
	}
	host, _, err := net.SplitHostPort(my.Addr)
	if err != nil {
		host = my.Addr
	}
	cfg, err := f.config(host, files)
	if err != nil {
		return err
	}
	if err := mysql.RegisterTLSConfig(MySQLTLSName, cfg); err != nil {
		return fmt.Errorf("register the MySQL TLS configuration: %w", err)
	}
	my.TLSConfig, my.TLS = MySQLTLSName, cfg
	return nil
}

// applyRedisTLS sets the TLS configuration the Redis TLS flags ask for on
// t, parsed from a rediss:// URL (which turned TLS on with the system's
// roots and the URL's host as the name to verify) or a rediss+sentinel://
// one (TLS to the sentinels and the master, each certificate verified for
// the address dialled). The flags only refine TLS: with a redis:// URL
// they are an error, since they would be ignored.
func applyRedisTLS(f TLSFiles, t *redisconn.Target, files secretReader) error {
	if !f.Set() {
		return nil
	}
	o := t.Options
	if o.TLSConfig == nil {
		if t.Sentinel != nil {
			return outbox.WithHint(fmt.Errorf("%w: %s is set, but --redis-url does not use TLS", outbox.ErrConfig, f.Given()),
				"write the URL as rediss+sentinel://host1:26379,host2:26379/<master>/<db> to reach the sentinels and the master over TLS, or drop the --redis-tls-* flags")
		}
		return outbox.WithHint(fmt.Errorf("%w: %s is set, but --redis-url is a redis:// URL, which does not use TLS", outbox.ErrConfig, f.Given()),
			"write the URL as rediss://[user@]host:port/db to connect over TLS, or drop the --redis-tls-* flags")
	}
	cfg, err := f.config(o.TLSConfig.ServerName, files)
	if err != nil {
		return err
	}
	// ?skip_verify=true in the URL stays in force; check says so.
	cfg.InsecureSkipVerify = o.TLSConfig.InsecureSkipVerify
	o.TLSConfig = cfg
	return nil
}

// config builds the TLS configuration of the flags: the server's name
// (--*-tls-server-name, else defaultName) always verified, against the CA
// bundle of --*-tls-ca or the system's roots, with the client certificate
// of --*-tls-cert and --*-tls-key if given. Errors name the flag and the
// file, never a file's content.
func (f TLSFiles) config(defaultName string, files secretReader) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, outbox.WithHint(fmt.Errorf("%w: %s and %s go together", outbox.ErrConfig, f.flag("cert"), f.flag("key")),
			"give both the client certificate and its key, or neither")
	}
	name := f.Name
	if name == "" {
		name = defaultName
	}
	cfg := &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s: %v", outbox.ErrConfig, f.flag("ca"), err), "point %s at a readable PEM file", f.flag("ca"))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s: %s holds no PEM certificate", outbox.ErrConfig, f.flag("ca"), f.CA),
				"give the CA bundle in PEM form (-----BEGIN CERTIFICATE-----)")
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s/%s: %v", outbox.ErrConfig, f.flag("cert"), f.flag("key"), err),
				"give a PEM certificate and the PEM private key that belongs to it")
		}
		files.checkMode(f.Key, f.flag("key"))
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
