package servers

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ReplicationArgs are the settings of a MariaDB server that takes part in
// GTID replication, as primary or replica: its own server id, the
// transactions it replicates written to its own binlog (so that a replica
// promoted to primary serves the whole history, and one can be read from),
// and strict GTID mode (a replica with a diverging history stops instead of
// going on). Pass them after the binlog settings.
func ReplicationArgs(serverID int) []string {
	return []string{
		"--server-id=" + strconv.Itoa(serverID),
		"--log-slave-updates=ON",
		"--gtid-strict-mode=ON",
		// A killed primary is noticed within seconds, not after a minute.
		"--slave-net-timeout=5",
	}
}

// admin opens a single administrative connection to the server.
func (m *MariaDB) admin() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", m.Addr()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// exec runs statements on the server as root, in order.
func (m *MariaDB) exec(ctx context.Context, stmts ...string) error {
	db, err := m.admin()
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// ReplicateFrom makes m a replica of primary by GTID (MASTER_USE_GTID =
// slave_pos) and starts it. Both servers should run with ReplicationArgs
// and distinct server ids; m should not have written transactions of its
// own, since gtid_strict_mode would then refuse the primary's history.
func (m *MariaDB) ReplicateFrom(ctx context.Context, primary *MariaDB) error {
	// Start from the primary's first transaction: a fresh replica's own
	// installation wrote nothing to its binlog.
	err := m.exec(ctx,
		"SET GLOBAL gtid_slave_pos = ''",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_PASSWORD = '', "+
			"MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1", primary.Port()),
		"START SLAVE",
	)
	if err != nil {
		return fmt.Errorf("mariadb: replicate from %s: %w", primary.Addr(), err)
	}
	return nil
}

// Promote turns a replica into a primary, as a failover does once the old
// primary is gone: replication stopped and forgotten, writes allowed.
func (m *MariaDB) Promote(ctx context.Context) error {
	if err := m.exec(ctx, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"); err != nil {
		return fmt.Errorf("mariadb: promote %s: %w", m.Addr(), err)
	}
	return nil
}

// GTIDBinlogPos returns @@gtid_binlog_pos: the last transaction of each
// replication domain in the server's binlog, what a GTID reader resumes
// after.
func (m *MariaDB) GTIDBinlogPos(ctx context.Context) (string, error) {
	db, err := m.admin()
	if err != nil {
		return "", err
	}
	defer db.Close()
	var pos string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return "", fmt.Errorf("mariadb: read gtid_binlog_pos of %s: %w", m.Addr(), err)
	}
	return pos, nil
}

// WaitReplicated waits until the replica m has applied the transactions up
// to gtidPos (MASTER_GTID_WAIT), at most timeout.
func (m *MariaDB) WaitReplicated(ctx context.Context, gtidPos string, timeout time.Duration) error {
	db, err := m.admin()
	if err != nil {
		return err
	}
	defer db.Close()
	var res int
	if err := db.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", gtidPos, timeout.Seconds()).Scan(&res); err != nil {
		return fmt.Errorf("mariadb: wait for %s on %s: %w", gtidPos, m.Addr(), err)
	}
	if res != 0 {
		return fmt.Errorf("mariadb: %s did not apply %s within %s (see SHOW SLAVE STATUS and %s)", m.Addr(), gtidPos, timeout, m.LogPath())
	}
	return nil
}
