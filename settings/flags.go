package settings

import (
	"fmt"
	"strconv"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Kind is the type of a setting's value.
type Kind int

// The kinds of settings.
const (
	// String is one text value.
	String Kind = iota
	// List is a repeatable value; its environment variable is
	// comma-separated.
	List
	// Uint is a non-negative integer.
	Uint
	// Bool is a switch: true or false.
	Bool
)

// Flag describes one global setting: its command-line flag, its
// environment variable and its default.
type Flag struct {
	// Name is the flag's name without dashes, e.g. "mysql-dsn".
	Name string
	// Env is its environment variable. Users' deployments depend on these
	// names: never rename one.
	Env string
	// Kind is the type of its value.
	Kind Kind
	// Default is the value when neither the command line, the environment
	// nor the .env gives one; nil for none.
	Default []string
	// Secret says --help must not show its value (a DSN holds a password).
	Secret bool
	// Usage is the help text; a `quoted` word is the value's placeholder.
	Usage string
	// Shown, when set, is what --help shows as the default instead of
	// Default (a default picked at run time).
	Shown string
}

// DefaultText is the default as --help shows it, "" for none.
func (f Flag) DefaultText() string {
	switch {
	case f.Shown != "":
		return f.Shown
	case len(f.Default) == 0:
		return ""
	case f.Kind == String || f.Kind == List:
		s := ""
		for i, v := range f.Default {
			if i > 0 {
				s += ", "
			}
			s += strconv.Quote(v)
		}
		return s
	}
	return f.Default[0]
}

// Defaults of the global settings.
const (
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
	DefaultTable    = "outbox"
	// DefaultServerID is the base of --server-id-range when --server-id is
	// not given; without either, DefaultServerIDFor picks the id.
	DefaultServerID = 1001
	// DefaultServerIDBase and DefaultServerIDSpan bound the ids
	// DefaultServerIDFor picks, above the small ids servers are given.
	DefaultServerIDBase = 1_000_000_000
	DefaultServerIDSpan = 1_000_000_000
)

// Names of the settings this package reads itself.
const (
	nameMySQLDSN          = "mysql-dsn"
	nameRedisURL          = "redis-url"
	nameMySQLUser         = "mysql-user"
	nameMySQLPasswordFile = "mysql-password-file"
	nameRedisPasswordFile = "redis-password-file"
	nameSentinelMaster    = "redis-sentinel-master"
	nameSentinelUser      = "redis-sentinel-user"
	nameSentinelPWFile    = "redis-sentinel-password-file"
	nameTable             = "table"
	nameColumn            = "column"
	nameExtraColumn       = "extra-column"
	nameLogFormat         = "log-format"
	nameLogLevel          = "log-level"
	nameServerID          = "server-id"
	nameServerIDRange     = "server-id-range"
	nameLaravelEnv        = "laravel-env"
	nameLaravelPrefix     = "laravel-redis-prefix"
	nameRedisCluster      = "redis-cluster"
)

// Flags lists the global settings in the order --help shows them. Every
// command takes them, before or after its name.
func Flags() []Flag {
	return append(append(coreFlags(), sourceFlag(), laravelFlag(), laravelPrefixFlag(), clusterFlag()), append(tlsFlags("mysql"), tlsFlags("redis")...)...)
}

// Env returns the environment variable of the setting name, "" for an
// unknown name.
func Env(name string) string {
	if f, ok := lookup(name); ok {
		return f.Env
	}
	return ""
}

func lookup(name string) (Flag, bool) {
	for _, f := range Flags() {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}

func coreFlags() []Flag {
	return []Flag{
		{Name: nameMySQLDSN, Env: "BINLOG_OUTBOX_MYSQL_DSN", Secret: true,
			Usage: "go-sql-driver DSN of the relay user, e.g. `user:pass@tcp(127.0.0.1:3306)/app`; its database holds the outbox table"},
		{Name: nameRedisURL, Env: "BINLOG_OUTBOX_REDIS_URL", Secret: true, Default: []string{DefaultRedisURL},
			Usage: "Redis to append to: redis://[user:pass@]host:port/db, rediss:// for TLS, or redis+sentinel://[user:pass@]host1:26379,host2:26379/<master>/db"},
		{Name: nameMySQLUser, Env: "BINLOG_OUTBOX_MYSQL_USER",
			Usage: "MySQL user of the relay, for a DSN without one or instead of --laravel-env's DB_USERNAME (and DB_PASSWORD)"},
		{Name: nameMySQLPasswordFile, Env: "BINLOG_OUTBOX_MYSQL_PASSWORD_FILE",
			Usage: "read the MySQL password from this file instead of the DSN; one trailing newline is dropped"},
		{Name: nameRedisPasswordFile, Env: "BINLOG_OUTBOX_REDIS_PASSWORD_FILE",
			Usage: "read the Redis password from this file instead of --redis-url; one trailing newline is dropped"},
		{Name: nameSentinelMaster, Env: "BINLOG_OUTBOX_REDIS_SENTINEL_MASTER",
			Usage: "master name the sentinels monitor; makes the --redis-url hosts sentinels (like redis+sentinel://hosts/<master>/db)"},
		{Name: nameSentinelUser, Env: "BINLOG_OUTBOX_REDIS_SENTINEL_USER",
			Usage: "user the relay authenticates as to the sentinels (an ACL user of sentinel.conf); the URL's user is the master's"},
		{Name: nameSentinelPWFile, Env: "BINLOG_OUTBOX_REDIS_SENTINEL_PASSWORD_FILE",
			Usage: "read the sentinels' password (sentinel.conf) from this file; the URL's password is the master's"},
		{Name: nameTable, Env: "BINLOG_OUTBOX_TABLE", Kind: List, Default: []string{DefaultTable},
			Usage: "the outbox table: `table` or database.table, or a pattern like tenant_*.outbox (docs/many-tables.md); repeatable"},
		{Name: nameColumn, Env: "BINLOG_OUTBOX_COLUMNS", Kind: List,
			Usage: "map a logical column to the table's, `logical=physical` (logical=- if absent), or table:logical=physical; repeatable"},
		{Name: nameExtraColumn, Env: "BINLOG_OUTBOX_EXTRA_COLUMNS", Kind: List,
			Usage: "carry a further integer or text column as an entry field, `column[=field]`; NULL omits it; repeatable"},
		{Name: nameLogFormat, Env: "BINLOG_OUTBOX_LOG_FORMAT", Default: []string{logging.DefaultFormat},
			Usage: "log format: text (coloured on a terminal) or json"},
		{Name: nameLogLevel, Env: "BINLOG_OUTBOX_LOG_LEVEL", Default: []string{logging.DefaultLevel},
			Usage: "log level: debug, info, warn or error"},
		{Name: nameServerID, Env: "BINLOG_OUTBOX_SERVER_ID", Kind: Uint, Default: []string{fmt.Sprint(DefaultServerID)},
			Shown: "from 1000000000 to 1999999999, taken from the host name and the position key",
			Usage: "replica server id of the relay; unique among the servers and replicas of the topology"},
		{Name: nameServerIDRange, Env: "BINLOG_OUTBOX_SERVER_ID_RANGE", Kind: Uint, Default: []string{"1"},
			Usage: "N > 1: add 0..N-1, from the host name, to --server-id (default 1001) so standbys of one config differ (docs/standby-relays.md)"},
	}
}

func laravelFlag() Flag {
	return Flag{Name: nameLaravelEnv, Env: "BINLOG_OUTBOX_LARAVEL_ENV",
		Usage: "read MySQL and Redis from a Laravel .env (DB_*, REDIS_*; docs/laravel-env.md); explicit flags win"}
}

func laravelPrefixFlag() Flag {
	return Flag{Name: nameLaravelPrefix, Env: "BINLOG_OUTBOX_LARAVEL_REDIS_PREFIX",
		Usage: "--source laravel-jobs: the Laravel app's Redis key prefix, e.g. laravel_database_; default from --laravel-env (docs/laravel.md)"}
}

func clusterFlag() Flag {
	return Flag{Name: nameRedisCluster, Env: "BINLOG_OUTBOX_REDIS_CLUSTER", Kind: Bool, Default: []string{"false"},
		Usage: "--redis-url names a Redis Cluster by some of its nodes, redis://host1:port1?addr=host2:port2 (docs/redis-cluster.md)"}
}

// tlsFlags are the TLS flags of server, "mysql" or "redis".
func tlsFlags(server string) []Flag {
	env := "BINLOG_OUTBOX_MYSQL_TLS_"
	usage := [4]string{
		"CA bundle (PEM) that signed the MySQL server's certificate; turns TLS on for SQL and binlog connections",
		"client certificate (PEM file) for MySQL, with --mysql-tls-key",
		"private key (PEM file) of --mysql-tls-cert",
		"name the MySQL server's certificate must carry (default: the host of --mysql-dsn)",
	}
	if server == "redis" {
		env = "BINLOG_OUTBOX_REDIS_TLS_"
		usage = [4]string{
			"CA bundle (PEM) that signed the Redis server's certificate, for rediss://; default: the system's roots",
			"client certificate (PEM file) for Redis (tls-auth-clients), with --redis-tls-key",
			"private key (PEM file) of --redis-tls-cert",
			"name the Redis server's certificate must carry (default: the host of --redis-url)",
		}
	}
	p := server + "-tls-"
	return []Flag{
		{Name: p + "ca", Env: env + "CA", Usage: usage[0]},
		{Name: p + "cert", Env: env + "CERT", Usage: usage[1]},
		{Name: p + "key", Env: env + "KEY", Usage: usage[2]},
		{Name: p + "server-name", Env: env + "SERVER_NAME", Usage: usage[3]},
	}
}
