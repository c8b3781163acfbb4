package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/settings"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// resolveArgs parses args with the real command line (NewApp) and returns
// the configuration `check` would start from, without running it.
func resolveArgs(t *testing.T, args ...string) (config, error) {
	t.Helper()
	app := NewApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	var cfg config
	var err error
	for _, cmd := range app.Commands {
		if cmd.Name == "check" {
			cmd.Action = func(c *cli.Context) error {
				cfg, err = loadConfig(c)
				return nil
			}
		}
	}
	defer parseAlone(app)()
	if runErr := app.Run(append([]string{"binlog-outbox"}, args...)); runErr != nil {
		t.Fatalf("%v: %v", args, runErr)
	}
	return cfg, err
}

// globalCase is one global setting with a value for the command line and
// another for the environment.
type globalCase struct {
	name string
	// base are further flags the setting needs (before the command).
	base []string
	// flag is the command line's value ("" for a bare switch), env the
	// environment's.
	flag, env string
	// effect, when not nil, is the value as the configuration uses it;
	// fromFlag and fromEnv are what it must be with each source.
	effect            func(config) string
	fromFlag, fromEnv string
}

// globalCases has a case for every global setting.
func globalCases(t *testing.T) []globalCase {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := newTestCA(t, dir, "ca")
	cert, key := ca.issue(t, "client", time.Now().Add(24*time.Hour), "client")
	copyOf := func(src, name string) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		return file(name, string(b))
	}
	caFile := filepath.Join(dir, "ca.pem")
	const dsn = "relay@tcp(db:3306)/app"
	sentinel := []string{"--redis-url", "redis://127.0.0.1:26379/0", "--redis-sentinel-master", "main"}
	addr := func(c config) string { return c.MySQL.Addr }
	dotenv := func(host string) string {
		return file(host+".env", "DB_HOST="+host+"\nDB_DATABASE=app\nDB_USERNAME=u\n")
	}
	return []globalCase{
		{name: "mysql-dsn", flag: "a@tcp(flag:3306)/app", env: "a@tcp(env:3306)/app", effect: addr, fromFlag: "flag:3306", fromEnv: "env:3306"},
		{name: "redis-url", flag: "redis://flag:6379/1", env: "redis://env:6379/2",
			effect: func(c config) string { return c.Redis.Options.Addr }, fromFlag: "flag:6379", fromEnv: "env:6379"},
		{name: "mysql-user", base: []string{"--mysql-dsn", "tcp(db:3306)/app"}, flag: "flaguser", env: "envuser",
			effect: func(c config) string { return c.MySQL.User }, fromFlag: "flaguser", fromEnv: "envuser"},
		{name: "mysql-password-file", base: []string{"--mysql-dsn", dsn}, flag: file("mysql-flag", "flagpw\n"), env: file("mysql-env", "envpw\n"),
			effect: func(c config) string { return c.MySQL.Passwd }, fromFlag: "flagpw", fromEnv: "envpw"},
		{name: "redis-password-file", base: []string{"--redis-url", "redis://r:6379/0"}, flag: file("redis-flag", "flagpw\n"), env: file("redis-env", "envpw\n"),
			effect: func(c config) string { return c.Redis.Options.Password }, fromFlag: "flagpw", fromEnv: "envpw"},
		{name: "redis-sentinel-master", base: []string{"--redis-url", "redis://127.0.0.1:26379/0"}, flag: "flagmaster", env: "envmaster",
			effect: func(c config) string { return c.Redis.Sentinel.Master }, fromFlag: "flagmaster", fromEnv: "envmaster"},
		{name: "redis-sentinel-user", base: sentinel, flag: "flaguser", env: "envuser",
			effect: func(c config) string { return c.Redis.Sentinel.Username }, fromFlag: "flaguser", fromEnv: "envuser"},
		{name: "redis-sentinel-password-file", base: sentinel, flag: file("sentinel-flag", "flagpw"), env: file("sentinel-env", "envpw"),
			effect: func(c config) string { return c.Redis.Sentinel.Password }, fromFlag: "flagpw", fromEnv: "envpw"},
		{name: "table", flag: "flag_outbox", env: "env_outbox", effect: func(c config) string { return c.Table }, fromFlag: "flag_outbox", fromEnv: "env_outbox"},
		{name: "column", flag: "payload=flag_body", env: "payload=env_body",
			effect: func(c config) string { return c.Mapping["payload"] }, fromFlag: "flag_body", fromEnv: "env_body"},
		{name: "extra-column", flag: "tenant", env: "trace",
			effect: func(c config) string { return c.Extra[0].Column }, fromFlag: "tenant", fromEnv: "trace"},
		// The preset names its table; the default source leaves "outbox".
		{name: "source", flag: "symfony-doctrine", env: "outbox", effect: func(c config) string { return c.Table }, fromFlag: "messenger_messages", fromEnv: "outbox"},
		{name: "log-format", flag: "json", env: "text"},
		{name: "log-level", flag: "debug", env: "warn"},
		{name: "server-id", flag: "11", env: "22", effect: func(c config) string { return fmt.Sprint(c.ServerID) }, fromFlag: "11", fromEnv: "22"},
		// A range spreads from 1001 (1001 to 1003); without one the id is
		// the default taken from the host name and the position key.
		{name: "server-id-range", flag: "3", env: "1", effect: func(c config) string { return fmt.Sprint(c.ServerID >= 1001 && c.ServerID < 1004) },
			fromFlag: "true", fromEnv: "false"},
		{name: "laravel-env", flag: dotenv("flaghost"), env: dotenv("envhost"), effect: addr, fromFlag: "flaghost:3306", fromEnv: "envhost:3306"},
		{name: "laravel-redis-prefix", flag: "flag_database_", env: "env_database_",
			effect: func(c config) string { return c.LaravelRedisPrefix }, fromFlag: "flag_database_", fromEnv: "env_database_"},
		{name: "redis-cluster", base: []string{"--redis-url", "redis://127.0.0.1:7000"}, flag: "false", env: "true",
			effect: func(c config) string { return fmt.Sprint(c.RedisCluster != nil) }, fromFlag: "false", fromEnv: "true"},
		{name: "mysql-tls-ca", base: []string{"--mysql-dsn", dsn}, flag: caFile, env: copyOf(caFile, "ca2.pem")},
		{name: "mysql-tls-cert", base: []string{"--mysql-dsn", dsn, "--mysql-tls-key", key}, flag: cert, env: copyOf(cert, "cert2.pem")},
		{name: "mysql-tls-key", base: []string{"--mysql-dsn", dsn, "--mysql-tls-cert", cert}, flag: key, env: copyOf(key, "key2.pem")},
		{name: "mysql-tls-server-name", base: []string{"--mysql-dsn", dsn}, flag: "flag.db", env: "env.db",
			effect: func(c config) string { return c.MySQL.TLS.ServerName }, fromFlag: "flag.db", fromEnv: "env.db"},
		{name: "redis-tls-ca", base: []string{"--redis-url", "rediss://r:6380/0"}, flag: caFile, env: copyOf(caFile, "ca3.pem")},
		{name: "redis-tls-cert", base: []string{"--redis-url", "rediss://r:6380/0", "--redis-tls-key", key}, flag: cert, env: copyOf(cert, "cert3.pem")},
		{name: "redis-tls-key", base: []string{"--redis-url", "rediss://r:6380/0", "--redis-tls-cert", cert}, flag: key, env: copyOf(key, "key3.pem")},
		{name: "redis-tls-server-name", base: []string{"--redis-url", "rediss://r:6380/0"}, flag: "flag.cache", env: "env.cache",
			effect: func(c config) string { return c.Redis.Options.TLSConfig.ServerName }, fromFlag: "flag.cache", fromEnv: "env.cache"},
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// clearGlobalEnv unsets every global setting's environment variable for the
// test, so that the caller's environment does not leak in.
func clearGlobalEnv(t *testing.T) {
	for _, f := range settings.Flags() {
		t.Setenv(f.Env, "")
		os.Unsetenv(f.Env)
	}
}

// TestGlobalFlags_CommandLineWins: every global setting, given before the
// command, after it, in the environment only, or in the environment and on
// the command line before or after the command: the command line wins
// wherever it stands, and the environment wins over the default.
func TestGlobalFlags_CommandLineWins(t *testing.T) {
	cases := globalCases(t)
	var covered []string
	for _, gc := range cases {
		covered = append(covered, gc.name)
	}
	for _, f := range settings.Flags() {
		if !slices.Contains(covered, f.Name) {
			t.Errorf("no case for the global setting --%s", f.Name)
		}
	}
	positions := []struct {
		name         string
		env, flag    bool
		before       bool
		wantSource   settings.Source
		wantFromFlag bool
	}{
		{"flag before the command", false, true, true, settings.CommandLine, true},
		{"flag after the command", false, true, false, settings.CommandLine, true},
		{"environment only", true, false, false, settings.Environment, false},
		{"environment and flag before the command", true, true, true, settings.CommandLine, true},
		{"environment and flag after the command", true, true, false, settings.CommandLine, true},
	}
	for _, gc := range cases {
		for _, pos := range positions {
			t.Run(gc.name+"/"+pos.name, func(t *testing.T) {
				clearGlobalEnv(t)
				if pos.env {
					t.Setenv(settings.Env(gc.name), gc.env)
				}
				flag := []string{"--" + gc.name + "=" + gc.flag}
				args := append([]string(nil), gc.base...)
				switch {
				case pos.flag && pos.before:
					args = append(append(args, flag...), "check")
				case pos.flag:
					args = append(append(args, "check"), flag...)
				default:
					args = append(args, "check")
				}
				if gc.name != "mysql-dsn" && gc.name != "laravel-env" && !slices.Contains(gc.base, "--mysql-dsn") {
					args = append([]string{"--mysql-dsn", "relay@tcp(db:3306)/app"}, args...)
				}
				cfg, err := resolveArgs(t, args...)
				if err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				want := gc.env
				if pos.wantFromFlag {
					want = gc.flag
				}
				if got := cfg.Values[gc.name]; !slices.Equal(got.Values, []string{want}) || got.Source != pos.wantSource {
					t.Errorf("%v: --%s resolved to %q from the %s, want %q from the %s", args, gc.name, got.Values, got.Source, want, pos.wantSource)
				}
				if gc.effect == nil {
					return
				}
				wantEffect := gc.fromEnv
				if pos.wantFromFlag {
					wantEffect = gc.fromFlag
				}
				if got := gc.effect(cfg); got != wantEffect {
					t.Errorf("%v: --%s takes effect as %q, want %q", args, gc.name, got, wantEffect)
				}
			})
		}
	}
}

// TestGlobalFlags_DotEnvBelowEnvironment: the .env of --laravel-env gives
// MySQL and Redis only where neither the command line nor the environment
// does, whatever the flag's position.
func TestGlobalFlags_DotEnvBelowEnvironment(t *testing.T) {
	dotEnv := writeFile(t, ".env", "DB_HOST=dotenv\nDB_DATABASE=app\nDB_USERNAME=u\nREDIS_HOST=dotenv\n")
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		mysql     string
		redisAddr string
	}{
		{"the .env alone", nil, []string{"check"}, "dotenv:3306", "dotenv:6379"},
		{"environment over the .env", map[string]string{settings.Env("mysql-dsn"): "u@tcp(env:3306)/app", settings.Env("redis-url"): "redis://env:6379/0"},
			[]string{"check"}, "env:3306", "env:6379"},
		{"flags before the command over the environment and the .env",
			map[string]string{settings.Env("mysql-dsn"): "u@tcp(env:3306)/app", settings.Env("redis-url"): "redis://env:6379/0"},
			[]string{"--mysql-dsn", "u@tcp(flag:3306)/app", "--redis-url", "redis://flag:6379/0", "check"}, "flag:3306", "flag:6379"},
		{"flags after the command over the environment and the .env",
			map[string]string{settings.Env("mysql-dsn"): "u@tcp(env:3306)/app", settings.Env("redis-url"): "redis://env:6379/0"},
			[]string{"check", "--mysql-dsn", "u@tcp(flag:3306)/app", "--redis-url", "redis://flag:6379/0"}, "flag:3306", "flag:6379"},
		{"the .env from the environment", map[string]string{settings.Env("laravel-env"): dotEnv}, []string{"check"}, "dotenv:3306", "dotenv:6379"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearGlobalEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.env[settings.Env("laravel-env")] == "" {
				args = append([]string{"--laravel-env", dotEnv}, args...)
			}
			cfg, err := resolveArgs(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MySQL.Addr != tt.mysql || cfg.Redis.Options.Addr != tt.redisAddr {
				t.Errorf("%v: MySQL %s, Redis %s; want %s, %s", args, cfg.MySQL.Addr, cfg.Redis.Options.Addr, tt.mysql, tt.redisAddr)
			}
		})
	}
}

// TestGlobalFlags_BadEnvironment: an environment variable of a number or a
// switch that does not parse is refused, naming the variable.
func TestGlobalFlags_BadEnvironment(t *testing.T) {
	for name, value := range map[string]string{"server-id": "one", "redis-cluster": "yes please"} {
		clearGlobalEnv(t)
		t.Setenv(settings.Env(name), value)
		_, err := resolveArgs(t, "--mysql-dsn", "u@tcp(h:3306)/app", "check")
		if err == nil || !strings.Contains(err.Error(), settings.Env(name)) {
			t.Errorf("%s=%q: %v, want an error naming the variable", settings.Env(name), value, err)
		}
	}
}

// TestCheck_GlobalFlagsBeforeCommandWinOverEnvironment: with the
// environment naming an unreachable MySQL and Redis and a table that does
// not exist, `--mysql-dsn X --redis-url Y --table Z check` checks X, Y and
// Z, the servers and table the command line names.
func TestCheck_GlobalFlagsBeforeCommandWinOverEnvironment(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	t.Setenv(settings.Env("mysql-dsn"), fmt.Sprintf("relay:pw@tcp(127.0.0.1:%d)/elsewhere", closedPort(t)))
	t.Setenv(settings.Env("redis-url"), fmt.Sprintf("redis://127.0.0.1:%d/0", closedPort(t)))
	t.Setenv(settings.Env("table"), "no_such_outbox")
	for _, args := range [][]string{
		{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--table", env.Table, "check", "--mode", "binlog", "--timeout", "10s"},
		{"check", "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--table", env.Table, "--mode", "binlog", "--timeout", "10s"},
	} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d, want 0\n%s%s", args[:7], code, out, errOut)
		}
		for _, want := range []string{"PASS  mysql server", "PASS  redis server", "binlog mode: ready"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args[:7], want, out)
			}
		}
	}
}
