package settings

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/dotenv"
)

// Defaults of a Laravel application's config/database.php for the keys its
// .env may leave out.
const (
	laravelDBHost    = "127.0.0.1"
	laravelDBPort    = 3306
	laravelRedisHost = "127.0.0.1"
	laravelRedisPort = 6379
)

// laravelEnv is a Laravel application's .env, read as the application reads
// it, so that a Laravel shop points the relay at the file instead of
// writing the servers' addresses and credentials a second time.
type laravelEnv struct {
	path string
	vars map[string]string
}

// readLaravelEnv reads the file --laravel-env names; nil without the flag.
// ${VAR} of a name the file does not set comes from lookupEnv.
func readLaravelEnv(path string, lookupEnv func(string) (string, bool)) (*laravelEnv, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("%w: --laravel-env: %v", outbox.ErrConfig, err),
			"point --laravel-env at the Laravel application's .env file, e.g. /var/www/app/.env")
	}
	// ${VAR} of a name the file does not set comes from the environment,
	// as in phpdotenv.
	vars, err := dotenv.Parse(string(b), lookupEnv)
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("%w: --laravel-env %s: %w", outbox.ErrConfig, path, err),
			"Laravel cannot read this line either: quote a value with spaces or #, and close every quote")
	}
	return &laravelEnv{path: path, vars: vars}, nil
}

// get returns a value as Laravel's env() does: null and (null) are no
// value, empty and (empty) are "", and one pair of quotes left around a
// value goes. An empty value counts as absent, as config/database.php then
// falls back to its default.
func (e *laravelEnv) get(key string) (string, bool) {
	v, ok := e.vars[key]
	if !ok {
		return "", false
	}
	switch strings.ToLower(v) {
	case "null", "(null)", "empty", "(empty)":
		return "", false
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return v, v != ""
}

// configError is an error in the file, with the fix.
func (e *laravelEnv) configError(hint, format string, args ...any) error {
	return outbox.WithHint(fmt.Errorf("%w: --laravel-env %s: %s", outbox.ErrConfig, e.path, fmt.Sprintf(format, args...)), "%s", hint)
}

// port reads a TCP port, def when absent. The value is no secret: errors
// quote it.
func (e *laravelEnv) port(key string, def int) (string, error) {
	v, ok := e.get(key)
	if !ok {
		return strconv.Itoa(def), nil
	}
	if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 65535 {
		return "", e.configError(fmt.Sprintf("set %s to a number from 1 to 65535 (%d by default)", key, def), "%s %q is not a port", key, v)
	}
	return v, nil
}

// mysqlConfig is the MySQL connection of DB_*. A user given apart from the
// file (--mysql-user) replaces DB_USERNAME, and then DB_PASSWORD, which is
// that other user's, is not sent; withPassword false leaves it out too (it
// comes from --mysql-password-file).
func (e *laravelEnv) mysqlConfig(user string, withPassword bool) (*mysql.Config, error) {
	if conn, ok := e.get("DB_CONNECTION"); ok && conn != "mysql" && conn != "mariadb" {
		return nil, e.configError("the relay reads MySQL and MariaDB only; give --mysql-dsn of the MySQL server that holds the outbox table",
			"DB_CONNECTION is %q", conn)
	}
	for _, key := range []string{"DB_URL", "DATABASE_URL"} {
		if _, ok := e.get(key); ok {
			return nil, e.configError("the relay does not read database URLs: give --mysql-dsn, or set DB_HOST, DB_PORT, DB_DATABASE and DB_USERNAME in the file",
				"%s is set, which would override the DB_* settings for Laravel", key)
		}
	}
	my := mysql.NewConfig()
	var ok bool
	if my.DBName, ok = e.get("DB_DATABASE"); !ok {
		return nil, e.configError("add DB_DATABASE=<the database that holds the outbox table>, or give --mysql-dsn", "DB_DATABASE is not set")
	}
	if user != "" {
		my.User = user
	} else if my.User, ok = e.get("DB_USERNAME"); !ok {
		return nil, e.configError("add DB_USERNAME, or give the relay's own user with --mysql-user", "DB_USERNAME is not set")
	} else if withPassword {
		my.Passwd, _ = e.get("DB_PASSWORD")
	}
	if socket, ok := e.get("DB_SOCKET"); ok {
		// Laravel connects through the socket then and ignores the host.
		my.Net, my.Addr = "unix", socket
		return my, nil
	}
	host, ok := e.get("DB_HOST")
	if !ok {
		host = laravelDBHost
	}
	port, err := e.port("DB_PORT", laravelDBPort)
	if err != nil {
		return nil, err
	}
	my.Net, my.Addr = "tcp", net.JoinHostPort(host, port)
	return my, nil
}

// redisURL is the Redis URL of REDIS_*: rediss:// for REDIS_SCHEME=tls or a
// REDIS_HOST of tls://host, as phpredis takes it. withPassword false leaves
// REDIS_PASSWORD out (it comes from --redis-password-file).
func (e *laravelEnv) redisURL(withPassword bool) (string, error) {
	if _, ok := e.get("REDIS_URL"); ok {
		return "", e.configError("the relay does not read REDIS_URL from the file: give it as --redis-url",
			"REDIS_URL is set, which would override the REDIS_* settings for Laravel")
	}
	scheme := "redis"
	switch s, _ := e.get("REDIS_SCHEME"); strings.ToLower(s) {
	case "", "tcp":
	case "tls":
		scheme = "rediss"
	default:
		return "", e.configError("set REDIS_SCHEME to tcp or tls, or give --redis-url", "REDIS_SCHEME %q is neither tcp nor tls", s)
	}
	host, ok := e.get("REDIS_HOST")
	if !ok {
		host = laravelRedisHost
	}
	if rest, ok := strings.CutPrefix(host, "tls://"); ok {
		scheme, host = "rediss", rest
	} else if rest, ok := strings.CutPrefix(host, "tcp://"); ok {
		host = rest
	}
	port, err := e.port("REDIS_PORT", laravelRedisPort)
	if err != nil {
		return "", err
	}
	db := "0"
	if v, ok := e.get("REDIS_DB"); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return "", e.configError("set REDIS_DB to the number of the Redis database (0 by default)", "REDIS_DB %q is not a database number", v)
		}
		db = v
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: "/" + db}
	user, _ := e.get("REDIS_USERNAME")
	pw, hasPW := e.get("REDIS_PASSWORD")
	switch {
	case withPassword && hasPW:
		u.User = url.UserPassword(user, pw)
	case user != "":
		u.User = url.User(user)
	}
	return u.String(), nil
}

// redisPrefix is the key prefix of the application's Redis connections as
// Laravel's config/database.php sets it: REDIS_PREFIX when the file sets it
// (empty too: no prefix), else Str::slug(APP_NAME, '_') followed by
// "_database_", APP_NAME being "laravel" when unset.
func (e *laravelEnv) redisPrefix() (string, error) {
	if v, ok := e.vars["REDIS_PREFIX"]; ok {
		p, _ := e.get("REDIS_PREFIX")
		if v == "" {
			p = ""
		}
		return p, nil
	}
	name, ok := e.get("APP_NAME")
	if !ok {
		name = "laravel"
	}
	slug, ok := laravelSlug(name)
	if !ok {
		return "", e.configError("set REDIS_PREFIX in the file, or give --laravel-redis-prefix with the prefix config('database.redis.options.prefix') shows",
			"APP_NAME %q has characters other than ASCII, which Laravel transliterates to make the Redis prefix", name)
	}
	return slug + "_database_", nil
}

// laravelSlug is Laravel's Str::slug(s, '_') for an ASCII s (false for
// another: Laravel transliterates it first): hyphens become underscores,
// @ becomes _at_, what is neither a letter, a digit, an underscore nor a
// space goes, runs of underscores and spaces become one underscore, and
// none is left at either end; letters are lowered.
func laravelSlug(s string) (string, bool) {
	var b strings.Builder
	sep := false
	for _, r := range s {
		if r > unicode.MaxASCII {
			return "", false
		}
		switch {
		case r == '-' || r == '_' || unicode.IsSpace(r):
			sep = true
		case r == '@':
			if b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteString("at")
			sep = true
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if sep && b.Len() > 0 {
				b.WriteByte('_')
			}
			sep = false
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String(), true
}
