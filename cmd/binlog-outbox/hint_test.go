package main

import (
	"context"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRun_HintOnce runs the relay in-process against Redis at maxmemory, so
// that it retries an error with a hint, then gives it a stored position it
// must stop at, with another hint. Each hint must reach the operator exactly
// once: the retried one as a log attribute, the final one on the CLI's
// "hint:" line, and neither inside an error text.
func TestRun_HintOnce(t *testing.T) {
	// Its Redis and database are its own, its server id too.
	t.Parallel()
	rs := testsvc.StartRedis(t, testsvc.RedisOptions{})
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), rs)
	ctx := context.Background()
	out := &logging.Buffer{}
	app := NewApp()
	app.Writer, app.ErrWriter = out, out
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	code := make(chan int, 1)
	parsed := parseAlone(app)
	go func() {
		defer parsed()
		err := app.RunContext(runCtx, []string{"binlog-outbox", "--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL,
			"--log-format", "json", "--server-id", strconv.Itoa(4000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000)),
			"run", "--mode", "binlog"})
		code <- reportError(out, err)
	}()
	waitStoredPosition(t, env, posKey(env))

	// Fill Redis well over maxmemory, then give the relay rows to append.
	relaytest.FillRedis(ctx, t, env)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 3}, relaytest.NewProduced())
	relaytest.WaitFor(t, 20*time.Second, "the relay to hit OOM", func() bool {
		return strings.Contains(out.String(), "OOM command not allowed")
	})
	time.Sleep(2 * time.Second) // retries at 100ms, 200ms, 400ms, 800ms
	// A stored position that does not decode is one to stop at.
	env.RDB.ConfigSet(ctx, "maxmemory", "0")
	if err := env.RDB.Set(ctx, posKey(env), "not a position", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var exit int
	select {
	case exit = <-code:
	case <-time.After(45 * time.Second):
		t.Fatalf("the relay did not stop at the bad position:\n%s", out.String())
	}
	got := out.String()
	if exit == 0 {
		t.Fatalf("exit 0 after a bad stored position:\n%s", got)
	}
	const oomHint = "Redis reached maxmemory"
	if n := strings.Count(got, oomHint); n != 1 {
		t.Errorf("the OOM hint appears %d times, want once:\n%s", n, got)
	}
	var hintLines []string
	for _, l := range strings.Split(got, "\n") {
		if h, ok := strings.CutPrefix(l, "hint: "); ok {
			hintLines = append(hintLines, h)
		}
		if strings.HasPrefix(l, "error: ") && strings.Contains(l, "(hint:") {
			t.Errorf("the error line carries a hint: %s", l)
		}
	}
	if len(hintLines) != 1 || hintLines[0] == "" {
		t.Fatalf("hint lines %q, want one:\n%s", hintLines, got)
	}
	if n := strings.Count(got, hintLines[0]); n != 1 {
		t.Errorf("the final hint appears %d times, want once (on its own line):\n%s", n, got)
	}
}
