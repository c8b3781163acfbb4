package logging

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// FuzzRedactDSN checks that whatever the driver reads as the password of a
// DSN, it reads xxxxx from the redacted DSN (or the DSN no longer parses).
func FuzzRedactDSN(f *testing.F) {
	for _, s := range []string{"u:p@tcp(h:3306)/db", "u:p@ss@tcp(h)/db?x=a@b", "u:a/b@tcp(h)", "root:pw", "", "tcp(h)/db", "u@/db", ":p@/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		red := RedactDSN(dsn)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil || cfg.Passwd == "" {
			return
		}
		if got, err := mysql.ParseDSN(red); err == nil && got.Passwd != Redacted {
			t.Errorf("RedactDSN(%q) = %q, which the driver reads with password %q", dsn, red, got.Passwd)
		}
	})
}

// FuzzRedactURL checks the redacted URL exactly, against the rule RedactURL
// documents: the text before the password (scheme, user name and ':') and the
// text after it (from the last '@' on) are kept byte for byte, and the password
// between them, whatever it holds, becomes xxxxx. Looking for the password
// anywhere in the output would be wrong rather than strict: the user name or
// the host may hold the same text (000000:000000@h redacts to 000000:xxxxx@h).
// Independently of that rule, go-redis, which reads the URL, must find no
// password in the redacted URL but xxxxx.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"redis://u:p@h:6379/0", "redis://:p@h", "rediss://u:p/w@h", "u:p@h", "redis://h",
		"000000:000000@", "redis://pw:pw@pw/0", "redis://u:p%40w@h/0?x=a@b", "unix://u:p@/run/redis.sock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		red := RedactURL(u)
		if before, after, ok := aroundURLPassword(u); !ok {
			if red != u {
				t.Errorf("RedactURL(%q) = %q, want it unchanged: it has no password", u, red)
			}
		} else if want := before + Redacted + after; red != want {
			t.Errorf("RedactURL(%q) = %q, want %q", u, red, want)
		}
		opt, err := redis.ParseURL(u)
		if err != nil || opt.Password == "" {
			return
		}
		// A redacted URL that no longer parses shows no password either.
		if got, err := redis.ParseURL(red); err == nil && got.Password != Redacted {
			t.Errorf("RedactURL(%q) = %q, in which go-redis reads the password %q", u, red, got.Password)
		}
	})
}

// aroundURLPassword returns the text of u before and after its password: the
// userinfo starts after the first "://" (or at the start) and ends at the last
// '@'; the password is what follows its first ':'. ok is false without one.
func aroundURLPassword(u string) (before, after string, ok bool) {
	rest := u
	if _, r, found := strings.Cut(u, "://"); found {
		rest = r
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", "", false
	}
	user, _, found := strings.Cut(rest[:at], ":")
	if !found {
		return "", "", false
	}
	head := len(u) - len(rest) + len(user) + 1
	return u[:head], rest[at:], true
}
