package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// runUntil runs the relay's binary with args, as an operator does, but
// gives up after d: a relay that does not stop at its start is a failure,
// not a hang. A process of its own, not the app in-process: the refusals
// come from the same code, and the in-process runs (appMu) stay short.
func runUntil(t *testing.T, d time.Duration, args ...string) (stdout, stderr string, code int, stopped bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	stopped = ctx.Err() == nil
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run %s: %v", binary(t), err)
	}
	return out.String(), errb.String(), code, stopped
}

// wrapped is run's error for a requirement check reports on a line of its
// own: "requirements not met[ for <mode> mode]: <name> (<detail>)".
var wrapped = regexp.MustCompile(`^requirements not met(?: for \w+ mode)?: (.+?) \((.*)\)$`)

// sameRefusal runs check and then run with the same flags, and wants run to
// stop at its start with one error and a hint, and check to have failed
// first with the same words: the error (or the requirement and its detail)
// on a FAIL line, the hint as its fix. It returns run's hint.
func sameRefusal(t *testing.T, global, flags []string) string {
	t.Helper()
	checkOut, checkErr, checkCode := run(t, append(append(global, "check"), flags...)...)
	_, runErr, runCode, stopped := runUntil(t, 60*time.Second, append(append(global, "run"), flags...)...)
	if !stopped {
		t.Fatalf("run did not stop at its start:\n%s", relaytest.TailLines(runErr, 20))
	}
	var errLine, hint string
	for _, l := range strings.Split(runErr, "\n") {
		if e, ok := strings.CutPrefix(l, "error: "); ok {
			errLine = e
		}
		if h, ok := strings.CutPrefix(l, "hint: "); ok {
			hint = h
		}
	}
	if runCode == 0 || errLine == "" || hint == "" {
		t.Fatalf("run: exit %d, error %q, hint %q; want a refusal with a hint\n%s", runCode, errLine, hint, runErr)
	}
	if checkCode == 0 {
		t.Errorf("check: exit 0 where run refuses with %q\n%s%s", errLine, checkOut, checkErr)
	}
	if strings.Contains(checkErr, "error: "+errLine+"\nhint: "+hint+"\n") {
		// Refused as the flags are read, by both alike.
		return hint
	}
	want := []string{errLine}
	if m := wrapped.FindStringSubmatch(errLine); m != nil {
		want = []string{"FAIL  " + m[1], m[2]}
	}
	for _, w := range append(want, "fix: "+hint) {
		if !strings.Contains(checkOut, w) {
			t.Errorf("check does not say %q, which run stops with:\ncheck:\n%s%s\nrun:\n%s", w, checkOut, checkErr, runErr)
		}
	}
	return hint
}

// TestCheckRun_SameRefusals: each value that stops run at its start makes
// check fail first, with run's error and its hint as the fix.
func TestCheckRun_SameRefusals(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		global []string
		flags  []string
		setup  func(t *testing.T)
	}{
		{name: "several tables without a position key", global: []string{"--table", env.Table + "*"}},
		{name: "unknown placeholder", flags: []string{"--stream", "outbox:{tenant}"}},
		{name: "events into the dead-letter stream", flags: []string{"--stream", "events", "--dead-letter-stream", "events"}},
		{name: "lease renewed too rarely", flags: []string{"--lease-ttl", "2s", "--lease-renew", "1s"}},
		{name: "bad trim", flags: []string{"--trim", "sometimes"}},
		{name: "bad start-from", flags: []string{"--start-from", "yesterday"}},
		{name: "start-from a file the server lacks", flags: []string{"--start-from", "nosuch-bin.000042:4"}},
		{name: "start-from another flavor's GTID set", flags: []string{"--start-from", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"}},
		{name: "bad messenger-unmapped", flags: []string{"--format", "symfony-messenger", "--messenger-unmapped", "drop"}},
		{name: "position key holds a list", setup: func(t *testing.T) {
			if err := env.RDB.RPush(ctx, posKey(env), "x").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.RDB.Del(ctx, posKey(env)) })
		}},
		{name: "position marked by a repair", setup: func(t *testing.T) {
			b := position.Binlog{Flavor: position.FlavorMariaDB, ServerID: 1, File: "mysql-bin.000001", Pos: 4, UpdatedAt: time.Now().UTC()}
			if err := env.RDB.Set(ctx, posKey(env), b.HeldBy("repair elsewhere/42", time.Now()).Encode(), 0).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.RDB.Del(ctx, posKey(env)) })
		}},
		{name: "mode key holds a list", setup: func(t *testing.T) {
			key := "binlog-outbox:mode:" + env.Database + "." + env.Table
			if err := env.RDB.RPush(ctx, key, "x").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.RDB.Del(ctx, key) })
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t)
			}
			for _, m := range []string{"binlog", "auto"} {
				sameRefusal(t, append(slices.Clone(global), tt.global...), append([]string{"--mode", m}, tt.flags...))
			}
		})
	}
	// docs/symfony.md gives check the flags of run, --ensure-group among them.
	out, errOut, code := run(t, append(global, "check", "--mode", "binlog", "--ensure-group", "billing", "--lease-ttl", "9s", "--trim", "acked")...)
	if code != 0 || !strings.Contains(out, "PASS  relay settings") || !strings.Contains(out, "PASS  redis keys") {
		t.Errorf("check with run's flags: exit %d, want 0 with the settings and keys passed\n%s%s", code, out, errOut)
	}
}

// TestRun_StartFailuresHint: run against servers it cannot use stops with
// the cause and, on a hint line, the fix check prints for it.
func TestRun_StartFailuresHint(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	m := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t))
	locked := testsvc.StartRedis(t, testsvc.RedisOptions{})
	if err := locked.Client(t, locked.URL(0)).ConfigSet(context.Background(), "requirepass", "right-pw").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		dsn, url string
		more     []string
		fix      string
	}{
		{"unreachable mysql", fmt.Sprintf("relay:pw@tcp(127.0.0.1:%d)/app", closedPort(t)), env.RedisURL, nil, "check host and port in --mysql-dsn"},
		{"wrong mysql password", m.UserDSN(m.User(), "wrong-pw", env.Database), env.RedisURL, nil, "the password in --mysql-dsn"},
		{"unreachable redis", env.MariaDB.DSN(env.Database), fmt.Sprintf("redis://127.0.0.1:%d/0", closedPort(t)), nil, "check host, port and password in --redis-url"},
		{"wrong redis password", env.MariaDB.DSN(env.Database), "redis://:wrong-pw@" + locked.Addr() + "/0", nil, "password"},
		{"missing table", env.MariaDB.DSN(env.Database), env.RedisURL, []string{"--table", "no_such_outbox"}, "binlog-outbox schema apply"},
		// Issue 41's /99 on a default Redis (16 databases); the test
		// servers have 10000.
		{"redis database out of range", env.MariaDB.DSN(env.Database), "redis://" + env.Redis.Addr() + "/10000", nil, "Redis has no database 10000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			global := append([]string{"--mysql-dsn", tt.dsn, "--redis-url", tt.url}, tt.more...)
			hint := sameRefusal(t, global, []string{"--mode", "binlog"})
			if !strings.Contains(hint, tt.fix) {
				t.Errorf("hint %q, want it to say %q", hint, tt.fix)
			}
		})
	}
}

// runOnlyFlags are the flags of run whose values check has nothing to check
// at start: they tune the running relay (periods, batch and buffer sizes,
// the metrics listener), and their ranges are refused as the flags are read,
// by check and run alike. Every other flag of run shapes the start, and
// check reports on it (preflight.Start, preflight.Config).
var runOnlyFlags = []string{
	"heartbeat", "metrics-addr", "max-batch-events", "max-tx-bytes", "lease-step-down", "event-cache-bytes",
	"probe-interval", "ready-max-stall", "group-metrics", "group-metrics-interval", "group-idle-threshold", "poll-interval", "batch-size", "max-batch-bytes", "max-payload-bytes",
	"shutdown-grace", "poll-list-interval",
}

// startFlagsChecked are the flags of run whose values check validates as
// run uses them at start.
var startFlagsChecked = []string{
	"mode", "position-key", "start-from", "lease", "lease-ttl", "lease-renew",
	"stream", "partitions", "dead-letter-stream", "ensure-group", "trim", "trim-interval", "max-len",
	"format", "messenger-class", "messenger-class-file", "messenger-unmapped", "messenger-stamp",
	"on-sent", "dedupe-window",
}

// TestCheck_AcceptsEveryRunFlag: check takes every flag of run, so that
// the flags a user gives run can be given to check (docs/symfony.md does so
// with --ensure-group), and each flag of run is either checked at start or
// listed as one that needs no check.
func TestCheck_AcceptsEveryRunFlag(t *testing.T) {
	app := NewApp()
	flagsOf := func(name string) []string {
		for _, c := range app.Commands {
			if c.Name == name {
				var out []string
				for _, f := range c.Flags {
					out = append(out, f.Names()[0])
				}
				return out
			}
		}
		t.Fatalf("no command %s", name)
		return nil
	}
	checkFlags, runFlags := flagsOf("check"), flagsOf("run")
	for _, f := range append(slices.Clone(runOnlyFlags), startFlagsChecked...) {
		if !slices.Contains(runFlags, f) {
			t.Errorf("--%s is listed but is no flag of run", f)
		}
	}
	for _, f := range runFlags {
		if !slices.Contains(checkFlags, f) {
			t.Errorf("check does not take --%s of run", f)
		}
		if !isGlobalFlag(f) && !slices.Contains(runOnlyFlags, f) && !slices.Contains(startFlagsChecked, f) {
			t.Errorf("--%s of run is neither checked at start nor listed in runOnlyFlags", f)
		}
	}
}
