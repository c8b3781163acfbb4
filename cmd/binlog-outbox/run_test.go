package main

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the relay once per test binary: crash tests need a process
// they can kill -9.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bo-bin-")
		if err != nil {
			buildErr = err
			return
		}
		testsvc.AtExit(func() { os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "binlog-outbox")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// relayProc is the relay running as a separate process.
type relayProc struct {
	*relaytest.Process
	peakKB atomic.Int64
}

func startRelay(t testing.TB, env *relaytest.Env, args ...string) *relayProc {
	t.Helper()
	return startRelayDSN(t, env, env.MariaDB.DSN(env.Database), args...)
}

// startRelayDSN is startRelay with the relay connecting to the server dsn
// names: another server than env's, or a proxy in front of one.
func startRelayDSN(t testing.TB, env *relaytest.Env, dsn string, args ...string) *relayProc {
	t.Helper()
	return startRelayGlobal(t, env, dsn, nil, args...)
}

// startRelayGlobal is startRelayDSN with more global flags, given after the
// defaults so that they win (another --server-id, say).
func startRelayGlobal(t testing.TB, env *relaytest.Env, dsn string, global []string, args ...string) *relayProc {
	t.Helper()
	full := []string{"--mysql-dsn", dsn, "--redis-url", env.RedisURL, "--log-format", "json",
		// A fixed id per test, as in production: a restarted relay meets
		// its own previous connection still registered on the server.
		"--server-id", strconv.Itoa(3000 + int(crc32.ChecksumIEEE([]byte(env.Database))%1000000))}
	full = append(full, global...)
	if env.Cluster != nil {
		full = append(full, "--redis-cluster")
	}
	full = append(append(full, "run"), args...)
	p := &relayProc{Process: relaytest.StartProcess(t, binary(t), full...)}
	go p.watchMemory()
	return p
}

// watchMemory records the process's peak resident set (VmHWM).
func (p *relayProc) watchMemory() {
	path := fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid)
	for {
		select {
		case <-p.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				if kb > p.peakKB.Load() {
					p.peakKB.Store(kb)
				}
			}
		}
		f.Close()
	}
}

func waitStoredPosition(t testing.TB, env *relaytest.Env, key string) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the relay's start position", func() bool {
		return env.Streams().Exists(context.Background(), key).Val() == 1
	})
}

func posKey(env *relaytest.Env) string {
	return "binlog-outbox:position:" + env.Database + "." + env.Table
}

func TestRun_KilledRepeatedlyDuringLoadExactlyOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	// Without the lease, so that every kill lands on a relay that appends:
	// with it, a restarted relay would wait for its predecessor's lease to
	// expire (TestRun_StandbyTakesOverExactlyOnce kills relays holding it).
	args := []string{"--mode", "binlog", "--lease=false"}
	p := startRelay(t, env, args...)
	waitStoredPosition(t, env, posKey(env))

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 4, Transactions: 250, Pause: time.Millisecond}, rec)
	}()
	kills := 0
	for i := 0; i < 6; i++ {
		time.Sleep(time.Duration(150+i*37) * time.Millisecond)
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		kills++
		p = startRelay(t, env, args...)
	}
	wg.Wait()
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("relay exit code after SIGTERM = %d, want 0", code)
	}
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d kills, %d committed events, %d entries", kills, len(rec.Committed), n)
}

func TestRun_SecondSignalExitsAtOnce(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	p := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code after one SIGTERM = %d, want 0", code)
	}
	if !p.Said("stopping", 5*time.Second) {
		t.Errorf("no word of the shutdown in the output:\n%s", p.Out.String())
	}
}

func TestRun_RefusesWrongServerSettings(t *testing.T) {
	// Each case has a MariaDB of its own.
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantOut string
	}{
		{"statement format", []string{"--binlog-format=STATEMENT"}, "binlog_format=ROW"},
		{"minimal row image", []string{"--binlog-row-image=MINIMAL"}, "binlog_row_image"},
		{"binlog off", []string{"--skip-log-bin"}, "log_bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: tt.args})
			env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
			p := startRelay(t, env, "--mode", "binlog")
			if code := p.Wait(t, 60*time.Second); code == 0 {
				t.Fatalf("relay started against a server with %v", tt.args)
			}
			if out := p.Out.String(); !strings.Contains(out, tt.wantOut) || !strings.Contains(out, "hint") {
				t.Errorf("output does not explain the fix (%q):\n%s", tt.wantOut, out)
			}
		})
	}
}

func TestRun_RefusesMissingGrants(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	user := fmt.Sprintf("nogrant%d", time.Now().UnixNano()%1e6)
	srv.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw-secret-1'",
		"GRANT SELECT ON `"+env.Database+"`.* TO '"+user+"'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER '"+user+"'@'%'") })
	cmd := exec.Command(binary(t), "--mysql-dsn", srv.UserDSN(user, "pw-secret-1", env.Database), "--redis-url", env.RedisURL, "run", "--mode", "binlog")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("relay ran without REPLICATION grants:\n%s", out)
	}
	if !strings.Contains(string(out), "REPLICATION SLAVE") {
		t.Errorf("output does not name the missing grant:\n%s", out)
	}
	if strings.Contains(string(out), "pw-secret-1") {
		t.Errorf("output leaks the password:\n%s", out)
	}
}

func TestPosition_ShowSetReset(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "position", "show")...)
	if code != 0 || !strings.Contains(out, "no position stored") {
		t.Fatalf("show without position: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append(global, "position", "set", "--start-from", "earliest")...)
	if code != 0 || !strings.Contains(out, "stored mysql-bin.") {
		t.Fatalf("set earliest: exit %d\n%s%s", code, out, errOut)
	}
	raw := env.RDB.Get(context.Background(), posKey(env)).Val()
	b, err := position.Decode([]byte(raw))
	if err != nil || b.Pos != 4 {
		t.Fatalf("stored position %q (%v), want offset 4 of the first binlog", raw, err)
	}
	out, _, code = run(t, append(global, "position", "show")...)
	if code != 0 || !strings.Contains(out, b.File+":4") {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
	_, errOut, code = run(t, append(global, "position", "set", "--start-from", "nonsense")...)
	if code != exitUsage || !strings.Contains(errOut, "hint:") {
		t.Fatalf("set nonsense: exit %d, want %d with a hint\n%s", code, exitUsage, errOut)
	}
	out, _, code = run(t, append(global, "position", "reset")...)
	if code != 0 || !strings.Contains(out, "deleted") || env.RDB.Exists(context.Background(), posKey(env)).Val() != 0 {
		t.Fatalf("reset: exit %d\n%s", code, out)
	}
}

func TestRun_AutoFallsBackToPollAndSaysWhy(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-format=STATEMENT"}})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	p := startRelay(t, env) // --mode auto is the default
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 3, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	out := p.Out.String()
	if !strings.Contains(out, "using poll mode") || !strings.Contains(out, "binlog_format") {
		t.Errorf("no log line saying why auto mode polls:\n%s", out)
	}
	if got := env.RDB.Get(ctx, "binlog-outbox:mode:"+env.Database+".outbox").Val(); got != "poll" {
		t.Errorf("stored mode %q, want poll", got)
	}
	relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{})
}

// TestRun_SwitchPollToBinlog follows docs/switching-modes.md: pollers and
// the binlog relay overlap with the same dedupe window, then the pollers
// stop. Nothing is lost, nothing appended twice, per-aggregate order holds.
func TestRun_SwitchPollToBinlog(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	poll := startRelay(t, env, "--mode", "poll", "--dedupe-window", "1h")
	pctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(pctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 3, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	// The switch is prepared only once the table is known to run in poll
	// mode: wait for the pollers to record it, however slow their start.
	relaytest.WaitFor(t, 30*time.Second, "the pollers to record poll mode", func() bool {
		return env.RDB.Get(ctx, "binlog-outbox:mode:"+env.Database+"."+env.Table).Val() == "poll"
	})
	time.Sleep(700 * time.Millisecond)
	// 1. Record where the binlog relay will start, and the newest row then.
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "position", "set", "--start-from", "now")...); code != 0 {
		t.Fatalf("position set: %d\n%s%s", code, out, errOut)
	}
	var maxID uint64
	if err := env.DB.QueryRow("SELECT COALESCE(MAX(id), 0) FROM outbox").Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	// 2. Wait until the pollers sent every row up to it.
	relaytest.WaitFor(t, 30*time.Second, "the pollers to send the rows before the position", func() bool {
		var n int
		_ = env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND id <= ?", maxID).Scan(&n)
		return n == 0
	})
	// 3. Start the binlog relay with the pollers' window, then stop them.
	binlog := startRelay(t, env, "--mode", "binlog", "--dedupe-window", "1h")
	time.Sleep(700 * time.Millisecond)
	poll.Signal(t, syscall.SIGTERM)
	if code := poll.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("poller exit code %d", code)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	wg.Wait()
	relaytest.Reconcile(t, env.DB, env.Table, rec)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	binlog.Signal(t, syscall.SIGTERM)
	binlog.Wait(t, 15*time.Second)
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}

// TestRun_SwitchBinlogToPoll follows docs/switching-modes.md the other way,
// without a stop: the binlog relay runs with the dedupe window while
// mark-appended marks what it appended before, then the pollers overlap it.
func TestRun_SwitchBinlogToPoll(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	binlog := startRelay(t, env, "--mode", "binlog")
	waitStoredPosition(t, env, posKey(env))
	pctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		relaytest.Produce(pctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 3, Transactions: 100000, Pause: 2 * time.Millisecond}, rec)
	}()
	time.Sleep(500 * time.Millisecond)
	// 1. Restart the binlog relay with the dedupe window.
	binlog.Signal(t, syscall.SIGTERM)
	binlog.Wait(t, 15*time.Second)
	binlog = startRelay(t, env, "--mode", "binlog", "--dedupe-window", "1h")
	time.Sleep(500 * time.Millisecond)
	// 2. Mark what it appended before, which left no dedupe keys.
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "mark-appended")...); code != 0 {
		t.Fatalf("mark-appended: exit %d\n%s%s", code, out, errOut)
	}
	// 3. Start the pollers with the same window, then stop the binlog relay.
	poll := startRelay(t, env, "--mode", "poll", "--dedupe-window", "1h")
	time.Sleep(700 * time.Millisecond)
	binlog.Signal(t, syscall.SIGTERM)
	if code := binlog.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("binlog relay exit code %d", code)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	wg.Wait()
	relaytest.Reconcile(t, env.DB, env.Table, rec)
	relaytest.WaitFor(t, 60*time.Second, "delivery", func() bool {
		var unsent int
		_ = env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").Scan(&unsent)
		return unsent == 0 && relaytest.CountEntries(ctx, env.RDB, "outbox:") >= len(rec.Committed)
	})
	poll.Signal(t, syscall.SIGTERM)
	poll.Wait(t, 15*time.Second)
	n := relaytest.Check(ctx, t, env.RDB, rec, relaytest.CheckOptions{ExactlyOnce: true})
	t.Logf("%d committed events, %d entries", len(rec.Committed), n)
}

func TestRun_ServesMetrics(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	port := closedPort(t)
	p := startRelay(t, env, "--mode", "binlog", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	waitStoredPosition(t, env, posKey(env))
	rec := relaytest.NewProduced()
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 1, Transactions: 5, RollbackRatio: 0.0001}, rec)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	var body string
	relaytest.WaitFor(t, 10*time.Second, "the metrics endpoint", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return false
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(out)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, fmt.Sprintf(`binlog_outbox_events_appended_total{mode="binlog"} %d`, len(rec.Committed)))
	})
	for _, want := range []string{"binlog_outbox_batches_total", "binlog_outbox_statement_inserts_total", "binlog_outbox_last_commit_timestamp_seconds", `binlog_outbox_leader{mode="binlog"} 1`, "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	p.Signal(t, syscall.SIGTERM)
	p.Wait(t, 15*time.Second)
}

// TestRun_AutoModeIsSticky: once a table was relayed in binlog mode, auto mode
// refuses to fall back to polling, which would append every row again.
func TestRun_AutoModeIsSticky(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	srv := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, srv, testsvc.SharedRedis(t))
	ctx := context.Background()
	p := startRelay(t, env)
	waitStoredPosition(t, env, posKey(env))
	p.Signal(t, syscall.SIGTERM)
	p.Wait(t, 15*time.Second)
	if got := env.RDB.Get(ctx, "binlog-outbox:mode:"+env.Database+".outbox").Val(); got != "binlog" {
		t.Fatalf("stored mode %q, want binlog", got)
	}
	srv.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'")
	p = startRelay(t, env)
	if code := p.Wait(t, 60*time.Second); code == 0 {
		t.Fatal("auto mode started although binlog mode ran before and cannot run now")
	}
	if out := p.Out.String(); !strings.Contains(out, "never falls back") || !strings.Contains(out, "binlog_format") {
		t.Errorf("output does not explain the refusal:\n%s", out)
	}
}
