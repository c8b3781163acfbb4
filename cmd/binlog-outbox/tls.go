package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
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
	ca, cert, key := globalString(c, "mysql-tls-ca"), globalString(c, "mysql-tls-cert"), globalString(c, "mysql-tls-key")
	name := globalString(c, "mysql-tls-server-name")
	if ca == "" && cert == "" && key == "" && name == "" {
		return nil
	}
	if my.TLSConfig != "" && my.TLSConfig != mysqlTLSName {
		return outbox.WithHint(fmt.Errorf("%w: --mysql-dsn sets tls=%s and the --mysql-tls-* flags are set", outbox.ErrConfig, my.TLSConfig),
			"configure TLS in one place: drop tls= from the DSN when using the --mysql-tls-* flags")
	}
	if (cert == "") != (key == "") {
		return outbox.WithHint(fmt.Errorf("%w: --mysql-tls-cert and --mysql-tls-key go together", outbox.ErrConfig),
			"give both the client certificate and its key, or neither")
	}
	if name == "" {
		host, _, err := net.SplitHostPort(my.Addr)
		if err != nil {
			host = my.Addr
		}
		name = host
	}
	cfg := &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return outbox.WithHint(fmt.Errorf("%w: --mysql-tls-ca: %v", outbox.ErrConfig, err), "point --mysql-tls-ca at a readable PEM file")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return outbox.WithHint(fmt.Errorf("%w: --mysql-tls-ca: %s holds no PEM certificate", outbox.ErrConfig, ca),
				"give the CA bundle in PEM form (-----BEGIN CERTIFICATE-----)")
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return outbox.WithHint(fmt.Errorf("%w: --mysql-tls-cert/--mysql-tls-key: %v", outbox.ErrConfig, err),
				"give a PEM certificate and the PEM private key that belongs to it")
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if err := mysql.RegisterTLSConfig(mysqlTLSName, cfg); err != nil {
		return fmt.Errorf("register the MySQL TLS configuration: %w", err)
	}
	my.TLSConfig, my.TLS = mysqlTLSName, cfg
	return nil
}
