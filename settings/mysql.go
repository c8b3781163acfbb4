package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

const (
	// DefaultConnectTimeout bounds the MySQL TCP connect when the DSN sets
	// none.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultIOTimeout bounds one read or write on a MySQL connection of
	// the SQL pool when the DSN sets none (readTimeout, writeTimeout).
	DefaultIOTimeout = 60 * time.Second
)

// mysql resolves the MySQL connection, its TLS and the database of the
// outbox table.
func (c *Config) mysql(vs values, env *laravelEnv, files secretReader) error {
	my, err := mysqlConfig(vs, env, files)
	if err != nil {
		return err
	}
	if err := applyMySQLTLS(readTLSFiles(vs, "mysql"), my, files); err != nil {
		return err
	}
	// The relay scans DATETIME columns into time.Time, in UTC.
	my.ParseTime = true
	my.Loc = time.UTC
	// Poll mode reads text as the server converts it for the connection,
	// and binlog mode converts the table's bytes to UTF-8 (internal/charset):
	// a DSN's charset=latin1 would make the modes' bytes differ. A utf8mb4
	// collation the DSN names stays.
	collation := my.Collation
	if !strings.HasPrefix(collation, "utf8mb4_") {
		collation = "utf8mb4_general_ci"
	}
	if err := my.Apply(mysql.Charset("utf8mb4", collation)); err != nil {
		return fmt.Errorf("set the connection's character set: %w", err)
	}
	if my.Timeout == 0 {
		my.Timeout = DefaultConnectTimeout
	}
	// A link that dies without a reset (a broken NAT, a pulled cable) would
	// otherwise hang a statement for ever: database/sql sends ROLLBACK
	// without a context, so not even a stop gets through. The default
	// outlasts innodb_lock_wait_timeout (50s); the DSN's own readTimeout
	// and writeTimeout win.
	if my.ReadTimeout == 0 {
		my.ReadTimeout = DefaultIOTimeout
	}
	if my.WriteTimeout == 0 {
		my.WriteTimeout = DefaultIOTimeout
	}
	c.MySQL = my
	c.Database = my.DBName
	for i := range c.Sources {
		c.Sources[i].Pattern = c.Sources[i].Pattern.WithDatabase(my.DBName)
	}
	if !c.Several && c.Sources[0].Pattern.Database != "" {
		// --table database.table: the table is in that database.
		c.Database = c.Sources[0].Pattern.Database
	}
	return nil
}

// mysqlConfig is the MySQL connection of --mysql-dsn or, when that is not
// given, of the DB_* settings of --laravel-env, with the user of
// --mysql-user and the password of --mysql-password-file.
func mysqlConfig(vs values, env *laravelEnv, files secretReader) (*mysql.Config, error) {
	user, passwordFile, dsn := vs.str(nameMySQLUser), vs.str(nameMySQLPasswordFile), vs.str(nameMySQLDSN)
	var my *mysql.Config
	var err error
	if dsn == "" && env != nil {
		if my, err = env.mysqlConfig(user, passwordFile == ""); err != nil {
			return nil, err
		}
	} else if my, err = parseDSN(dsn, user, passwordFile != ""); err != nil {
		return nil, err
	}
	if passwordFile != "" {
		if my.Passwd, err = files.read(passwordFile, "--"+nameMySQLPasswordFile); err != nil {
			return nil, err
		}
	}
	return my, nil
}

// parseDSN parses --mysql-dsn, with the user of --mysql-user; passwordFile
// says --mysql-password-file gives the password.
func parseDSN(dsn, user string, passwordFile bool) (*mysql.Config, error) {
	if dsn == "" {
		return nil, outbox.WithHint(fmt.Errorf("%w: no MySQL DSN", outbox.ErrConfig),
			"set --mysql-dsn or %s, e.g. user:pass@tcp(127.0.0.1:3306)/app, or read a Laravel application's .env with --laravel-env", Env(nameMySQLDSN))
	}
	my, err := mysql.ParseDSN(dsn)
	if err != nil {
		detail := err.Error()
		if logging.DSNPassword(dsn) != "" {
			// The driver quotes fragments of the DSN, possibly of the password.
			detail = "the driver's message is withheld, as it may quote part of the password"
		}
		return nil, outbox.WithHint(fmt.Errorf("%w: --mysql-dsn %s does not parse: %s", outbox.ErrConfig, logging.RedactDSN(dsn), detail),
			"write it as user:pass@tcp(host:3306)/database")
	}
	if my.DBName == "" {
		return nil, outbox.WithHint(fmt.Errorf("%w: --mysql-dsn %s names no database", outbox.ErrConfig, logging.RedactDSN(dsn)),
			"append the database that holds the outbox table, e.g. user:pass@tcp(127.0.0.1:3306)/app")
	}
	if user != "" {
		if my.User != "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: --mysql-dsn names a user and --mysql-user is set", outbox.ErrConfig),
				"keep the user in one place: drop it from the DSN (tcp(host:3306)/app) when it comes from --mysql-user")
		}
		my.User = user
	}
	if passwordFile && my.Passwd != "" {
		return nil, outbox.WithHint(fmt.Errorf("%w: --mysql-dsn has a password and --mysql-password-file is set", outbox.ErrConfig),
			"keep the password in one place: drop it from the DSN (user@tcp(host:3306)/app) when it comes from the file")
	}
	return my, nil
}
