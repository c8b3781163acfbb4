package logging

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
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

// FuzzRedactURL checks that the redacted URL never holds the userinfo's
// password when there is one.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"redis://u:p@h:6379/0", "redis://:p@h", "rediss://u:p/w@h", "u:p@h", "redis://h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		pw := URLPassword(u)
		red := RedactURL(u)
		if pw != "" && len(pw) > len(Redacted) && strings.Contains(red, pw) {
			t.Errorf("RedactURL(%q) = %q still holds %q", u, red, pw)
		}
	})
}
