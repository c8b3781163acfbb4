package servers

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mariadbReadyTimeout bounds a start: a fresh data directory on a slow disk
// takes a while to open.
const mariadbReadyTimeout = 60 * time.Second

// MariaDB is a private mariadbd process. Its root user has no password and
// may connect from 127.0.0.1.
type MariaDB struct {
	bin  binary
	dir  string
	args []string
	port int
	handle
}

// StartMariaDB installs a data directory in dir (which must exist) and starts
// mariadbd on a free loopback port. args follow the fixed ones (data
// directory, port, log), so they carry the server settings; a later --x=y
// overrides an earlier one.
func StartMariaDB(ctx context.Context, dir string, args []string) (*MariaDB, error) {
	return startMariaDB(ctx, "", dir, args)
}

// StartMariaDBFromTemplate is StartMariaDB with the data directory copied
// from a template that mariadb-install-db made once under templates for the
// installed server version (and makes on first use): the tests start dozens
// of servers, and the install is most of each start.
func StartMariaDBFromTemplate(ctx context.Context, templates, dir string, args []string) (*MariaDB, error) {
	return startMariaDB(ctx, templates, dir, args)
}

func startMariaDB(ctx context.Context, templates, dir string, args []string) (*MariaDB, error) {
	bin, err := lookBinary("mariadbd")
	if err != nil {
		return nil, err
	}
	installDB, err := lookBinary("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	m := &MariaDB{bin: bin, dir: dir, args: args}
	// A private tmpdir: servers starting in parallel on a shared /tmp delete
	// each other's temporary tables at start-up.
	if err := os.MkdirAll(m.tmpDir(), 0o755); err != nil {
		return nil, err
	}
	if templates == "" {
		err = installMariaDB(ctx, installDB, m.DataDir(), m.tmpDir())
	} else {
		var data string
		if data, err = templateDataDir(ctx, templates, bin, installDB); err == nil {
			err = copyTree(data, m.DataDir())
		}
	}
	if err != nil {
		return nil, err
	}
	if m.port, err = onFreePort(func(port int) error { m.port = port; return m.Start(ctx) }); err != nil {
		return nil, err
	}
	return m, nil
}

// currentUser is the user mariadbd runs as: itself, which --user must name
// unless the process is root.
func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return strconv.Itoa(os.Geteuid())
}

// Start starts the server on its port and data directory and waits until it
// accepts connections: after Kill, it is a restart.
func (m *MariaDB) Start(ctx context.Context) error {
	args := append([]string{
		"--no-defaults",
		"--user=" + currentUser(),
		"--datadir=" + m.DataDir(),
		"--tmpdir=" + m.tmpDir(),
		"--socket=" + filepath.Join(m.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"),
		"--port=" + strconv.Itoa(m.port),
		"--bind-address=127.0.0.1",
		"--log-error=" + m.LogPath(),
	}, m.args...)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", m.Addr()
	dsn := cfg.FormatDSN()
	if err := m.run(ctx, m.bin, args, filepath.Join(m.dir, "stdout.log"), m.LogPath(), mariadbReadyTimeout, func(ctx context.Context) error {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	}); err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	return nil
}

// Port returns the server's TCP port on 127.0.0.1.
func (m *MariaDB) Port() int { return m.port }

// Addr returns 127.0.0.1:port.
func (m *MariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// DataDir returns the data directory, where the binlog files live.
func (m *MariaDB) DataDir() string { return filepath.Join(m.dir, "data") }

// LogPath returns the server's error log.
func (m *MariaDB) LogPath() string { return filepath.Join(m.dir, "server.log") }

func (m *MariaDB) tmpDir() string { return filepath.Join(m.dir, "tmp") }
