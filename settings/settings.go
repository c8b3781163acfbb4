// Package settings resolves the configuration every command of the relay
// shares: the MySQL connection, the Redis target, the outbox tables and
// their columns, the server id and the logger.
//
// A setting comes from, in this order of precedence:
//
//  1. the command line: the flag, before or after the command's name (given
//     both before and after, the one after wins);
//  2. the environment: its BINLOG_OUTBOX_* variable (an empty one counts as
//     unset);
//  3. the .env of --laravel-env, for the MySQL connection (DB_*) when no
//     --mysql-dsn is given, and the Redis URL (REDIS_*) when no --redis-url
//     is given; --mysql-user and the password files win over the file's
//     user and passwords;
//  4. the setting's default.
//
// The command line collects the flags it was given (Input.CommandLine) and
// calls Resolve, which reads the environment, the password files and the
// .env, and returns the resolved Config or an error with a hint
// (outbox.ErrConfig).
package settings

import (
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Input is what Resolve resolves.
type Input struct {
	// CommandLine holds the global settings given on the command line, by
	// name (Flag.Name), one element per value: a switch as "true" or
	// "false", a number in decimal. A setting not given is absent.
	CommandLine map[string][]string
	// LookupEnv reads an environment variable (os.LookupEnv); nil reads
	// none.
	LookupEnv func(string) (string, bool)
	// Hostname is the host's name, for --server-id-range and the default
	// server id; nil is os.Hostname.
	Hostname func() (string, error)
	// LogWriter receives the log; nil discards it.
	LogWriter io.Writer
	// Command is the command's name ("run", "position show"), for errors.
	Command string
	// NoMySQL is set for a command that needs the table and its mapping
	// only (schema print): no DSN is required, and no .env is read.
	NoMySQL bool
	// OneTable refuses a --table that names several tables.
	OneTable bool
	// ClusterOK says the command knows Redis Cluster; without it
	// --redis-cluster is refused.
	ClusterOK bool
	// PositionKey is the command's --position-key, "" for the table's
	// default key: without --server-id the server id is taken from it
	// (DefaultServerIDFor).
	PositionKey string
	// Version is logged with the effective configuration, at the debug
	// level.
	Version string
}

// Config is the resolved configuration.
type Config struct {
	// MySQL is the parsed DSN, with the options the relay relies on set;
	// nil with Input.NoMySQL.
	MySQL *mysql.Config
	// Database is the database of the outbox table: the DSN's, or the one
	// --table names.
	Database string
	// Redis is how every command connects to Redis, one server or a master
	// found through Sentinel: --redis-url parsed, with the password of
	// --redis-password-file, the TLS configuration of the --redis-tls-*
	// flags and the --redis-sentinel-* flags. Open clients from it, never
	// from the URL alone, which lacks the flags. With --redis-cluster it
	// holds the cluster's first node.
	Redis *redisconn.Target
	// RedisCluster, with --redis-cluster, is the cluster --redis-url names.
	RedisCluster *redis.ClusterOptions
	// RedisURL is the URL as given, with the password from the file; log it
	// only through logging.RedactURL.
	RedisURL string
	// Table is the outbox table's name; "" when --table names several
	// tables (Several).
	Table string
	// Sources are the --table values with their column mappings, each with
	// its database filled in once the DSN is known; Several says they may
	// name more than one table (several values, or a pattern).
	Sources []schema.Source
	Several bool
	// Mapping maps logical to physical column names, as --column gives it
	// (for several tables, the first value's).
	Mapping schema.Mapping
	// Declared are the logical columns --column names.
	Declared []string
	// Extra are the columns --extra-column carries as entry fields.
	Extra []schema.ExtraColumn
	// ServerID is the relay's replica server id: --server-id with
	// --server-id-range applied, or DefaultServerIDFor the host and the
	// position key when neither is given.
	ServerID uint32
	// LaravelEnv is the .env file --laravel-env read, "" for none.
	LaravelEnv string
	// LaravelRedisPrefix is the key prefix of the Laravel application's
	// Redis connection (--laravel-redis-prefix, or derived from
	// --laravel-env); LaravelRedisPrefixKnown says either gave it.
	LaravelRedisPrefix      string
	LaravelRedisPrefixKnown bool
	// Logger is configured from --log-format and --log-level.
	Logger *slog.Logger
	// Values are every global setting as resolved, by name.
	Values map[string]Value
}

// Resolve merges the command line, the environment, the password files and
// the .env of in into the configuration, with the precedence of the package
// documentation. go-redis's own logs go to the logger's debug level, and
// the effective configuration is logged there with in.Version.
func Resolve(in Input) (Config, error) {
	cfg, err := resolve(in)
	if err != nil {
		return Config{}, err
	}
	// go-redis logs dial failures to stderr on its own; route them to debug,
	// since the relay reports the errors it gets anyway.
	redis.SetLogger(redisLogger{cfg.Logger})
	if cfg.ServerID == 0 {
		host, err := hostname(in.Hostname)
		if err != nil {
			return Config{}, fmt.Errorf("--server-id: read the host name for the default: %w", err)
		}
		cfg.ServerID = DefaultServerIDFor(host, cfg.PositionKey(in.PositionKey))
	}
	cfg.Logger.Debug("starting", "version", in.Version, "config", cfg)
	return cfg, nil
}

// resolve is Resolve before the default server id, which needs the
// database and the table resolved first.
func resolve(in Input) (Config, error) {
	vs, err := resolveValues(in.CommandLine, in.LookupEnv)
	if err != nil {
		return Config{}, err
	}
	if err := applySource(vs); err != nil {
		return Config{}, err
	}
	w := in.LogWriter
	if w == nil {
		w = io.Discard
	}
	log, err := logging.New(w, vs.str(nameLogFormat), vs.str(nameLogLevel))
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Logger: log, Values: vs}
	if err := cfg.tables(vs, in); err != nil {
		return Config{}, err
	}
	if cfg.ServerID, err = serverID(vs, in.Hostname); err != nil {
		return Config{}, err
	}
	var env *laravelEnv
	if !in.NoMySQL {
		if env, err = readLaravelEnv(vs.str(nameLaravelEnv), in.LookupEnv); err != nil {
			return Config{}, err
		}
	}
	if vs[nameLaravelPrefix].Source > Default {
		cfg.LaravelRedisPrefix, cfg.LaravelRedisPrefixKnown = vs.str(nameLaravelPrefix), true
	} else if env != nil {
		if cfg.LaravelRedisPrefix, err = env.redisPrefix(); err != nil {
			return Config{}, err
		}
		cfg.LaravelRedisPrefixKnown = true
	}
	files := secretReader{log: log}
	if err := cfg.redis(vs, env, in, files); err != nil {
		return Config{}, err
	}
	if in.NoMySQL {
		return cfg, nil
	}
	if err := cfg.mysql(vs, env, files); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// tables reads --table, --column and --extra-column.
func (c *Config) tables(vs values, in Input) error {
	var err error
	if c.Sources, err = schema.ParseSources(vs.list(nameTable), vs.list(nameColumn)); err != nil {
		return err
	}
	c.Several = schema.PatternsOf(c.Sources).Several()
	if c.Several && in.OneTable {
		return outbox.WithHint(fmt.Errorf("%w: %s works on one table, and --table names several (%s)", outbox.ErrConfig, in.Command, c.TableString()),
			"run it once per table, with that table's --table (and its --column flags)")
	}
	// One table: its mapping is the mapping; several: the first value's
	// stands in where one is needed before the tables are inspected.
	first := c.Sources[0]
	c.Mapping, c.Declared = first.Mapping, first.Declared
	if !c.Several {
		c.Table = first.Pattern.Table
	}
	for _, src := range c.Sources {
		if c.Extra, err = schema.ParseExtraColumns(vs.list(nameExtraColumn), src.Mapping, entry.BuiltinFields()); err != nil {
			return err
		}
	}
	return nil
}

// serverID is --server-id, spread over --server-id-range; 0 when neither is
// given, for Resolve to pick DefaultServerIDFor once it knows the position
// key.
func serverID(vs values, lookup func() (string, error)) (uint32, error) {
	id := vs.uint(nameServerID)
	if vs[nameServerID].Source == Default && vs.uint(nameServerIDRange) == 1 {
		return 0, nil
	}
	if id == 0 || id > math.MaxUint32 {
		return 0, outbox.WithHint(fmt.Errorf("%w: --server-id %d is out of range", outbox.ErrConfig, id),
			"use a number from 1 to 4294967295 that no server or replica uses")
	}
	n := vs.uint(nameServerIDRange)
	if n == 0 || n > math.MaxUint32 {
		return 0, outbox.WithHint(fmt.Errorf("%w: --server-id-range %d is out of range", outbox.ErrConfig, n),
			"use 1 (the default: --server-id as it is) or more, up to 4294967295")
	}
	if n == 1 {
		return uint32(id), nil
	}
	if id+n-1 > math.MaxUint32 {
		return 0, outbox.WithHint(fmt.Errorf("%w: --server-id %d with --server-id-range %d goes past 4294967295", outbox.ErrConfig, id, n),
			"lower --server-id or --server-id-range")
	}
	host, err := hostname(lookup)
	if err != nil {
		return 0, fmt.Errorf("--server-id-range: read the host name: %w", err)
	}
	return uint32(SpreadServerID(uint(id), uint(n), host)), nil
}

// PositionKey is the Redis key of the binlog position: given
// (--position-key) or, for one table, the table's default key; "" for
// several tables without --position-key.
func (c Config) PositionKey(given string) string {
	if c.Several {
		return given
	}
	return redisstream.KeysFor(c.Database, c.Table, given).Position
}

// hostname is the host's name by lookup (Input.Hostname), os.Hostname when
// nil.
func hostname(lookup func() (string, error)) (string, error) {
	if lookup == nil {
		lookup = os.Hostname
	}
	return lookup()
}

// DSN returns the MySQL DSN with the options Resolve set.
func (c Config) DSN() string { return c.MySQL.FormatDSN() }

// LogValue implements slog.LogValuer: the effective configuration, redacted.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("redis_url", logging.RedactURL(c.RedisURL)),
		slog.String("table", c.TableString()),
		slog.String("columns", c.columnsString()),
		slog.String("extra_columns", extraString(c.Extra)),
		slog.Uint64("server_id", uint64(c.ServerID)),
	}
	if c.MySQL != nil {
		attrs = append([]slog.Attr{slog.String("mysql_dsn", logging.RedactDSN(c.DSN()))}, attrs...)
	}
	if c.LaravelEnv != "" {
		attrs = append(attrs, slog.String("laravel_env", c.LaravelEnv))
	}
	return slog.GroupValue(attrs...)
}

// TableString is the table, or the --table values of several, for a log
// line or a message.
func (c Config) TableString() string {
	if !c.Several {
		return c.Table
	}
	return schema.PatternsOf(c.Sources).String()
}

// columnsString is the mapping, or each --table value's, for the log.
func (c Config) columnsString() string {
	if !c.Several {
		return c.Mapping.String()
	}
	parts := make([]string, len(c.Sources))
	for i, s := range c.Sources {
		parts[i] = s.Spec + ":" + s.Mapping.String()
	}
	return strings.Join(parts, " ")
}

// extraString renders extra columns as their flags, for the log.
func extraString(extra []schema.ExtraColumn) string {
	flags := make([]string, len(extra))
	for i, e := range extra {
		flags[i] = e.Column
		if e.Field != e.Column {
			flags[i] += "=" + e.Field
		}
	}
	return strings.Join(flags, ",")
}

// DefaultServerIDFor is the relay's server id without --server-id: a number
// from DefaultServerIDBase up, below DefaultServerIDBase+DefaultServerIDSpan,
// taken from the host name and the position key. Never random, so that a
// restarted relay keeps its id (its old registration on the server is its
// own); distinct hosts (pods) and distinct positions almost always get
// distinct ids, where one fixed default made the server drop one relay's
// binlog connection for the other's, again and again. Relays of one
// position on one host share it, and take turns by the lease.
func DefaultServerIDFor(host, positionKey string) uint32 {
	return DefaultServerIDBase + crc32.ChecksumIEEE([]byte(host+"\x00"+positionKey))%DefaultServerIDSpan
}

// SpreadServerID is --server-id-range's id for the host: base plus a number
// below n taken from the host name. The name, not the pid, so that a
// restarted relay keeps its id (its old registration on the server is its
// own), and distinct hosts (pods) almost always get distinct ids.
func SpreadServerID(base, n uint, host string) uint {
	return base + uint(crc32.ChecksumIEEE([]byte(host)))%n
}

// Supplied is the value of a setting the command line or the environment
// gives, "" when it has its default or none (bench starts private servers
// unless told to use others).
func (c Config) Supplied(name string) string {
	if v := c.Values[name]; v.Source >= Environment {
		return v.First()
	}
	return ""
}
