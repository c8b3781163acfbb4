package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Environment variables of the global flags. Users' deployments depend on
// these names: do not rename them.
const (
	envMySQLDSN      = "BINLOG_OUTBOX_MYSQL_DSN"
	envRedisURL      = "BINLOG_OUTBOX_REDIS_URL"
	envTable         = "BINLOG_OUTBOX_TABLE"
	envColumns       = "BINLOG_OUTBOX_COLUMNS"
	envExtraColumns  = "BINLOG_OUTBOX_EXTRA_COLUMNS"
	envLogFormat     = "BINLOG_OUTBOX_LOG_FORMAT"
	envLogLevel      = "BINLOG_OUTBOX_LOG_LEVEL"
	envServerID      = "BINLOG_OUTBOX_SERVER_ID"
	envServerIDRange = "BINLOG_OUTBOX_SERVER_ID_RANGE"

	envMySQLUser         = "BINLOG_OUTBOX_MYSQL_USER"
	envMySQLPasswordFile = "BINLOG_OUTBOX_MYSQL_PASSWORD_FILE"
	envRedisPasswordFile = "BINLOG_OUTBOX_REDIS_PASSWORD_FILE"

	envRedisSentinelMaster       = "BINLOG_OUTBOX_REDIS_SENTINEL_MASTER"
	envRedisSentinelUser         = "BINLOG_OUTBOX_REDIS_SENTINEL_USER"
	envRedisSentinelPasswordFile = "BINLOG_OUTBOX_REDIS_SENTINEL_PASSWORD_FILE"
)

// Defaults of the global flags.
const (
	defaultRedisURL = "redis://127.0.0.1:6379/0"
	defaultTable    = "outbox"
	// defaultServerID is fixed, never random: a relay that restarts with a
	// new id leaves its old registration behind, and two relays that happen
	// to draw the same id kick each other off the server.
	defaultServerID = 1001
	// defaultConnectTimeout bounds the MySQL TCP connect when the DSN sets none.
	defaultConnectTimeout = 10 * time.Second
	// defaultIOTimeout bounds one read or write on a MySQL connection of the
	// SQL pool when the DSN sets none (readTimeout, writeTimeout).
	defaultIOTimeout = 60 * time.Second
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// NewApp builds the command-line application. Tests drive it in-process, with
// Writer and ErrWriter replaced.
func NewApp() *cli.App {
	app := &cli.App{
		Name:    "binlog-outbox",
		Usage:   "relay rows of a MySQL/MariaDB outbox table to Redis Streams",
		Version: versionString(),
		Flags:   globalFlags(),
		// Commands lists the subcommands; add new ones here.
		Commands: []*cli.Command{
			runCommand(),
			checkCommand(),
			positionCommand(),
			markAppendedCommand(),
			verifyCommand(),
			statusCommand(),
			cleanupCommand(),
			schemaCommand(),
			versionCommand(),
		},
		Writer:    os.Stdout,
		ErrWriter: os.Stderr,
		// main maps errors to exit codes; cli must not exit by itself, or
		// tests driving the app in-process would end.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError{fmt.Errorf("unknown command %q", c.Args().First())}
			}
			return cli.ShowAppHelp(c)
		},
	}
	app.OnUsageError = onUsageError
	setUsageErrorHandler(app.Commands)
	addGlobalFlags(app.Commands)
	return app
}

// addGlobalFlags gives every command the global flags too, so that
// `binlog-outbox run --mysql-dsn …` works as well as `binlog-outbox
// --mysql-dsn … run`. The flag functions below read a global flag from
// wherever it was set.
func addGlobalFlags(cmds []*cli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 {
			addGlobalFlags(c.Subcommands)
			continue
		}
		c.Flags = append(c.Flags, globalFlags()...)
	}
}

// isGlobalFlag reports whether name is one of the global flags.
func isGlobalFlag(name string) bool {
	for _, f := range globalFlags() {
		if f.Names()[0] == name {
			return true
		}
	}
	return false
}

// globalCtx returns the context of the command line level that set a global
// flag: the command's own flags shadow the app's, even when unset.
func globalCtx(c *cli.Context, name string) *cli.Context {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx
		}
	}
	return c
}

func globalString(c *cli.Context, name string) string { return globalCtx(c, name).String(name) }

// usageError marks a command line that cannot be run as given; it exits 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usageError{fmt.Errorf("incorrect usage: %w (see --help)", err)}
}

func setUsageErrorHandler(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrorHandler(c.Subcommands)
	}
}

// reportError prints err and, on a line of its own, its hint to w and returns
// the exit code: 0 for nil, 2 for usage and configuration errors, 1 for
// everything else.
func reportError(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(w, "error:", err)
	if hint := outbox.HintOf(err); hint != "" {
		fmt.Fprintln(w, "hint:", hint)
	}
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, outbox.ErrConfig) {
		return exitUsage
	}
	return exitFailure
}

// secretFlag is a string flag whose help never shows the value it has: an
// environment variable holding a DSN would otherwise appear in --help as the
// default, password and all.
type secretFlag struct {
	*cli.StringFlag
	// shown is what --help prints as the default; "" prints none.
	shown string
}

// GetDefaultText implements cli.DocGenerationFlag.
func (f secretFlag) GetDefaultText() string { return f.shown }

func globalFlags() []cli.Flag {
	return append([]cli.Flag{
		secretFlag{StringFlag: &cli.StringFlag{
			Name:    "mysql-dsn",
			Usage:   "go-sql-driver DSN of the relay user, e.g. `user:pass@tcp(127.0.0.1:3306)/app`; its database holds the outbox table",
			EnvVars: []string{envMySQLDSN},
		}},
		secretFlag{StringFlag: &cli.StringFlag{
			Name:    "redis-url",
			Usage:   "Redis to append to: redis://[user:pass@]host:port/db, or rediss:// for TLS; a master found through Redis Sentinel: redis+sentinel://[user:pass@]host1:26379,host2:26379/<master>/db (rediss+sentinel:// for TLS)",
			EnvVars: []string{envRedisURL},
			Value:   defaultRedisURL,
		}, shown: fmt.Sprintf("%q", defaultRedisURL)},
		&cli.StringFlag{
			Name:    "mysql-user",
			Usage:   "MySQL user of the relay, for a --mysql-dsn without one or in place of the DB_USERNAME of --laravel-env (whose DB_PASSWORD is then not used)",
			EnvVars: []string{envMySQLUser},
		},
		&cli.StringFlag{
			Name:    "mysql-password-file",
			Usage:   "read the MySQL password from this file (as Docker and Kubernetes mount them) instead of the DSN; one trailing newline is dropped",
			EnvVars: []string{envMySQLPasswordFile},
		},
		&cli.StringFlag{
			Name:    "redis-password-file",
			Usage:   "read the Redis password from this file instead of --redis-url; one trailing newline is dropped",
			EnvVars: []string{envRedisPasswordFile},
		},
		&cli.StringFlag{
			Name:    "redis-sentinel-master",
			Usage:   "name of the master the sentinels monitor; makes the hosts of a redis:// or rediss:// --redis-url sentinels (the same as redis+sentinel://hosts/<master>/db)",
			EnvVars: []string{envRedisSentinelMaster},
		},
		&cli.StringFlag{
			Name:    "redis-sentinel-user",
			Usage:   "user the relay authenticates as to the sentinels (an ACL user of sentinel.conf); the URL's user is the master's",
			EnvVars: []string{envRedisSentinelUser},
		},
		&cli.StringFlag{
			Name:    "redis-sentinel-password-file",
			Usage:   "read the sentinels' password (requirepass or the --redis-sentinel-user's, in sentinel.conf) from this file; the URL's password is the master's",
			EnvVars: []string{envRedisSentinelPasswordFile},
		},
		&cli.StringSliceFlag{
			Name:    "table",
			Usage:   "the outbox table: `table` (in the DSN's database) or database.table; repeatable, and a pattern with * (tenant_*.outbox) follows every table it matches, those created later too: in binlog mode with one position, in poll mode with a poller per table (docs/scaling.md); comma-separated in the environment variable",
			EnvVars: []string{envTable},
			Value:   cli.NewStringSlice(defaultTable),
		},
		&cli.StringSliceFlag{
			Name:    "column",
			Usage:   "map a logical column to the table's column, `logical=physical` (logical=- if the table has none), for every table or, as table:logical=physical with a --table value, for its tables; repeatable, comma-separated in the environment variable",
			EnvVars: []string{envColumns},
		},
		&cli.StringSliceFlag{
			Name:    "extra-column",
			Usage:   "carry a further column of the table (tenant, trace id, aggregate version) as an entry field of its own, `column[=field]`; integer or text columns; NULL leaves the field out; repeatable, comma-separated in the environment variable",
			EnvVars: []string{envExtraColumns},
		},
		&cli.StringFlag{
			Name:    "log-format",
			Usage:   "log format: text (coloured on a terminal) or json",
			EnvVars: []string{envLogFormat},
			Value:   logging.DefaultFormat,
		},
		&cli.StringFlag{
			Name:    "log-level",
			Usage:   "log level: debug, info, warn or error",
			EnvVars: []string{envLogLevel},
			Value:   logging.DefaultLevel,
		},
		&cli.UintFlag{
			Name:    "server-id",
			Usage:   "replica server id of the relay; unique among the servers and replicas of the topology",
			EnvVars: []string{envServerID},
			Value:   defaultServerID,
		},
		&cli.UintFlag{
			Name:    "server-id-range",
			Usage:   "N > 1: add a number from 0 to N-1 taken from the host name to --server-id, so that standby relays started from one configuration (the replicas of a Kubernetes Deployment) read the binlog with different ids; keep --server-id to --server-id+N-1 free of other servers' and relays' ids",
			EnvVars: []string{envServerIDRange},
			Value:   1,
		},
		laravelEnvFlag(),
		redisClusterFlag(),
	}, append(mysqlTLSFlags(), redisTLSFlags()...)...)
}

// config is the configuration every command shares, from the global flags.
type config struct {
	// MySQL is the parsed DSN, with the options the relay relies on set; nil
	// for commands that do not connect (see loadTableConfig).
	MySQL *mysql.Config
	// Database is the DSN's database, which holds the outbox table.
	Database string
	// Redis is how every command connects to Redis, one server or a master
	// found through Sentinel: --redis-url parsed, with the password of
	// --redis-password-file, the TLS configuration of the --redis-tls-*
	// flags and the --redis-sentinel-* flags. Open clients from it
	// (Redis.NewClient), never from the URL alone, which lacks the flags.
	Redis *redisstream.Target
	// RedisCluster, with --redis-cluster, is the cluster --redis-url names
	// (Redis then holds its first node); open the client with
	// config.redisClient.
	RedisCluster *redis.ClusterOptions
	// redisURL is the URL as given, with the password from the file; log it
	// only through RedactURL.
	redisURL string
	// Table is the outbox table's name. Commands that connect replace
	// Database and Table with the names the server uses (resolveTable).
	// It is "" when --table names several tables (Several).
	Table string
	// Sources are the --table values with their column mappings, each
	// with its database filled in once the DSN is known; Several says they
	// may name more than one table (several values, or a pattern), which
	// only run, check and position relay or handle.
	Sources []schema.Source
	Several bool
	// LowerCaseTableNames is the server's lower_case_table_names, set by
	// resolveTable.
	LowerCaseTableNames int
	// Given is database.table as configured, when the server's names
	// differ from it in letter case (set by resolveTable).
	Given string
	// Resolved says resolveTable ran: Database and Table are the server's.
	Resolved bool
	// Mapping maps logical to physical column names, as --column gives it;
	// the relay resolves it against the table (schema.Resolve) before use.
	Mapping schema.Mapping
	// Declared are the logical columns --column names.
	Declared []string
	// Extra are the columns --extra-column carries as entry fields.
	Extra []schema.ExtraColumn
	// ServerID is the relay's replica server id.
	ServerID uint32
	// LaravelEnv is the .env file --laravel-env read, "" for none.
	LaravelEnv string
	// Logger is configured from --log-format and --log-level.
	Logger *slog.Logger
}

// DSN returns the MySQL DSN with the options loadConfig set.
func (c config) DSN() string { return c.MySQL.FormatDSN() }

// LogValue implements slog.LogValuer: the effective configuration, redacted.
func (c config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("redis_url", logging.RedactURL(c.redisURL)),
		slog.String("table", c.tableString()),
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

// tableString is the table, or the --table values of several, for the log.
func (c config) tableString() string {
	if !c.Several {
		return c.Table
	}
	return schema.PatternsOf(c.Sources).String()
}

// columnsString is the mapping, or each --table value's, for the log.
func (c config) columnsString() string {
	if !c.Several {
		return c.Mapping.String()
	}
	parts := make([]string, len(c.Sources))
	for i, s := range c.Sources {
		parts[i] = s.Spec + ":" + s.Mapping.String()
	}
	return strings.Join(parts, " ")
}

// commandName is the command as typed, "schema print" for a subcommand.
func commandName(c *cli.Context) string {
	return strings.TrimPrefix(c.Command.HelpName, c.App.Name+" ")
}

// requireOneTable refuses several tables for a command that works on one.
func requireOneTable(cfg config, command string) error {
	if !cfg.Several {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: %s works on one table, and --table names several (%s)", outbox.ErrConfig, command, cfg.tableString()),
		"run it once per table, with that table's --table (and its --column flags)")
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

// loadConfig reads the global flags of a command that connects to MySQL.
func loadConfig(c *cli.Context) (config, error) {
	env, err := readLaravelEnv(c)
	if err != nil {
		return config{}, err
	}
	cfg, err := loadFlags(c, env)
	if err != nil {
		return config{}, err
	}
	my, err := mysqlConfig(c, env)
	if err != nil {
		return config{}, err
	}
	if err := applyMySQLTLS(c, my); err != nil {
		return config{}, err
	}
	// The relay scans DATETIME columns into time.Time, in UTC.
	my.ParseTime = true
	my.Loc = time.UTC
	if my.Timeout == 0 {
		my.Timeout = defaultConnectTimeout
	}
	// A link that dies without a reset (a broken NAT, a pulled cable) would
	// otherwise hang a statement for ever: database/sql sends ROLLBACK
	// without a context, so not even a stop gets through. The default
	// outlasts innodb_lock_wait_timeout (50s); the DSN's own readTimeout
	// and writeTimeout win.
	if my.ReadTimeout == 0 {
		my.ReadTimeout = defaultIOTimeout
	}
	if my.WriteTimeout == 0 {
		my.WriteTimeout = defaultIOTimeout
	}
	cfg.MySQL = my
	cfg.Database = my.DBName
	for i := range cfg.Sources {
		cfg.Sources[i].Pattern = cfg.Sources[i].Pattern.WithDatabase(my.DBName)
	}
	if !cfg.Several && cfg.Sources[0].Pattern.Database != "" {
		// --table database.table: the table is in that database.
		cfg.Database = cfg.Sources[0].Pattern.Database
	}
	cfg.Logger.Debug("starting", "version", versionString(), "config", cfg)
	return cfg, nil
}

// mysqlConfig is the MySQL connection of --mysql-dsn or, when that is not
// set, of the DB_* settings of --laravel-env, with the user of --mysql-user
// and the password of --mysql-password-file.
func mysqlConfig(c *cli.Context, env *laravelEnv) (*mysql.Config, error) {
	user, passwordFile := globalString(c, "mysql-user"), globalString(c, "mysql-password-file")
	dsn := globalString(c, "mysql-dsn")
	var my *mysql.Config
	if dsn == "" && env != nil {
		var err error
		if my, err = env.mysqlConfig(user, passwordFile == ""); err != nil {
			return nil, err
		}
	} else {
		if dsn == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: no MySQL DSN", outbox.ErrConfig),
				"set --mysql-dsn or %s, e.g. user:pass@tcp(127.0.0.1:3306)/app, or read a Laravel application's .env with --laravel-env", envMySQLDSN)
		}
		var err error
		if my, err = mysql.ParseDSN(dsn); err != nil {
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
		if passwordFile != "" && my.Passwd != "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: --mysql-dsn has a password and --mysql-password-file is set", outbox.ErrConfig),
				"keep the password in one place: drop it from the DSN (user@tcp(host:3306)/app) when it comes from the file")
		}
	}
	if passwordFile != "" {
		var err error
		if my.Passwd, err = readSecret(passwordFile, "--mysql-password-file"); err != nil {
			return nil, err
		}
	}
	return my, nil
}

// resolveTable replaces the configured database and table with the names
// the server stores them under: the binlog carries those, and the Redis keys
// embed them, so that `--table Outbox` and `--table outbox` on a server that
// folds names are one table with one position. A name that matches no table
// is an error: a relay comparing the binlog with it would skip every row.
func resolveTable(ctx context.Context, cfg *config, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := schema.ResolveName(ctx, db, cfg.Database, cfg.Table)
	if err != nil {
		return fmt.Errorf("outbox table: %w", err)
	}
	if given := cfg.Database + "." + cfg.Table; given != n.String() {
		cfg.Given = given
		cfg.Logger.Info("using the outbox table's name as the server stores it", "given", given, "table", n.String(),
			"lower_case_table_names", n.LowerCaseTableNames)
	}
	cfg.Database, cfg.Table, cfg.LowerCaseTableNames, cfg.Resolved = n.Database, n.Table, n.LowerCaseTableNames, true
	return nil
}

// loadOneTableConfig is loadConfig for a command that works on one table.
func loadOneTableConfig(c *cli.Context) (config, error) {
	cfg, err := loadConfig(c)
	if err == nil {
		err = requireOneTable(cfg, commandName(c))
	}
	return cfg, err
}

// loadTableConfig reads the global flags of a command that only needs the
// table and its mapping (schema print): it works without a DSN.
func loadTableConfig(c *cli.Context) (config, error) {
	cfg, err := loadFlags(c, nil)
	if err != nil {
		return config{}, err
	}
	if err := requireOneTable(cfg, commandName(c)); err != nil {
		return config{}, err
	}
	cfg.Logger.Debug("starting", "version", versionString(), "config", cfg)
	return cfg, nil
}

// loadFlags reads the flags every command shares; env, when not nil, gives
// the Redis URL unless --redis-url is set.
func loadFlags(c *cli.Context, env *laravelEnv) (config, error) {
	log, err := logging.New(c.App.ErrWriter, globalString(c, "log-format"), globalString(c, "log-level"))
	if err != nil {
		return config{}, err
	}
	// go-redis logs dial failures to stderr on its own; route them to debug,
	// since the relay reports the errors it gets anyway.
	redis.SetLogger(redisLogger{log})
	cfg := config{Logger: log, redisURL: globalString(c, "redis-url")}
	if cfg.Sources, err = schema.ParseSources(globalCtx(c, "table").StringSlice("table"), globalCtx(c, "column").StringSlice("column")); err != nil {
		return config{}, err
	}
	cfg.Several = schema.PatternsOf(cfg.Sources).Several()
	// One table: its mapping is the mapping; several: the first value's
	// stands in where one is needed before the tables are inspected.
	first := cfg.Sources[0]
	cfg.Mapping, cfg.Declared = first.Mapping, first.Declared
	if !cfg.Several {
		cfg.Table = first.Pattern.Table
	}
	for _, src := range cfg.Sources {
		if cfg.Extra, err = schema.ParseExtraColumns(globalCtx(c, "extra-column").StringSlice("extra-column"), src.Mapping, redisstream.BuiltinFields()); err != nil {
			return config{}, err
		}
	}
	id := globalCtx(c, "server-id").Uint("server-id")
	if id == 0 || id > math.MaxUint32 {
		return config{}, outbox.WithHint(fmt.Errorf("%w: --server-id %d is out of range", outbox.ErrConfig, id),
			"use a number from 1 to 4294967295 that no server or replica uses")
	}
	n := globalCtx(c, "server-id-range").Uint("server-id-range")
	if n > 1 {
		host, err := os.Hostname()
		if err != nil {
			return config{}, fmt.Errorf("--server-id-range: read the host name: %w", err)
		}
		if id+n-1 > math.MaxUint32 {
			return config{}, outbox.WithHint(fmt.Errorf("%w: --server-id %d with --server-id-range %d goes past 4294967295", outbox.ErrConfig, id, n),
				"lower --server-id or --server-id-range")
		}
		id = spreadServerID(id, n, host)
	}
	cfg.ServerID = uint32(id)
	if env != nil {
		cfg.LaravelEnv = env.path
		if !globalCtx(c, "redis-url").IsSet("redis-url") {
			if cfg.redisURL, err = env.redisURL(globalString(c, "redis-password-file") == ""); err != nil {
				return config{}, err
			}
		}
	}
	if path := globalString(c, "redis-password-file"); path != "" {
		if cfg.redisURL, err = withRedisPassword(cfg.redisURL, path); err != nil {
			return config{}, err
		}
	}
	if globalCtx(c, "redis-cluster").Bool("redis-cluster") {
		return cfg, loadRedisCluster(c, &cfg)
	}
	if cfg.Redis, err = redisTarget(c, cfg.redisURL); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// redisTarget parses the Redis URL with the --redis-sentinel-* and
// --redis-tls-* flags into the one description every command connects by.
func redisTarget(c *cli.Context, rawURL string) (*redisstream.Target, error) {
	t, err := redisstream.ParseTarget(rawURL, globalString(c, "redis-sentinel-master"))
	if errors.Is(err, outbox.ErrConfig) {
		return nil, err
	}
	if err != nil {
		detail := err.Error()
		if logging.URLPassword(rawURL) != "" {
			detail = "the parser's message is withheld, as it may quote part of the password"
		}
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse: %s", outbox.ErrConfig, logging.RedactURL(rawURL), detail),
			"write it as redis://[user:pass@]host:6379/0, or rediss:// for TLS, or redis+sentinel://[user:pass@]host1:26379,host2:26379/<master>/0 for Sentinel; percent-encode special characters in the password")
	}
	user, pwFile := globalString(c, "redis-sentinel-user"), globalString(c, "redis-sentinel-password-file")
	if t.Sentinel == nil && (user != "" || pwFile != "") {
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-sentinel-user or --redis-sentinel-password-file is set, but --redis-url names no Sentinel", outbox.ErrConfig),
			"write --redis-url as redis+sentinel://host1:26379,host2:26379/<master>/<db> (or set --redis-sentinel-master), or drop the sentinel flags")
	}
	if t.Sentinel != nil {
		t.Sentinel.Username = user
		if pwFile != "" {
			if t.Sentinel.Password, err = readSecret(pwFile, "--redis-sentinel-password-file"); err != nil {
				return nil, err
			}
		}
	}
	if err := applyRedisTLS(c, t); err != nil {
		return nil, err
	}
	return t, nil
}

// readSecret reads a password from a file (a mounted Docker or Kubernetes
// secret), so that it never stands on a command line, in the environment or
// in a process listing. One trailing newline, as editors and `echo` write
// it, is not part of the password. Errors name the file, never its content.
func readSecret(path, flag string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", outbox.WithHint(fmt.Errorf("%w: %s: %v", outbox.ErrConfig, flag, err),
			"point %s at a readable file holding only the password", flag)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", outbox.WithHint(fmt.Errorf("%w: %s: %s is empty", outbox.ErrConfig, flag, path),
			"write the password into the file, or drop %s", flag)
	}
	return s, nil
}

// withRedisPassword puts the password from path into a Redis URL that has
// none, keeping its user name (an ACL user) if it has one.
func withRedisPassword(rawURL, path string) (string, error) {
	pw, err := readSecret(path, "--redis-password-file")
	if err != nil {
		return "", err
	}
	out, had, err := redisstream.SetURLPassword(rawURL, pw)
	if err != nil {
		return "", outbox.WithHint(fmt.Errorf("%w: --redis-url %s does not parse", outbox.ErrConfig, logging.RedactURL(rawURL)),
			"write it as redis://[user@]host:6379/0, or rediss:// for TLS, or redis+sentinel://[user@]host1:26379,host2:26379/<master>/0")
	}
	if had {
		return "", outbox.WithHint(fmt.Errorf("%w: --redis-url has a password and --redis-password-file is set", outbox.ErrConfig),
			"keep the password in one place: drop it from the URL (redis://[user@]host:6379/0) when it comes from the file")
	}
	return out, nil
}

// redisLogger adapts go-redis's internal logging to slog at debug level.
type redisLogger struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// spreadServerID is --server-id-range's id for the host: base plus a number
// below n taken from the host name. The name, not the pid, so that a
// restarted relay keeps its id (its old registration on the server is its
// own), and distinct hosts (pods) almost always get distinct ids.
func spreadServerID(base, n uint, host string) uint {
	return base + uint(crc32.ChecksumIEEE([]byte(host)))%n
}
