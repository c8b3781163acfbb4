package logging

import (
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Redacted replaces a password in redacted DSNs and URLs.
const Redacted = "xxxxx"

// RedactDSN returns a go-sql-driver DSN (user:pass@tcp(host:3306)/db?params)
// with the password replaced by xxxxx, keeping the rest of the text as given.
//
// It finds the credentials the way the driver does, before the last '@' that
// precedes the last '/', so passwords containing ':', '@' or '/' are hidden
// whole. Input the driver cannot parse is redacted more broadly: everything
// after the first ':' up to the last '@', or after the first ':' altogether
// when there is no '@'; a mistyped DSN must not print its password either.
func RedactDSN(dsn string) string {
	slash := strings.LastIndex(dsn, "/")
	at := -1
	if slash >= 0 {
		at = strings.LastIndex(dsn[:slash], "@")
	}
	if at < 0 {
		// No '@' before the database slash: the password itself may contain
		// the slash ("u:pa/ss@tcp(h)"), so take the last '@' anywhere.
		at = strings.LastIndex(dsn, "@")
	}
	if at >= 0 {
		return redactUserinfo(dsn[:at]) + dsn[at:]
	}
	if _, err := mysql.ParseDSN(dsn); err == nil {
		return dsn // no credentials part
	}
	if colon := strings.Index(dsn, ":"); colon >= 0 {
		return dsn[:colon+1] + Redacted
	}
	return dsn
}

// RedactURL returns a redis:// or rediss:// URL with the password replaced by
// xxxxx (user:pass@ becomes user:xxxxx@, :pass@ becomes :xxxxx@).
//
// It works on the text rather than on net/url's parse, because a password with
// an unescaped '/', '#' or '?' makes url.Parse misread the authority and its
// Redacted method then leaves the password in place.
func RedactURL(u string) string {
	prefix, rest := "", u
	if i := strings.Index(u, "://"); i >= 0 {
		prefix, rest = u[:i+3], u[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	return prefix + redactUserinfo(rest[:at]) + rest[at:]
}

// redactUserinfo turns "user:pass" into "user:xxxxx". Userinfo without a
// colon is a user name alone (both the driver and go-redis read it so), kept.
func redactUserinfo(userinfo string) string {
	if colon := strings.Index(userinfo, ":"); colon >= 0 {
		return userinfo[:colon+1] + Redacted
	}
	return userinfo
}

// Scrub replaces every occurrence of each non-empty secret in s with xxxxx.
// Use it on error texts from libraries that may quote a URL or DSN, such as
// net/url's parse errors.
func Scrub(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}
