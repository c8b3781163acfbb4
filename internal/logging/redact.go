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
	start, end, ok := dsnPasswordSpan(dsn)
	if !ok {
		return dsn
	}
	return dsn[:start] + Redacted + dsn[end:]
}

// DSNPassword returns the part of dsn that RedactDSN hides, "" when none, so
// that it can be scrubbed from error texts that quote it (see Scrub).
func DSNPassword(dsn string) string {
	start, end, ok := dsnPasswordSpan(dsn)
	if !ok {
		return ""
	}
	return dsn[start:end]
}

// dsnPasswordSpan returns where the password of dsn starts and ends; ok is
// false when dsn has no password part. For a DSN the driver parses it is the
// driver's own rule (credentials end at the last '@' before the last '/'); for
// one it cannot parse, the password runs to the last '@' anywhere, because
// the mistake may be an unescaped '/' or '@' in the password itself.
func dsnPasswordSpan(dsn string) (start, end int, ok bool) {
	at := strings.LastIndex(dsn, "@")
	if _, err := mysql.ParseDSN(dsn); err == nil {
		slash := strings.LastIndex(dsn, "/")
		if slash < 0 {
			return 0, 0, false // "" parses as the driver's defaults
		}
		at = strings.LastIndex(dsn[:slash], "@")
		if at < 0 {
			return 0, 0, false // no credentials part
		}
	}
	if at < 0 {
		at = len(dsn)
	}
	colon := strings.Index(dsn[:at], ":")
	if colon < 0 {
		return 0, 0, false // a user name alone
	}
	return colon + 1, at, true
}

// RedactURL returns a redis:// or rediss:// URL with the password replaced by
// xxxxx (user:pass@ becomes user:xxxxx@, :pass@ becomes :xxxxx@).
//
// It works on the text rather than on net/url's parse, because a password with
// an unescaped '/', '#' or '?' makes url.Parse misread the authority and its
// Redacted method then leaves the password in place.
func RedactURL(u string) string {
	start, end, ok := urlPasswordSpan(u)
	if !ok {
		return u
	}
	return u[:start] + Redacted + u[end:]
}

// URLPassword returns the part of a Redis URL that RedactURL hides, "" when
// none, so that it can be scrubbed from error texts that quote the URL.
func URLPassword(u string) string {
	start, end, ok := urlPasswordSpan(u)
	if !ok {
		return ""
	}
	return u[start:end]
}

// urlPasswordSpan returns where the password of a URL starts and ends: after
// the first ':' of the userinfo, up to the last '@'.
func urlPasswordSpan(u string) (start, end int, ok bool) {
	offset := 0
	if i := strings.Index(u, "://"); i >= 0 {
		offset = i + 3
	}
	at := strings.LastIndex(u[offset:], "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.Index(u[offset:offset+at], ":")
	if colon < 0 {
		return 0, 0, false // a user name alone
	}
	return offset + colon + 1, offset + at, true
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

// leakWindow is the length of the password pieces Leaks looks for.
const leakWindow = 4

// Leaks reports whether s contains secret or a piece of it at least four bytes
// long (all of it when shorter). Parse errors quote fragments of their input
// ("invalid port \":p/w\""), which Scrub cannot find; a message that leaks
// must be replaced, not shown.
func Leaks(s, secret string) bool {
	if secret == "" {
		return false
	}
	if len(secret) <= leakWindow {
		return strings.Contains(s, secret)
	}
	for i := 0; i+leakWindow <= len(secret); i++ {
		if strings.Contains(s, secret[i:i+leakWindow]) {
			return true
		}
	}
	return false
}
