package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

const (
	onOneProcessor    = `"msg":"caught up: running on one processor"`
	onEveryProcessor  = `"msg":"catching up: running on every processor"`
	unmappedPages     = `"msg":"unmapped the executable's start-up pages"`
	procsBacklogRows  = 200
	procsBacklogDelay = 2500 * time.Millisecond
)

// The relay binary runs on one processor while it is caught up and on
// every processor while it catches up (internal/tuning/procs.go): it starts on one,
// rows committed seconds before it started are a catch-up, and once they
// are relayed it is caught up again. With GOMAXPROCS in the environment,
// or run in-process, it never changes it. Likewise only the relay binary
// unmaps its start-up pages (internal/tuning/exepages_linux.go), and relays every
// row after it.
func TestRun_ProcessorsFollowTheCatchUp(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	// The runtime's default in this machine or container, which the relay
	// has without GOMAXPROCS: on one processor it has none to give up.
	defaultProcs := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		defaultProcs = runtime.NumCPU()
	}
	for _, tt := range []struct {
		name       string
		gomaxprocs string
		inProcess  bool // app.Run in the test binary, as a program embedding it would
		switches   bool
	}{
		{"default", "", false, defaultProcs > 1},
		{"GOMAXPROCS set", "2", false, false},
		{"in-process", "", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A server of its own: on the shared one, other tests' commits
			// would be read with the backlog and make its batch look live.
			env := relaytest.NewEnv(t, testsvc.StartMariaDB(t, testsvc.MariaDBOptions{}), testsvc.SharedRedis(t))
			from := env.MariaDB.GTIDBinlogPos(t)
			rec := relaytest.NewProduced()
			relaytest.Produce(context.Background(), t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: procsBacklogRows / 2}, rec)
			time.Sleep(procsBacklogDelay) // older than the 2s a catch-up shows

			args := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL,
				"--log-format", "json", "--log-level", "debug", "run", "--mode", "binlog", "--lease=false", "--start-from", from}
			if tt.inProcess {
				procs := runtime.GOMAXPROCS(0)
				out := &logging.Buffer{}
				app := NewApp()
				app.Writer, app.ErrWriter = out, out
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				parsed := parseAlone(app)
				go func() {
					defer parsed()
					done <- app.RunContext(ctx, append([]string{"binlog-outbox"}, args...))
				}()
				relaytest.WaitDelivered(t, env, rec, 30*time.Second)
				time.Sleep(time.Second)
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if got := out.String(); strings.Contains(got, onOneProcessor) || strings.Contains(got, onEveryProcessor) || strings.Contains(got, unmappedPages) || runtime.GOMAXPROCS(0) != procs {
					t.Fatalf("the relay run in-process changed the process's processors or pages (GOMAXPROCS %d, then %d):\n%s", procs, runtime.GOMAXPROCS(0), got)
				}
				return
			}
			cmd := exec.Command(binary(t), args...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOMAXPROCS=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			if tt.gomaxprocs != "" {
				cmd.Env = append(cmd.Env, "GOMAXPROCS="+tt.gomaxprocs)
			}
			p := relaytest.StartCommand(t, cmd)
			relaytest.WaitDelivered(t, env, rec, 30*time.Second)
			if runtime.GOOS == "linux" && !strings.Contains(p.Out.String(), unmappedPages) {
				t.Errorf("no line says the relay binary unmapped its start-up pages")
			}
			if !tt.switches {
				// Long enough for the looks that would have switched.
				time.Sleep(time.Second)
				if out := p.Out.String(); strings.Contains(out, onOneProcessor) || strings.Contains(out, onEveryProcessor) {
					t.Fatalf("GOMAXPROCS=%q (default %d), and the relay changed its processors:\n%s", tt.gomaxprocs, defaultProcs, out)
				}
				return
			}
			if !p.Said(onEveryProcessor, 5*time.Second) {
				t.Fatalf("no line says the relay runs on every processor for the catch-up")
			}
			if out := p.Out.String(); !strings.Contains(out[:strings.Index(out, onEveryProcessor)], onOneProcessor) {
				t.Errorf("no line says the relay started on one processor")
			}
			relaytest.WaitFor(t, 5*time.Second, "the relay to run on one processor after the catch-up", func() bool {
				out := p.Out.String()
				i := strings.Index(out, onEveryProcessor)
				return strings.Contains(out[i:], onOneProcessor)
			})
		})
	}
}
