package main

import (
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// badValues are values outside each rule's range.
var badValues = map[string][]string{
	"partitions":             {"0", "-3", "65537"},
	"stream":                 {"", " "},
	"dead-letter-stream":     {""},
	"max-batch-events":       {"0", "-1", "100001"},
	"max-tx-bytes":           {"0", "-1", "1", "65535"},
	"event-cache-bytes":      {"0", "-1"},
	"heartbeat":              {"0", "-1s", "500us", "5000000s"},
	"lease-ttl":              {"0", "50ms"},
	"lease-renew":            {"0", "-1s"},
	"lease-step-down":        {"-1s"},
	"start-from":             {"yesterday", "mysql-bin.000001"},
	"metrics-addr":           {"9108", "localhost", ":99999"},
	"trim":                   {"yes", ""},
	"trim-interval":          {"0", "-1s"},
	"max-len":                {"-1"},
	"probe-interval":         {"0"},
	"ready-max-stall":        {"0"},
	"group-metrics-interval": {"0"},
	"group-idle-threshold":   {"0", "-1m"},
	"poll-interval":          {"0", "-100ms"},
	"batch-size":             {"0", "-5", "100001"},
	"max-batch-bytes":        {"0"},
	"on-sent":                {"archive", ""},
	"dedupe-window":          {"-1s"},
	"max-payload-bytes":      {"0"},
	"shutdown-grace":         {"0"},
	"poll-list-interval":     {"0"},
	"timeout":                {"0", "-1s"},
	"rate":                   {"-1", "1000001"},
	"chunk-rows":             {"0", "-1"},
	"page-entries":           {"0"},
	"accept-foreign":         {"-1"},
	"snapshot":               {"later", ""},
	"batch":                  {"0", "10001"},
	"pause":                  {"-1s"},
	"wait":                   {"-1s"},
	"mode":                   {"fast", ""},
	"format":                 {"xml"},
}

// commandsWith lists the commands (by their path) that take the flag of r.
func commandsWith(r relay.Range) [][]string {
	var out [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string(nil), path...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
			} else if commandFlag(c, r.Flag) != nil && r.For(strings.Join(p, " ")) {
				out = append(out, p)
			}
		}
	}
	walk(nil, NewApp().Commands)
	return out
}

// TestValidateFlags_Refused: every value outside a flag's range is refused
// by every command that takes the flag, before it connects anywhere, with
// exit code 2 and an error naming the flag and what it takes.
func TestValidateFlags_Refused(t *testing.T) {
	// Not parallel: its many in-process runs would keep the others
	// waiting for appMu.
	for _, r := range relay.Ranges() {
		bad, ok := badValues[r.Flag]
		if !ok {
			t.Errorf("no bad values for --%s", r.Flag)
			continue
		}
		cmds := commandsWith(r)
		if len(cmds) == 0 {
			t.Errorf("no command takes --%s", r.Flag)
		}
		for _, cmd := range cmds {
			for _, v := range bad {
				args := append(append([]string(nil), cmd...), "--"+r.Flag+"="+v)
				_, errOut, code := run(t, args...)
				if code != exitUsage || !strings.Contains(errOut, "--"+r.Flag) || !strings.Contains(errOut, "hint:") || strings.Contains(errOut, "no MySQL DSN") {
					t.Errorf("%v: exit %d, want %d and an error naming --%s with a hint:\n%s", args, code, exitUsage, r.Flag, errOut)
				}
			}
		}
	}
}

// TestValidateFlags_DefaultsPass: every command's defaults are in range:
// with its action replaced, each command runs.
func TestValidateFlags_DefaultsPass(t *testing.T) {
	clearGlobalEnv(t)
	app := NewApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	var paths [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string(nil), path...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			c.Action = func(*cli.Context) error { return nil }
			paths = append(paths, p)
		}
	}
	walk(nil, app.Commands)
	// One app for every path: appMu for all of them, the actions are no-ops.
	appMu.Lock()
	defer appMu.Unlock()
	for _, p := range paths {
		if err := app.Run(append([]string{"binlog-outbox"}, p...)); err != nil {
			t.Errorf("%v: %v, want the defaults to pass", p, err)
		}
	}
}

// TestCheckAndRun_RefuseTheSameFlags: against real servers, check and run
// refuse a value out of range in the same words, with exit code 2, where
// check used to pass it and run to relay with the default.
func TestCheckAndRun_RefuseTheSameFlags(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--table", env.Table}
	for _, flag := range [][]string{{"--partitions", "-3"}, {"--partitions", "0"}, {"--stream", ""}, {"--dead-letter-stream", ""}} {
		_, checkErr, checkCode := run(t, append(append(append([]string(nil), global...), "check", "--mode", "poll"), flag...)...)
		_, runErr, runCode := run(t, append(append(append([]string(nil), global...), "run", "--mode", "poll"), flag...)...)
		if checkCode != exitUsage || runCode != exitUsage {
			t.Errorf("%v: check exit %d, run exit %d; want %d for both\ncheck: %s\nrun: %s", flag, checkCode, runCode, exitUsage, checkErr, runErr)
		}
		if checkErr != runErr || !strings.Contains(checkErr, flag[0]) {
			t.Errorf("%v: check and run say different things, or do not name the flag:\ncheck: %s\nrun: %s", flag, checkErr, runErr)
		}
	}
}

// commandFlag is the command's flag of that name, nil if it has none.
func commandFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		if f.Names()[0] == name {
			return f
		}
	}
	return nil
}
