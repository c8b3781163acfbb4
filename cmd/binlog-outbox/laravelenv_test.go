package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/settings"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// writeFile writes content to name in a temporary directory of the test.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadArgs runs loadConfig on a command line of global flags.
func loadArgs(t *testing.T, args ...string) (config, error) {
	t.Helper()
	var cfg config
	var err error
	app := &cli.App{Flags: globalFlags(), Writer: io.Discard, ErrWriter: io.Discard, Action: func(c *cli.Context) error {
		cfg, err = loadConfig(c)
		return nil
	}}
	defer parseAlone(app)()
	if runErr := app.Run(append([]string{"binlog-outbox"}, args...)); runErr != nil {
		t.Fatal(runErr)
	}
	return cfg, err
}

// laravelDotEnv is the .env of a Laravel application as `laravel new`
// writes it, with the servers' settings changed.
const laravelDotEnv = `APP_NAME=Shop
APP_ENV=production
APP_KEY=base64:0123456789abcdefghijklmnopqrstuvwxyzABCDE=
APP_DEBUG=false
APP_URL=https://shop.example

LOG_CHANNEL=stack

# the database
DB_CONNECTION=mysql
DB_HOST=db.internal
DB_PORT=3307
export DB_DATABASE=shop
DB_USERNAME=shop_app
DB_PASSWORD="p@ss w#rd"

BROADCAST_DRIVER=log
REDIS_HOST=cache.internal
REDIS_USERNAME=shop
REDIS_PASSWORD='r3d!s#pw'
REDIS_PORT=6380
REDIS_DB=2

MAIL_FROM_NAME="${APP_NAME}"
`

func TestLaravelEnv_Config(t *testing.T) {
	mysqlPW := writeFile(t, "mysql-pw", "relay-pw\n")
	redisPW := writeFile(t, "redis-pw", "file-pw\n")
	tests := []struct {
		name    string
		env     string
		args    []string
		dsn     string // cfg.MySQL's user:password@net(addr)/database
		redis   string
		environ map[string]string
	}{
		{"an application's .env", laravelDotEnv, nil,
			"shop_app:p@ss w#rd@tcp(db.internal:3307)/shop", "redis://shop:r3d%21s%23pw@cache.internal:6380/2", nil},
		{"defaults", "DB_DATABASE=app\nDB_USERNAME=root\n", nil,
			"root:@tcp(127.0.0.1:3306)/app", "redis://127.0.0.1:6379/0", nil},
		{"null and empty values are no password", "DB_DATABASE=app\nDB_USERNAME=root\nDB_PASSWORD=\nREDIS_PASSWORD=null\nREDIS_HOST=\n", nil,
			"root:@tcp(127.0.0.1:3306)/app", "redis://127.0.0.1:6379/0", nil},
		{"TLS", "DB_DATABASE=app\nDB_USERNAME=u\nREDIS_SCHEME=tls\nREDIS_PASSWORD=pw\n", nil,
			"u:@tcp(127.0.0.1:3306)/app", "rediss://:pw@127.0.0.1:6379/0", nil},
		{"TLS in REDIS_HOST, as phpredis takes it", "DB_DATABASE=app\nDB_USERNAME=u\nREDIS_HOST=tls://cache\n", nil,
			"u:@tcp(127.0.0.1:3306)/app", "rediss://cache:6379/0", nil},
		{"interpolation from the file and the environment", "BASE=${DEPLOY_DB}\nDB_DATABASE=${BASE}_live\nDB_USERNAME=u\nDB_HOST=${DEPLOY_HOST}\n", nil,
			"u:@tcp(10.1.2.3:3306)/shop_live", "redis://127.0.0.1:6379/0", map[string]string{"DEPLOY_DB": "shop", "DEPLOY_HOST": "10.1.2.3"}},
		{"a socket", "DB_DATABASE=app\nDB_USERNAME=u\nDB_SOCKET=/run/mysqld/mysqld.sock\nDB_HOST=ignored\n", nil,
			"u:@unix(/run/mysqld/mysqld.sock)/app", "redis://127.0.0.1:6379/0", nil},
		{"--mysql-dsn wins over DB_*", laravelDotEnv, []string{"--mysql-dsn", "relay:x@tcp(primary:3306)/shop"},
			"relay:x@tcp(primary:3306)/shop", "redis://shop:r3d%21s%23pw@cache.internal:6380/2", nil},
		{"--redis-url wins over REDIS_*", laravelDotEnv, []string{"--redis-url", "redis://other:6379/5"},
			"shop_app:p@ss w#rd@tcp(db.internal:3307)/shop", "redis://other:6379/5", nil},
		{"the environment variables of the flags win", laravelDotEnv, nil,
			"relay:@tcp(primary:3306)/shop", "redis://other:6379/5", map[string]string{settings.Env("mysql-dsn"): "relay@tcp(primary:3306)/shop", settings.Env("redis-url"): "redis://other:6379/5"}},
		{"the relay's own user and password file", laravelDotEnv, []string{"--mysql-user", "relay", "--mysql-password-file", mysqlPW},
			"relay:relay-pw@tcp(db.internal:3307)/shop", "redis://shop:r3d%21s%23pw@cache.internal:6380/2", nil},
		{"the relay's own user leaves the application's password out", laravelDotEnv, []string{"--mysql-user", "relay"},
			"relay:@tcp(db.internal:3307)/shop", "redis://shop:r3d%21s%23pw@cache.internal:6380/2", nil},
		{"password files win over DB_PASSWORD and REDIS_PASSWORD", laravelDotEnv, []string{"--mysql-password-file", mysqlPW, "--redis-password-file", redisPW},
			"shop_app:relay-pw@tcp(db.internal:3307)/shop", "redis://shop:file-pw@cache.internal:6380/2", nil},
		{"--mysql-user with a DSN without a user", "", []string{"--mysql-dsn", "tcp(primary:3306)/shop", "--mysql-user", "relay"},
			"relay:@tcp(primary:3306)/shop", "redis://127.0.0.1:6379/0", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.environ {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.env != "" {
				args = append([]string{"--laravel-env", writeFile(t, ".env", tt.env)}, args...)
			}
			cfg, err := loadArgs(t, args...)
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			m := cfg.MySQL
			if got := fmt.Sprintf("%s:%s@%s(%s)/%s", m.User, m.Passwd, m.Net, m.Addr, m.DBName); got != tt.dsn {
				t.Errorf("MySQL %s, want %s", got, tt.dsn)
			}
			if cfg.RedisURL != tt.redis {
				t.Errorf("Redis %s, want %s", cfg.RedisURL, tt.redis)
			}
			if tt.env != "" && !strings.Contains(fmt.Sprint(cfg.LogValue()), "laravel_env") {
				t.Errorf("the logged config %v does not name the .env", cfg.LogValue())
			}
		})
	}
}

func TestLaravelEnv_Errors(t *testing.T) {
	// Not parallel: its many in-process runs would keep the others
	// waiting for appMu.
	const secret = "hunter2pw"
	base := "DB_DATABASE=app\nDB_USERNAME=u\nDB_PASSWORD=" + secret + "\nREDIS_PASSWORD=" + secret + "\n"
	missing := filepath.Join(t.TempDir(), ".env")
	tests := []struct {
		name, env string
		args      []string
		want      []string
	}{
		{"missing file", "", []string{"--laravel-env", missing}, []string{"--laravel-env: open " + missing, "hint: point --laravel-env at"}},
		{"no DB_DATABASE", "DB_USERNAME=u\nDB_PASSWORD=" + secret, nil, []string{"DB_DATABASE is not set", "hint: add DB_DATABASE="}},
		{"no DB_USERNAME", "DB_DATABASE=app\nDB_PASSWORD=" + secret, nil, []string{"DB_USERNAME is not set", "--mysql-user"}},
		{"bad DB_PORT", base + "DB_PORT=33o6\n", nil, []string{`DB_PORT "33o6" is not a port`, "hint: set DB_PORT to a number from 1 to 65535"}},
		{"bad REDIS_PORT", base + "REDIS_PORT=0\n", nil, []string{`REDIS_PORT "0" is not a port`}},
		{"bad REDIS_DB", base + "REDIS_DB=two\n", nil, []string{`REDIS_DB "two" is not a database number`}},
		{"bad REDIS_SCHEME", base + "REDIS_SCHEME=unix\n", nil, []string{`REDIS_SCHEME "unix" is neither tcp nor tls`}},
		{"another database", base + "DB_CONNECTION=pgsql\n", nil, []string{`DB_CONNECTION is "pgsql"`, "MySQL and MariaDB only"}},
		{"a database URL", base + "DB_URL=mysql://u:" + secret + "@h/app\n", nil, []string{"DB_URL is set", "give --mysql-dsn"}},
		{"a Redis URL", base + "REDIS_URL=redis://:" + secret + "@h\n", nil, []string{"REDIS_URL is set", "give it as --redis-url"}},
		{"a line Laravel refuses", "DB_DATABASE=app\n\nDB_PASSWORD=" + secret + " x\n", nil, []string{"line 3 (DB_PASSWORD): unexpected whitespace", "hint: Laravel cannot read this line either"}},
		{"an unclosed quote", "DB_DATABASE=app\nDB_PASSWORD=\"" + secret + "\nREDIS_HOST=h\n", nil, []string{"line 2 (DB_PASSWORD): a missing closing quote"}},
		{"a user in the DSN and --mysql-user", base, []string{"--mysql-dsn", "u:" + secret + "@tcp(h:3306)/app", "--mysql-user", "relay"}, []string{"--mysql-dsn names a user and --mysql-user is set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.env != "" {
				args = append([]string{"--laravel-env", writeFile(t, ".env", tt.env)}, args...)
			}
			out, errOut, code := run(t, append(args, "check")...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d\n%s%s", code, exitUsage, out, errOut)
			}
			for _, want := range tt.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("the output shows the password:\n%s%s", out, errOut)
			}
		})
	}
}

// TestLaravelEnv_CheckAndRun: a relay given only a Laravel .env (and the
// table) reaches a password-protected MariaDB user and a Redis ACL user,
// passes check and relays, and prints neither password.
func TestLaravelEnv_CheckAndRun(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	rs := testsvc.SharedRedis(t)
	rs.RequirePrivate(t, "create a Redis ACL user")
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), rs)
	ctx := context.Background()
	// Passwords with what a .env must quote and escape.
	const mysqlPW, redisPW = `my "s3cr#t" $x`, `re d1s#pw`
	id := crc32.ChecksumIEEE([]byte(env.Database))
	mysqlUser, redisUser := fmt.Sprintf("lv%d", id), fmt.Sprintf("lv%d", id)
	env.MariaDB.Exec(t, "CREATE USER '"+mysqlUser+"'@'%' IDENTIFIED BY '"+strings.ReplaceAll(mysqlPW, `"`, `\"`)+"'",
		"GRANT ALL ON `"+env.Database+"`.* TO '"+mysqlUser+"'@'%'",
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '"+mysqlUser+"'@'%'")
	t.Cleanup(func() { env.MariaDB.Exec(t, "DROP USER IF EXISTS '"+mysqlUser+"'@'%'") })
	if err := env.RDB.Do(ctx, "ACL", "SETUSER", redisUser, "on", ">"+redisPW, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.RDB.Do(context.Background(), "ACL", "DELUSER", redisUser) })
	redisDB := env.RedisURL[strings.LastIndex(env.RedisURL, "/")+1:]
	redisHost, redisPort, _ := strings.Cut(rs.Addr(), ":")

	dotEnv := writeFile(t, ".env", fmt.Sprintf(`APP_NAME=Shop
APP_KEY=base64:abc=
# the relay reads these
DB_CONNECTION=mysql
DB_HOST=%s
DB_PORT=%d
APP_DB=%s
DB_DATABASE=${APP_DB}
DB_USERNAME=%s
DB_PASSWORD="my \"s3cr#t\" \$x"

REDIS_HOST=%s
REDIS_PORT=%s
REDIS_USERNAME=%s
REDIS_PASSWORD='%s'
REDIS_DB=%s
`, env.MariaDB.Host(), env.MariaDB.Port(), env.Database, mysqlUser, redisHost, redisPort, redisUser, redisPW, redisDB))
	noSecrets := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, mysqlPW) || strings.Contains(out, redisPW) || strings.Contains(out, "s3cr#t") {
			t.Errorf("a password appears in the output:\n%s", out)
		}
	}

	out, errOut, code := run(t, "--laravel-env", dotEnv, "--table", env.Table, "--log-level", "debug", "check", "--mode", "binlog")
	if code != 0 || !strings.Contains(out, "PASS  mysql server") || !strings.Contains(out, "PASS  redis server") || !strings.Contains(out, "binlog mode: ready") {
		t.Errorf("check: exit %d, want MySQL and Redis reached with the .env's users\n%s%s", code, out, errOut)
	}
	noSecrets(t, out+errOut)

	serverID := strconv.Itoa(3000 + int(id%1000000))
	p := relaytest.StartProcess(t, binary(t), "--laravel-env", dotEnv, "--table", env.Table, "--log-format", "json", "--server-id", serverID, "run", "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10, RollbackRatio: 0.2}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Errorf("run: exit %d after SIGTERM, want 0", code)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	noSecrets(t, p.Out.String())
	if !p.Said(`"laravel_env":"`+dotEnv+`"`, 5*time.Second) {
		t.Errorf("the relay's start line does not name the .env:\n%s", relaytest.TailLines(p.Out.String(), 10))
	}
}
