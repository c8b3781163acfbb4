package main

import (
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestCommands_RedisDatabaseOutOfRange: a --redis-url whose database the
// server does not have (issue 41's /99 on a default Redis; the test servers
// have 10000) gets the same hint from every command, as check and run give
// it (TestRun_StartFailuresHint), and exits 2, a configuration error.
func TestCommands_RedisDatabaseOutOfRange(t *testing.T) {
	// Its database is its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", "redis://" + env.Redis.Addr() + "/10000"}
	const fix = "Redis has no database 10000"
	for _, cmd := range [][]string{
		{"status"}, {"verify"}, {"repair"}, {"position", "show"}, {"position", "set", "--start-from", "binlog.000001:4"},
		{"dead-letters", "list"}, {"backfill", "--stream", "outbox:new"}, {"mark-appended"}, {"cleanup", "--older-than", "7d"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			_, errOut, code := run(t, append(global, cmd...)...)
			if code != exitUsage || !strings.Contains(hintLine(errOut), fix) || !strings.Contains(errOut, "DB index is out of range") {
				t.Errorf("exit %d, want %d with Redis's error and a hint saying %q\n%s", code, exitUsage, fix, errOut)
			}
		})
	}
	// check's report carries the same fix.
	if out, errOut, code := run(t, append(global, "check")...); code == exitOK || !strings.Contains(out+errOut, fix) {
		t.Errorf("check: exit %d, want a failure saying %q\n%s%s", code, fix, out, errOut)
	}
}
