package logging

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestRedactDSN(t *testing.T) {
	tests := []struct {
		name, dsn, want, secret string
	}{
		{"plain", "user:secret@tcp(127.0.0.1:3306)/app", "user:xxxxx@tcp(127.0.0.1:3306)/app", "secret"},
		{"params", "user:secret@tcp(db:3306)/app?parseTime=true&loc=UTC", "user:xxxxx@tcp(db:3306)/app?parseTime=true&loc=UTC", "secret"},
		{"no password", "user@tcp(db:3306)/app", "user@tcp(db:3306)/app", ""},
		{"empty password", "user:@tcp(db:3306)/app", "user:xxxxx@tcp(db:3306)/app", ""},
		{"no credentials", "tcp(db:3306)/app", "tcp(db:3306)/app", ""},
		{"unix socket", "u:pw@unix(/run/mysqld/mysqld.sock)/app", "u:xxxxx@unix(/run/mysqld/mysqld.sock)/app", "pw"},
		{"at in password", "u:p@ss@tcp(db)/app", "u:xxxxx@tcp(db)/app", "p@ss"},
		{"colon in password", "u:p:a:ss@tcp(db)/app", "u:xxxxx@tcp(db)/app", "p:a:ss"},
		{"slash in password", "u:pa/ss@tcp(db)/app", "u:xxxxx@tcp(db)/app", "pa/ss"},
		{"slash and at in password", "u:p@a/b@tcp(db)/app", "u:xxxxx@tcp(db)/app", "p@a/b"},
		{"slash in password, no database slash", "u:pa/ss@tcp(db)", "u:xxxxx@tcp(db)", "pa/ss"},
		{"at in param", "u:pw@tcp(db)/app?x=a@b", "u:xxxxx@tcp(db)/app?x=a@b", "pw"},
		{"unparsable without at", "root:hunter2", "root:xxxxx", "hunter2"},
		{"unparsable with at", "root:hunter2@db:3306", "root:xxxxx@db:3306", "hunter2"},
		{"unparsable, slash and at in password", "u:s3cr@t:p/w@tcp(127.0.0.1:3306", "u:xxxxx@tcp(127.0.0.1:3306", "t:p/w"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RedactDSN(tt.dsn)
			if got != tt.want {
				t.Errorf("RedactDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
			}
			if tt.secret != "" && strings.Contains(got, tt.secret) {
				t.Errorf("RedactDSN(%q) = %q still contains the password", tt.dsn, got)
			}
		})
	}
}

// TestRedactDSN_DriverFormatted checks passwords the driver itself formats, so
// the redaction agrees with the driver's parse for every special character.
func TestRedactDSN_DriverFormatted(t *testing.T) {
	for _, pw := range []string{"s3cret", "p@ss", "a:b", "x/y", "q?r=s&t", "(paren)", "back\\slash", "a b", "ümlaut", "@/:?#"} {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "relay", pw, "tcp", "127.0.0.1:3306", "app"
		dsn := cfg.FormatDSN()
		got := RedactDSN(dsn)
		if strings.Contains(got, pw) {
			t.Errorf("RedactDSN(%q) = %q still contains the password %q", dsn, got, pw)
		}
		parsed, err := mysql.ParseDSN(got)
		if err != nil {
			t.Errorf("RedactDSN(%q) = %q, which the driver cannot parse: %v", dsn, got, err)
			continue
		}
		if parsed.User != "relay" || parsed.Passwd != Redacted || parsed.DBName != "app" {
			t.Errorf("RedactDSN(%q) parses as user=%q pass=%q db=%q, want relay %s app", dsn, parsed.User, parsed.Passwd, parsed.DBName, Redacted)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct {
		name, url, want, secret string
	}{
		{"no auth", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", ""},
		{"user and password", "redis://app:secret@redis:6379/0", "redis://app:xxxxx@redis:6379/0", "secret"},
		{"password only", "redis://:secret@redis:6379/0", "redis://:xxxxx@redis:6379/0", "secret"},
		{"tls", "rediss://default:secret@cache.example.com:6380", "rediss://default:xxxxx@cache.example.com:6380", "secret"},
		{"user only", "redis://app@redis:6379", "redis://app@redis:6379", ""},
		{"escaped", "redis://app:p%40ss%2Fw@redis/1", "redis://app:xxxxx@redis/1", "p%40ss"},
		{"unescaped slash", "redis://app:pa/ss@redis:6379/0", "redis://app:xxxxx@redis:6379/0", "pa/ss"},
		{"unescaped hash", "redis://app:pa#ss@redis", "redis://app:xxxxx@redis", "pa#ss"},
		{"at in password", "redis://app:p@ss@redis", "redis://app:xxxxx@redis", "p@ss"},
		{"no scheme", "app:secret@redis:6379", "app:xxxxx@redis:6379", "secret"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RedactURL(tt.url)
			if got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.url, got, tt.want)
			}
			if tt.secret != "" && strings.Contains(got, tt.secret) {
				t.Errorf("RedactURL(%q) = %q still contains the password", tt.url, got)
			}
		})
	}
}

func TestScrub(t *testing.T) {
	got := Scrub(`parse "redis://u:pw@h:x": invalid port`, "pw", "")
	if want := `parse "redis://u:xxxxx@h:x": invalid port`; got != want {
		t.Errorf("Scrub = %q, want %q", got, want)
	}
}

func TestDSNPassword(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"u:p@ss@tcp(db)/app", "p@ss"},
		{"xxxxx:secret@tcp(db)/app", "secret"},
		{"u@tcp(db)/app", ""},
		{"tcp(db)/app", ""},
		{"root:hunter2", "hunter2"},
	}
	for _, tt := range tests {
		if got := DSNPassword(tt.dsn); got != tt.want {
			t.Errorf("DSNPassword(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

func TestURLPassword(t *testing.T) {
	tests := []struct{ url, want string }{
		{"redis://app:p@ss@redis:6379/0", "p@ss"},
		{"redis://xxxxx:secret@redis", "secret"},
		{"redis://:pw@redis", "pw"},
		{"redis://app@redis", ""},
		{"redis://redis:6379", ""},
	}
	for _, tt := range tests {
		if got := URLPassword(tt.url); got != tt.want {
			t.Errorf("URLPassword(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func TestLeaks(t *testing.T) {
	tests := []struct {
		s, secret string
		want      bool
	}{
		{`invalid port ":p/w" after host`, "s3cr@t:p/w", true},
		{`invalid port ":x" after host`, "s3cr@t:p/w", false},
		{"connection refused", "", false},
		{"bad pw here", "pw", true},
		{"bad p here", "pw", false},
	}
	for _, tt := range tests {
		if got := Leaks(tt.s, tt.secret); got != tt.want {
			t.Errorf("Leaks(%q, %q) = %v, want %v", tt.s, tt.secret, got, tt.want)
		}
	}
}
