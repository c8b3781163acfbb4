package mysqlserver

import (
	"errors"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// errLoginRefused is MySQL's "Access denied for user ... (using password:
// ...)": the server refused the login itself, before any privilege.
const errLoginRefused = 1045

// LoginRefusedHint is the fix for a refused login, the likely causes in
// order. The second is a new install's trap: mariadb-install-db (and many
// distribution packages) leave anonymous accounts, and ”@'localhost' is
// more specific than 'relay'@'%', so a connection from the same host logs
// in as the anonymous user and the right password is refused; a hint that
// names a privilege (the user has it) or only the password sends the
// operator the wrong way.
const LoginRefusedHint = "MySQL refused the login; likely causes, in order: " +
	"(1) the password in --mysql-dsn (or --mysql-password-file) is not the account's; " +
	"(2) anonymous accounts, which mariadb-install-db and many distribution installs leave, outrank 'user'@'%' for connections from the server's own host: " +
	"remove them (SELECT user, host FROM mysql.user WHERE user = ''; then DROP USER ''@'localhost', and ''@'<hostname>' if listed), or create the account for that host as well ('user'@'localhost'); " +
	"(3) no account matches the user and the host the error names (SELECT user, host, plugin FROM mysql.user WHERE user = '<user>'); " +
	"(4) the account logs in by another plugin than a password (unix_socket): ALTER USER ... IDENTIFIED BY '<password>'"

// LoginRefused reports whether err is MySQL's refusal of a login (error
// 1045).
func LoginRefused(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errLoginRefused
}

// WithLoginHint returns err with LoginRefusedHint when MySQL refused the
// login, replacing any hint the caller gave for a failure after it (a
// missing privilege); any other err is returned as it is.
func WithLoginHint(err error) error {
	if !LoginRefused(err) {
		return err
	}
	return outbox.WithHint(err, "%s", LoginRefusedHint)
}

// Denied reports whether err is MySQL's refusal of a statement for want of
// a privilege: on a table (1142), a column (1143), a database (1044), or a
// global one such as RELOAD (1227).
func Denied(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1142, 1143, 1044, 1227:
		return true
	}
	return false
}
