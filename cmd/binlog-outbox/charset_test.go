package main

import (
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestCheckAndRun_UnconvertibleCharset checks that a relayed text column in
// a character set binlog mode cannot convert to UTF-8 as the server does
// fails `check` with the fix, and that `run` refuses to start with the same
// words, in either mode: the modes would relay different bytes.
func TestCheckAndRun_UnconvertibleCharset(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	if _, err := env.DB.Exec("ALTER TABLE `" + env.Table + "` MODIFY event_type VARCHAR(255) CHARACTER SET sjis NOT NULL"); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	want := []string{
		"column event_type is in character set sjis, which binlog mode cannot convert to UTF-8",
		"ALTER TABLE `outbox` CONVERT TO CHARACTER SET utf8mb4",
		"ALTER TABLE `outbox` MODIFY `event_type` VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL",
	}
	checkAndRunFail(t, global, []string{"FAIL  outbox table"}, want, "\x00no secret")

	out, code := runProcess(t, append(global, "run", "--mode", "poll")...)
	if code == 0 {
		t.Errorf("run --mode poll: exit 0, want a refusal\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("run --mode poll does not say %q:\n%s", w, out)
		}
	}
}
