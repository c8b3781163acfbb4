package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// mysqlTLSName is the name the relay's TLS configuration is registered
// under with the MySQL driver, so that the DSN the SQL pool opens carries it
// (tls=binlog-outbox) as the binlog connection does.
const mysqlTLSName = "binlog-outbox"

// Environment variables of the MySQL TLS flags.
const (
	envMySQLTLSCA         = "BINLOG_OUTBOX_MYSQL_TLS_CA"
	envMySQLTLSCert       = "BINLOG_OUTBOX_MYSQL_TLS_CERT"
	envMySQLTLSKey        = "BINLOG_OUTBOX_MYSQL_TLS_KEY"
	envMySQLTLSServerName = "BINLOG_OUTBOX_MYSQL_TLS_SERVER_NAME"
)

func mysqlTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "mysql-tls-ca",
			Usage:   "CA bundle (PEM file) that signed the MySQL server's certificate, e.g. a managed service's; turns TLS on for the SQL and the binlog connections",
			EnvVars: []string{envMySQLTLSCA},
		},
		&cli.StringFlag{
			Name:    "mysql-tls-cert",
			Usage:   "client certificate (PEM file) for MySQL, with --mysql-tls-key",
			EnvVars: []string{envMySQLTLSCert},
		},
		&cli.StringFlag{
			Name:    "mysql-tls-key",
			Usage:   "private key (PEM file) of --mysql-tls-cert",
			EnvVars: []string{envMySQLTLSKey},
		},
		&cli.StringFlag{
			Name:    "mysql-tls-server-name",
			Usage:   "name the MySQL server's certificate must carry (default: the host of --mysql-dsn)",
			EnvVars: []string{envMySQLTLSServerName},
		},
	}
}

// applyMySQLTLS builds the TLS configuration the TLS flags ask for and sets
// it on my, for the SQL pool (through the registered name in the DSN) and
// the binlog connection (my.TLS). The server's name is always verified.
// Without the flags the DSN's own tls= setting stays as it is.
func applyMySQLTLS(c *cli.Context, my *mysql.Config) error {
	f := readTLSFlags(c, "mysql")
	if !f.set() {
		return nil
	}
	if my.TLSConfig != "" && my.TLSConfig != mysqlTLSName {
		return outbox.WithHint(fmt.Errorf("%w: --mysql-dsn sets tls=%s and the --mysql-tls-* flags are set", outbox.ErrConfig, my.TLSConfig),
			"configure TLS in one place: drop tls= from the DSN when using the --mysql-tls-* flags")
	}
	host, _, err := net.SplitHostPort(my.Addr)
	if err != nil {
		host = my.Addr
	}
	cfg, err := f.config(host)
	if err != nil {
		return err
	}
	if err := mysql.RegisterTLSConfig(mysqlTLSName, cfg); err != nil {
		return fmt.Errorf("register the MySQL TLS configuration: %w", err)
	}
	my.TLSConfig, my.TLS = mysqlTLSName, cfg
	return nil
}

// Environment variables of the Redis TLS flags.
const (
	envRedisTLSCA         = "BINLOG_OUTBOX_REDIS_TLS_CA"
	envRedisTLSCert       = "BINLOG_OUTBOX_REDIS_TLS_CERT"
	envRedisTLSKey        = "BINLOG_OUTBOX_REDIS_TLS_KEY"
	envRedisTLSServerName = "BINLOG_OUTBOX_REDIS_TLS_SERVER_NAME"
)

func redisTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "redis-tls-ca",
			Usage:   "CA bundle (PEM file) that signed the Redis server's certificate, for a rediss:// --redis-url; without it the system's roots are trusted",
			EnvVars: []string{envRedisTLSCA},
		},
		&cli.StringFlag{
			Name:    "redis-tls-cert",
			Usage:   "client certificate (PEM file) for Redis (tls-auth-clients), with --redis-tls-key",
			EnvVars: []string{envRedisTLSCert},
		},
		&cli.StringFlag{
			Name:    "redis-tls-key",
			Usage:   "private key (PEM file) of --redis-tls-cert",
			EnvVars: []string{envRedisTLSKey},
		},
		&cli.StringFlag{
			Name:    "redis-tls-server-name",
			Usage:   "name the Redis server's certificate must carry (default: the host of --redis-url), e.g. when connecting through a tunnel",
			EnvVars: []string{envRedisTLSServerName},
		},
	}
}

// applyRedisTLS sets the TLS configuration the Redis TLS flags ask for on
// t, parsed from a rediss:// URL (which turned TLS on with the system's
// roots and the URL's host as the name to verify) or a rediss+sentinel://
// one (TLS to the sentinels and the master, each certificate verified for
// the address dialled). The flags only refine TLS: with a redis:// URL
// they are an error, since they would be ignored.
func applyRedisTLS(c *cli.Context, t *redisstream.Target) error {
	f := readTLSFlags(c, "redis")
	if !f.set() {
		return nil
	}
	o := t.Options
	if o.TLSConfig == nil {
		if t.Sentinel != nil {
			return outbox.WithHint(fmt.Errorf("%w: %s is set, but --redis-url does not use TLS", outbox.ErrConfig, f.given()),
				"write the URL as rediss+sentinel://host1:26379,host2:26379/<master>/<db> to reach the sentinels and the master over TLS, or drop the --redis-tls-* flags")
		}
		return outbox.WithHint(fmt.Errorf("%w: %s is set, but --redis-url is a redis:// URL, which does not use TLS", outbox.ErrConfig, f.given()),
			"write the URL as rediss://[user@]host:port/db to connect over TLS, or drop the --redis-tls-* flags")
	}
	cfg, err := f.config(o.TLSConfig.ServerName)
	if err != nil {
		return err
	}
	// ?skip_verify=true in the URL stays in force; check says so.
	cfg.InsecureSkipVerify = o.TLSConfig.InsecureSkipVerify
	o.TLSConfig = cfg
	return nil
}

// tlsFiles are the values of one server's TLS flags, --<server>-tls-ca,
// -cert, -key and -server-name.
type tlsFiles struct {
	server              string // "mysql" or "redis"
	ca, cert, key, name string
}

func readTLSFlags(c *cli.Context, server string) tlsFiles {
	p := server + "-tls-"
	return tlsFiles{server: server, ca: globalString(c, p+"ca"), cert: globalString(c, p+"cert"), key: globalString(c, p+"key"),
		name: globalString(c, p+"server-name")}
}

func (f tlsFiles) set() bool { return f.ca != "" || f.cert != "" || f.key != "" || f.name != "" }

func (f tlsFiles) flag(what string) string { return "--" + f.server + "-tls-" + what }

// given names the flags that are set, for an error about them.
func (f tlsFiles) given() string {
	var names []string
	for _, v := range []struct{ what, value string }{{"ca", f.ca}, {"cert", f.cert}, {"key", f.key}, {"server-name", f.name}} {
		if v.value != "" {
			names = append(names, f.flag(v.what))
		}
	}
	return strings.Join(names, ", ")
}

// config builds the TLS configuration of the flags: the server's name
// (--*-tls-server-name, else defaultName) always verified, against the CA
// bundle of --*-tls-ca or the system's roots, with the client certificate
// of --*-tls-cert and --*-tls-key if given. Errors name the flag and the
// file, never a file's content.
func (f tlsFiles) config(defaultName string) (*tls.Config, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, outbox.WithHint(fmt.Errorf("%w: %s and %s go together", outbox.ErrConfig, f.flag("cert"), f.flag("key")),
			"give both the client certificate and its key, or neither")
	}
	name := f.name
	if name == "" {
		name = defaultName
	}
	cfg := &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s: %v", outbox.ErrConfig, f.flag("ca"), err), "point %s at a readable PEM file", f.flag("ca"))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s: %s holds no PEM certificate", outbox.ErrConfig, f.flag("ca"), f.ca),
				"give the CA bundle in PEM form (-----BEGIN CERTIFICATE-----)")
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s/%s: %v", outbox.ErrConfig, f.flag("cert"), f.flag("key"), err),
				"give a PEM certificate and the PEM private key that belongs to it")
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
