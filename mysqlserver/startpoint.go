package mysqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// Where a binlog dump can start, as the server tells it. A dump that starts
// where the server cannot serve exactly what follows is worse than one it
// refuses: inside an event it fails on bogus data, inside a transaction it
// relays rows without their BEGIN, and from a GTID set the server never had
// (or a domain it leaves out) MariaDB reads that domain from its oldest
// binlog on, every event of it again. Both the relay at every start and
// `check` and `position set` ask these, so that what one refuses the others
// report first.
//
// The errors wrap outbox.ErrPositionGone when the server does not have (any
// more) what the point needs, and outbox.ErrConfig when the point is not
// one a dump can start at; the caller adds the way on, which depends on
// whether the point was stored or given.

// BinaryLog is one file of SHOW BINARY LOGS.
type BinaryLog struct {
	Name string
	Size uint64
}

// BinaryLogs lists the server's binlog files, oldest first.
func BinaryLogs(ctx context.Context, q Querier) ([]BinaryLog, error) {
	rows, err := q.QueryContext(ctx, "SHOW BINARY LOGS /* binlog-outbox */")
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("list binary logs: %w", err), "the relay's user needs REPLICATION CLIENT (MariaDB: BINLOG MONITOR), and log_bin must be ON")
	}
	defer rows.Close()
	var logs []BinaryLog
	err = ScanRows(rows, func(vals []sql.RawBytes) {
		l := BinaryLog{Name: string(vals[0])}
		if len(vals) > 1 {
			l.Size, _ = strconv.ParseUint(string(vals[1]), 10, 64)
		}
		logs = append(logs, l)
	})
	if err != nil {
		return nil, fmt.Errorf("list binary logs: %w", err)
	}
	return logs, nil
}

// startEvents are the events a dump may start at (SHOW BINLOG EVENTS'
// Event_type): those that begin a transaction, and those that stand
// between transactions. Every transaction of MariaDB 10.0+ and MySQL 5.7+
// begins with a GTID event (anonymous where MySQL has no GTIDs).
var startEvents = map[string]bool{
	"Format_desc": true, "Gtid_list": true, "Binlog_checkpoint": true, "Previous_gtids": true,
	"Gtid": true, "Anonymous_Gtid": true, "Gtid_tagged": true, "Rotate": true, "Stop": true,
}

// errWrongOffset is ER_ERROR_WHEN_EXECUTING_COMMAND, which SHOW BINLOG
// EVENTS answers for an offset that is no event's start (or past the end).
const errWrongOffset = 1220

// CheckFilePoint checks that a dump can start at file:pos: the server has
// the file, and pos is its end or the start of an event outside any
// transaction.
func CheckFilePoint(ctx context.Context, q Querier, file string, pos uint32) error {
	logs, err := BinaryLogs(ctx, q)
	if err != nil {
		return err
	}
	i := -1
	for j, l := range logs {
		if l.Name == file {
			i = j
		}
	}
	switch {
	case i < 0:
		return fmt.Errorf("%w: binlog file %s is not on the server (it has %s): it was purged, or this is another server",
			outbox.ErrPositionGone, file, describeLogs(logs))
	case uint64(pos) > logs[i].Size:
		return fmt.Errorf("%w: offset %d is past the end of %s, which has %d bytes", outbox.ErrConfig, pos, file, logs[i].Size)
	case uint64(pos) == logs[i].Size:
		return nil
	}
	typ, err := eventAt(ctx, q, file, pos)
	if err != nil {
		return err
	}
	if !startEvents[typ] {
		return fmt.Errorf("%w: offset %d of %s is inside a transaction (at a %s event): a dump from there would relay rows without the start of their transaction",
			outbox.ErrConfig, pos, file, typ)
	}
	return nil
}

// eventAt returns the type of the event that starts at file:pos.
func eventAt(ctx context.Context, q Querier, file string, pos uint32) (string, error) {
	// The file name and offset are checked values (SHOW BINARY LOGS, a
	// uint32), and SHOW statements take no placeholders on every server.
	stmt := "SHOW /* binlog-outbox */ BINLOG EVENTS IN '" + strings.ReplaceAll(file, "'", "''") + "' FROM " + strconv.FormatUint(uint64(pos), 10) + " LIMIT 1"
	typ := ""
	rows, err := q.QueryContext(ctx, stmt)
	if err == nil {
		// The server may report a bad offset with the first row.
		err = ScanRows(rows, func(vals []sql.RawBytes) {
			if typ == "" && len(vals) > 2 {
				typ = string(vals[2])
			}
		})
		rows.Close()
	}
	var my *mysql.MySQLError
	switch {
	case err == nil:
		return typ, nil
	case errors.As(err, &my) && my.Number == errWrongOffset:
		return "", fmt.Errorf("%w: offset %d of %s is not the start of an event (the server says: %s)", outbox.ErrConfig, pos, file, my.Message)
	}
	return "", outbox.WithHint(fmt.Errorf("read the binlog event at %s:%d: %w", file, pos, err),
		"the relay's user needs REPLICATION SLAVE (MySQL) or REPLICATION CLIENT (MariaDB: BINLOG MONITOR) to read binlog events")
}

// describeLogs names the files of logs for messages: how many, first to last.
func describeLogs(logs []BinaryLog) string {
	switch len(logs) {
	case 0:
		return "none"
	case 1:
		return "1 file, " + logs[0].Name
	}
	return fmt.Sprintf("%d files, %s to %s", len(logs), logs[0].Name, logs[len(logs)-1].Name)
}

// GTIDState is what a server's binlog holds by GTID: the transactions it has
// and those it purged.
type GTIDState struct {
	// Held is @@gtid_executed (MySQL) or @@gtid_binlog_state (MariaDB):
	// what position.GTIDSet.HeldBy compares with.
	Held string
	// Purged is @@gtid_purged (MySQL) or the GTID position at the start of
	// the oldest binlog file (MariaDB): position.GTIDSet.NeedsPurged's.
	Purged string
}

// ReadGTIDState reads the server's GTID state.
func (s Server) ReadGTIDState(ctx context.Context, q Querier) (GTIDState, error) {
	var st GTIDState
	if !s.MariaDB() {
		var held, purged sql.NullString
		if err := q.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged /* binlog-outbox */").Scan(&held, &purged); err != nil {
			return st, fmt.Errorf("read gtid_executed and gtid_purged: %w", err)
		}
		return GTIDState{Held: oneLine(held.String), Purged: oneLine(purged.String)}, nil
	}
	var held sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state /* binlog-outbox */").Scan(&held); err != nil {
		return st, fmt.Errorf("read gtid_binlog_state: %w", err)
	}
	st.Held = held.String
	logs, err := BinaryLogs(ctx, q)
	if err != nil || len(logs) == 0 {
		return st, err
	}
	var purged sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4) /* binlog-outbox */", logs[0].Name).Scan(&purged); err != nil {
		return st, fmt.Errorf("read the GTID position at the start of %s (BINLOG_GTID_POS): %w", logs[0].Name, err)
	}
	st.Purged = purged.String
	return st, nil
}

// oneLine joins a GTID set the server wrapped over lines.
func oneLine(s string) string { return strings.NewReplacer("\n", "", " ", "").Replace(s) }

// CheckGTIDPoint checks that a dump from set reads exactly the transactions
// after it: the server's binlog holds every transaction of set, and has
// purged none after it. whole also refuses a MariaDB set that leaves out a
// replication domain the server has, for a set given by hand: the dump
// would read that domain from the oldest binlog on.
func (s Server) CheckGTIDPoint(ctx context.Context, q Querier, set position.GTIDSet, whole bool) error {
	st, err := s.ReadGTIDState(ctx, q)
	if err != nil {
		return err
	}
	if !set.IsZero() {
		held, err := set.HeldBy(s.Flavor, st.Held)
		if err != nil {
			return fmt.Errorf("compare the GTID set with the server's: %w", err)
		}
		if !held {
			return fmt.Errorf("%w: GTID set %s names transactions this server never had in its binlog (it holds %s)",
				outbox.ErrPositionGone, logging.Truncate(set.String(), 200), logging.Truncate(orNone(st.Held), 200))
		}
	}
	need, err := set.NeedsPurged(s.Flavor, st.Purged)
	if err != nil {
		return err
	}
	if need != "" {
		return fmt.Errorf("%w: a dump from GTID set %s needs transactions the server purged (up to %s)",
			outbox.ErrPositionGone, logging.Truncate(orNone(set.String()), 200), logging.Truncate(need, 200))
	}
	if !whole || set.IsZero() {
		return nil
	}
	missing, err := set.MissingDomains(st.Held)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		ds := make([]string, len(missing))
		for i, d := range missing {
			ds[i] = strconv.FormatUint(uint64(d), 10)
		}
		return fmt.Errorf("%w: GTID set %s has no GTID of replication domain %s, which this server's binlog holds (%s): a dump from it would read every transaction of that domain again, from the oldest binlog on",
			outbox.ErrConfig, logging.Truncate(set.String(), 200), strings.Join(ds, ", "), logging.Truncate(st.Held, 200))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// CheckResume checks that the server s (its identity read at the same
// start) can resume the stored position b, as the relay resumes it: a
// position of its flavor; a GTID position whose set it holds and has purged
// nothing after; a file position of this server (file positions are
// server-local) at a transaction's start in a file it still has. key names
// the position in messages. The errors carry the way on.
func (s Server) CheckResume(ctx context.Context, q Querier, b position.Binlog, key string) error {
	if b.Flavor != s.Flavor {
		return outbox.WithHint(fmt.Errorf("%w: the stored position at %s belongs to a %s server, this is %s", outbox.ErrPositionGone, key, b.Flavor, s.Flavor), "%s", position.HintGone)
	}
	p, err := b.Point()
	if err != nil {
		return fmt.Errorf("%w: stored position at %s: %v", outbox.ErrConfig, key, err)
	}
	if b.GTIDMode() {
		// The server would serve a set it lacks a domain of from that
		// domain's oldest binlog on, and one it purged what follows of
		// as far as it still has it.
		if err := s.CheckGTIDPoint(ctx, q, p.GTIDSet, false); err != nil {
			return position.StoredPointError(fmt.Errorf("stored position at %s: %w", key, err), true)
		}
		return nil
	}
	if !s.Same(b.ServerID, b.ServerUUID) {
		return outbox.WithHint(fmt.Errorf("%w: the stored position %s:%d at %s belongs to %s, this is %s; file positions are server-local",
			outbox.ErrPositionGone, b.File, b.Pos, key, Describe(b.ServerID, b.ServerUUID), Describe(s.ServerID, s.ServerUUID)), "%s", position.HintGone)
	}
	if err := CheckFilePoint(ctx, q, b.File, b.Pos); err != nil {
		return position.StoredPointError(fmt.Errorf("stored position at %s: %w", key, err), false)
	}
	return nil
}

// Same reports whether id and uuid (empty: unknown, MariaDB) name s.
func (s Server) Same(id uint32, uuid string) bool {
	return id == s.ServerID && (uuid == "" || s.ServerUUID == "" || uuid == s.ServerUUID)
}

// Describe names a server in messages by its identity.
func Describe(id uint32, uuid string) string {
	if uuid == "" {
		return fmt.Sprintf("server_id %d", id)
	}
	return fmt.Sprintf("server_id %d (server_uuid %s)", id, uuid)
}

// CheckStart checks that s can start a dump where the operator's start
// (--start-from, position set) points: a file position at a transaction's
// start in a file it has, a GTID set of its flavor it holds, with every
// replication domain it has, and nothing purged after it. now and earliest
// are always points it has. The errors carry the way on.
func (s Server) CheckStart(ctx context.Context, q Querier, start position.Start) error {
	switch start.Kind {
	case position.StartFilePos:
		if err := CheckFilePoint(ctx, q, start.File, start.Pos); err != nil {
			return position.GivenPointError(fmt.Errorf("--start-from %s:%d: %w", start.File, start.Pos, err))
		}
	case position.StartGTID:
		set, err := start.GTIDSetOn(s.Flavor)
		if err != nil {
			return err
		}
		if err := s.CheckGTIDPoint(ctx, q, set, true); err != nil {
			return position.GivenPointError(fmt.Errorf("--start-from %s: %w", start.GTIDSet, err))
		}
	}
	return nil
}
