// Package mysqlserver knows what differs between the MySQL and MariaDB
// servers the relay talks to: flavor and version, the statements that were
// renamed between versions, and the features some versions lack. The relay
// inspects the server once (Detect) and passes the Server down; nothing else
// parses a version string.
package mysqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// Server flavors: the values of Server.Flavor, the same as a stored
// position's.
const (
	FlavorMySQL   = position.FlavorMySQL
	FlavorMariaDB = position.FlavorMariaDB
)

// Server identifies the MySQL or MariaDB server.
type Server struct {
	// Flavor is "mysql" or "mariadb" (@@version contains "MariaDB").
	Flavor string
	// Version is @@version as the server reports it, e.g.
	// "10.11.19-MariaDB-0+deb12u1-log" or "8.4.3".
	Version string
	// Major, Minor and Patch are parsed from Version, without MariaDB's
	// "5.5.5-" replication prefix.
	Major, Minor, Patch int
	// ServerID is the server's own @@server_id.
	ServerID uint32
	// ServerUUID is @@server_uuid on MySQL; MariaDB has none and leaves it "".
	ServerUUID string
}

// MariaDB reports whether the server is MariaDB.
func (s Server) MariaDB() bool { return s.Flavor == FlavorMariaDB }

// AtLeast reports whether the server's version is at least major.minor.patch.
func (s Server) AtLeast(major, minor, patch int) bool {
	if s.Major != major {
		return s.Major > major
	}
	if s.Minor != minor {
		return s.Minor > minor
	}
	return s.Patch >= patch
}

// String returns e.g. "MariaDB 10.11.19" or "MySQL 8.4.3".
func (s Server) String() string {
	name := "MySQL"
	if s.MariaDB() {
		name = "MariaDB"
	}
	return fmt.Sprintf("%s %d.%d.%d", name, s.Major, s.Minor, s.Patch)
}

// Detect reads the server's flavor, version and identity. It uses SHOW
// VARIABLES, which every user may run, and which returns no row (rather than
// an error, as SELECT @@server_uuid would on MariaDB) for a variable the
// flavor lacks.
func Detect(ctx context.Context, db *sql.DB) (Server, error) {
	vars, err := GlobalVariables(ctx, db, "version", "server_id", "server_uuid")
	if err != nil {
		return Server{}, err
	}
	s, err := Parse(vars["version"], vars["server_id"])
	if err != nil {
		return Server{}, err
	}
	s.ServerUUID = vars["server_uuid"]
	return s, nil
}

// Parse builds a Server from @@version and @@server_id.
func Parse(version, serverID string) (Server, error) {
	s := Server{Version: version}
	var err error
	s.Flavor, s.Major, s.Minor, s.Patch, err = ParseVersion(version)
	if err != nil {
		return Server{}, err
	}
	id, err := strconv.ParseUint(serverID, 10, 32)
	if err != nil {
		return Server{}, fmt.Errorf("parse server_id %q: %w", serverID, err)
	}
	s.ServerID = uint32(id)
	return s, nil
}

// ParseVersion parses @@version strings: "8.4.3", "8.0.36-0ubuntu0.22.04.1",
// "8.0.36-28" (Percona), "10.11.19-MariaDB-0+deb12u1-log", "11.4.2-MariaDB" and
// "5.5.5-10.6.12-MariaDB-log" (MariaDB 10.x as some proxies and the
// replication handshake report it; the real version follows the prefix).
func ParseVersion(v string) (flavor string, major, minor, patch int, err error) {
	flavor = FlavorMySQL
	rest := v
	if strings.Contains(strings.ToLower(v), "mariadb") {
		flavor = FlavorMariaDB
		rest = strings.TrimPrefix(rest, "5.5.5-")
	}
	if i := strings.IndexAny(rest, "-+ "); i >= 0 {
		rest = rest[:i]
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return "", 0, 0, 0, fmt.Errorf("parse server version %q: want major.minor[.patch]", v)
	}
	nums := [3]int{}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "", 0, 0, 0, fmt.Errorf("parse server version %q: %q is not a number", v, p)
		}
		nums[i] = n
	}
	return flavor, nums[0], nums[1], nums[2], nil
}

// GlobalVariables returns the named global variables that exist, by
// lower-case name. names must be plain variable names (constants of the
// caller), since they are inlined into the statement.
func GlobalVariables(ctx context.Context, db *sql.DB, names ...string) (map[string]string, error) {
	if len(names) == 0 {
		return map[string]string{}, nil
	}
	// The names are constants of this package, so they are inlined rather than
	// bound: not every server prepares SHOW statements.
	q := "SHOW /* binlog-outbox */ GLOBAL VARIABLES WHERE Variable_name IN ('" + strings.Join(names, "', '") + "')"
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	defer rows.Close()
	vars := make(map[string]string, len(names))
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, fmt.Errorf("read server variables: %w", err)
		}
		vars[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	return vars, nil
}

// BinlogStatusQuery is the statement that shows the current binlog position,
// renamed twice: MySQL 8.4 removed SHOW MASTER STATUS, and MariaDB 10.5.2
// added SHOW BINLOG STATUS (go-mysql #1029 sent MySQL's name to MariaDB 11).
func (s Server) BinlogStatusQuery() string {
	switch {
	case s.MariaDB() && s.AtLeast(10, 5, 2):
		return "SHOW /* binlog-outbox */ BINLOG STATUS"
	case !s.MariaDB() && s.AtLeast(8, 4, 0):
		return "SHOW /* binlog-outbox */ BINARY LOG STATUS"
	}
	return "SHOW /* binlog-outbox */ MASTER STATUS"
}

// ReplicasQuery is the statement that lists registered replicas: MySQL 8.0.22
// added SHOW REPLICAS and 8.4 removed SHOW SLAVE HOSTS; MariaDB has only the
// latter.
func (s Server) ReplicasQuery() string {
	if !s.MariaDB() && s.AtLeast(8, 0, 22) {
		return "SHOW /* binlog-outbox */ REPLICAS"
	}
	return "SHOW /* binlog-outbox */ SLAVE HOSTS"
}

// ErrNoSkipLocked means the server lacks SELECT ... FOR UPDATE SKIP LOCKED
// (MySQL before 8.0.1, MariaDB before 10.6). It is a configuration error:
// retrying does not help.
var ErrNoSkipLocked = outbox.NewConfigError("server has no SELECT ... FOR UPDATE SKIP LOCKED")

// SkipLocked returns nil when the server has SELECT ... FOR UPDATE SKIP
// LOCKED, which poll mode needs: without it, concurrent relays would wait on
// each other's locks instead of taking the next rows, or (without FOR
// UPDATE) publish the same rows.
func (s Server) SkipLocked() error {
	switch {
	case s.MariaDB() && !s.AtLeast(10, 6, 0):
		return outbox.WithHint(fmt.Errorf("%w: %s is older than 10.6", ErrNoSkipLocked, s),
			"poll mode needs SELECT ... FOR UPDATE SKIP LOCKED: upgrade to MariaDB 10.6 or later, or run with --mode binlog")
	case !s.MariaDB() && !s.AtLeast(8, 0, 1):
		return outbox.WithHint(fmt.Errorf("%w: %s is older than 8.0.1", ErrNoSkipLocked, s),
			"poll mode needs SELECT ... FOR UPDATE SKIP LOCKED: upgrade to MySQL 8.0.1 or later, or run with --mode binlog")
	}
	return nil
}

// Querier runs a query: a *sql.DB, or the *sql.Conn of a transaction in
// progress.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// BinlogPosition reads the end of the server's binlog with the statement
// its version understands.
func (s Server) BinlogPosition(ctx context.Context, db Querier) (file string, pos uint32, err error) {
	q := s.BinlogStatusQuery()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return "", 0, outbox.WithHint(fmt.Errorf("read binlog position (%s): %w", q, err), "the relay's user needs REPLICATION CLIENT (MariaDB: BINLOG MONITOR)")
	}
	defer rows.Close()
	err = ScanRows(rows, func(vals []sql.RawBytes) {
		if file == "" && len(vals) >= 2 {
			file = string(vals[0])
			p, _ := strconv.ParseUint(string(vals[1]), 10, 32)
			pos = uint32(p)
		}
	})
	if err != nil {
		return "", 0, fmt.Errorf("read binlog position: %w", err)
	}
	if file == "" {
		return "", 0, outbox.WithHint(errors.New("the server reports no binlog position: the binlog is off"),
			"enable it with log_bin (and binlog_format=ROW) in my.cnf and restart, or run with --mode poll")
	}
	return file, pos, nil
}

// SnapshotEnd returns the end of the binlog as of the consistent snapshot
// conn holds (START TRANSACTION WITH CONSISTENT SNAPSHOT): every transaction
// the snapshot sees ended at or before it. MariaDB reports that end with
// the snapshot (Binlog_snapshot_file and _position); MySQL does not, so its
// current end is read instead: a transaction is in the binlog before it
// commits, so an end read after the snapshot began is at or past every
// transaction the snapshot sees, later than needed but never earlier.
//
// The GTID set is MariaDB's gtid_binlog_pos, read after the snapshot began,
// which MariaDB advances as it writes the binlog: a superset of what the
// snapshot sees. MySQL's gtid_executed is left out: nothing promises it
// holds a transaction before a snapshot can see the transaction, so a set
// read now might lack one the snapshot sees.
func (s Server) SnapshotEnd(ctx context.Context, conn Querier) (position.End, error) {
	end := position.End{ServerID: s.ServerID, ServerUUID: s.ServerUUID}
	rows, err := conn.QueryContext(ctx, "SHOW /* binlog-outbox */ SESSION STATUS LIKE 'binlog\\_snapshot\\_%'")
	if err != nil {
		return position.End{}, fmt.Errorf("read the snapshot's binlog position: %w", err)
	}
	var snapFile, snapPos string
	err = ScanRows(rows, func(vals []sql.RawBytes) {
		if len(vals) < 2 {
			return
		}
		switch strings.ToLower(string(vals[0])) {
		case "binlog_snapshot_file":
			snapFile = string(vals[1])
		case "binlog_snapshot_position":
			snapPos = string(vals[1])
		}
	})
	rows.Close()
	if err != nil {
		return position.End{}, fmt.Errorf("read the snapshot's binlog position: %w", err)
	}
	if p, perr := strconv.ParseUint(snapPos, 10, 32); snapFile != "" && perr == nil {
		end.File, end.Pos = snapFile, uint32(p)
	} else if end.File, end.Pos, err = s.BinlogPosition(ctx, conn); err != nil {
		return position.End{}, err
	}
	if !s.MariaDB() {
		return end, nil
	}
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT /* binlog-outbox */ @@GLOBAL.gtid_binlog_pos").Scan(&gtid); err != nil {
		return position.End{}, fmt.Errorf("read gtid_binlog_pos: %w", err)
	}
	if gtid.String != "" {
		if end.GTIDSet, err = position.ParseGTIDSet(position.FlavorMariaDB, gtid.String); err != nil {
			return position.End{}, fmt.Errorf("gtid_binlog_pos: %w", err)
		}
	}
	return end, nil
}

// ScanRows calls fn with the raw values of each row, whatever the width:
// SHOW statements gained columns between versions.
func ScanRows(rows *sql.Rows, fn func([]sql.RawBytes)) error {
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		fn(vals)
	}
	return rows.Err()
}
