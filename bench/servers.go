package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// mariadbArgs are the settings of a private MariaDB: what the relay needs,
// and durable commits (the live workloads measure durable producers; the
// backlog loads relax them with SET GLOBAL for their duration).
var mariadbArgs = []string{
	"--log-bin=mysql-bin",
	"--binlog-format=ROW",
	"--binlog-row-image=FULL",
	"--binlog-row-metadata=FULL",
	"--server-id=1",
	"--innodb-flush-log-at-trx-commit=1",
	"--sync-binlog=1",
	"--innodb-buffer-pool-size=512M",
	"--innodb-log-file-size=512M",
	"--max-binlog-size=1G",
	"--max-connections=200",
	"--skip-name-resolve",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_unicode_ci",
}

// redisArgs: an append-only file fsynced every second, the usual production
// setting; no RDB snapshots, whose fork would disturb the measurement.
var redisArgs = []string{
	"--appendonly", "yes",
	"--appendfsync", "everysec",
	"--save", "",
	"--maxmemory-policy", "noeviction",
}

// servers are private MariaDB and Redis processes in a temporary directory.
type servers struct {
	dir      string
	mysqlDSN string
	redisURL string
	procs    []*exec.Cmd
}

// startServers starts MariaDB and Redis on free loopback ports.
func startServers(ctx context.Context) (*servers, error) {
	mariadbd, err := lookBinary("mariadbd")
	if err != nil {
		return nil, err
	}
	installDB, err := lookBinary("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	redisServer, err := lookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bo-bench-")
	if err != nil {
		return nil, err
	}
	s := &servers{dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	user := "root"
	if os.Geteuid() != 0 {
		user = strconv.Itoa(os.Geteuid())
		if u := os.Getenv("USER"); u != "" {
			user = u
		}
	}
	install := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+user)
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	myPort, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--no-defaults", "--user=" + user, "--datadir=" + data, "--tmpdir=" + tmp,
		"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--port=" + strconv.Itoa(myPort), "--bind-address=127.0.0.1", "--log-error=" + filepath.Join(dir, "mariadb.log"),
	}, mariadbArgs...)
	if err := s.spawn(mariadbd, args, filepath.Join(dir, "mariadb.out")); err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", "127.0.0.1:"+strconv.Itoa(myPort)
	s.mysqlDSN = cfg.FormatDSN()
	if err := waitReady(ctx, func(ctx context.Context) error {
		db, err := sql.Open("mysql", s.mysqlDSN)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	}); err != nil {
		return nil, fmt.Errorf("mariadb did not start (log: %s): %w", filepath.Join(dir, "mariadb.log"), err)
	}

	rPort, err := freePort()
	if err != nil {
		return nil, err
	}
	rargs := append([]string{"--port", strconv.Itoa(rPort), "--bind", "127.0.0.1", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no", "--protected-mode", "no"}, redisArgs...)
	if err := s.spawn(redisServer, rargs, filepath.Join(dir, "redis.out")); err != nil {
		return nil, err
	}
	s.redisURL = "redis://127.0.0.1:" + strconv.Itoa(rPort) + "/0"
	if err := waitReady(ctx, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(rPort), MaxRetries: -1})
		defer c.Close()
		return c.Set(ctx, "binlog-outbox-bench:ready", "1", time.Second).Err()
	}); err != nil {
		return nil, fmt.Errorf("redis did not start (log: %s): %w", filepath.Join(dir, "redis.log"), err)
	}
	ok = true
	return s, nil
}

func (s *servers) spawn(bin string, args []string, logPath string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	f.Close()
	s.procs = append(s.procs, cmd)
	return nil
}

// stop terminates the servers (SIGTERM, then SIGKILL after 20s) and removes
// their directory.
func (s *servers) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	_ = os.RemoveAll(s.dir)
}

func waitReady(ctx context.Context, ready func(context.Context) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := ready(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lookBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or /usr/sbin; install it (apt-get install -y mariadb-server redis-server) or pass --mysql-dsn and --redis-url", name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
