package canal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// resumesByGTID reports whether the server gives every transaction a GTID
// (position.ResumesByGTID): starts and file positions of such a server are
// resumed by GTID set, which survives a failover.
func (r *Reader) resumesByGTID(ctx context.Context) (bool, error) {
	if r.cfg.Flavor == position.FlavorMariaDB {
		return true, nil
	}
	var mode sql.NullString
	if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_mode /* binlog-outbox */").Scan(&mode); err != nil {
		return false, fmt.Errorf("read gtid_mode: %w", err)
	}
	return position.ResumesByGTID(r.cfg.Flavor, mode.String), nil
}

// nowPoint is --start-from now: the end of the binlog, with the GTID set of
// the transactions before it where the server has GTIDs.
func (r *Reader) nowPoint(ctx context.Context) (position.Point, error) {
	gtid, err := r.resumesByGTID(ctx)
	if err != nil {
		return position.Point{}, err
	}
	if gtid && r.cfg.Flavor == position.FlavorMySQL {
		// One row of the status statement holds both, so they agree.
		return r.mysqlStatusPoint(ctx)
	}
	file, pos, err := r.currentPosition(ctx)
	if err != nil {
		return position.Point{}, err
	}
	p := position.Point{File: file, Pos: pos}
	if gtid {
		if p.GTIDSet, err = r.mariaDBGTIDAt(ctx, file, pos); err != nil {
			return position.Point{}, err
		}
	}
	return p, nil
}

// earliestPoint is --start-from earliest: the start of the oldest binlog
// file, with the GTID set of the transactions before it (MariaDB: the
// file's Gtid_list; MySQL: gtid_purged) where the server has GTIDs.
func (r *Reader) earliestPoint(ctx context.Context) (position.Point, error) {
	logs, err := mysqlserver.BinaryLogs(ctx, r.db)
	if err != nil {
		return position.Point{}, err
	}
	if len(logs) == 0 {
		return position.Point{}, outbox.WithHint(errors.New("the server lists no binary logs"), "enable the binlog: log_bin=ON")
	}
	p := position.Point{File: logs[0].Name, Pos: 4}
	gtid, err := r.resumesByGTID(ctx)
	if err != nil || !gtid {
		return p, err
	}
	if r.cfg.Flavor == position.FlavorMariaDB {
		p.GTIDSet, err = r.mariaDBGTIDAt(ctx, p.File, p.Pos)
		return p, err
	}
	var purged sql.NullString
	if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_purged /* binlog-outbox */").Scan(&purged); err != nil {
		return position.Point{}, fmt.Errorf("read gtid_purged: %w", err)
	}
	p.GTIDSet, err = parseServerGTIDSet(r.cfg.Flavor, "gtid_purged", purged.String)
	return p, err
}

// mariaDBGTIDAt is the GTID position of MariaDB's binlog at file:pos, the
// transactions before it (BINLOG_GTID_POS). It fails when the server cannot
// tell (the file is gone, or pos is not an event's start).
func (r *Reader) mariaDBGTIDAt(ctx context.Context, file string, pos uint32) (position.GTIDSet, error) {
	var set sql.NullString
	if err := r.db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?) /* binlog-outbox */", file, pos).Scan(&set); err != nil {
		return position.GTIDSet{}, fmt.Errorf("read the GTID position at %s:%d (BINLOG_GTID_POS): %w", file, pos, err)
	}
	if !set.Valid {
		return position.GTIDSet{}, fmt.Errorf("%w: the server has no GTID position at %s:%d (BINLOG_GTID_POS is NULL): the file is gone or the offset is not an event's start",
			outbox.ErrPositionGone, file, pos)
	}
	return parseServerGTIDSet(position.FlavorMariaDB, "BINLOG_GTID_POS", set.String)
}

// mysqlStatusPoint reads the end of MySQL's binlog and its executed GTID set
// from one row of the binlog status statement.
func (r *Reader) mysqlStatusPoint(ctx context.Context) (position.Point, error) {
	srv, err := r.server(ctx)
	if err != nil {
		return position.Point{}, err
	}
	q := srv.BinlogStatusQuery()
	rows, err := r.db.QueryContext(ctx, q)
	if err != nil {
		return position.Point{}, outbox.WithHint(fmt.Errorf("read binlog position (%s): %w", q, err), "the relay's user needs REPLICATION CLIENT")
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return position.Point{}, fmt.Errorf("read binlog position: %w", err)
	}
	var p position.Point
	var executed string
	found := false
	err = mysqlserver.ScanRows(rows, func(vals []sql.RawBytes) {
		if found {
			return
		}
		found = true
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "file":
				p.File = string(vals[i])
			case "position":
				n, _ := strconv.ParseUint(string(vals[i]), 10, 32)
				p.Pos = uint32(n)
			case "executed_gtid_set":
				executed = string(vals[i])
			}
		}
	})
	if err != nil {
		return position.Point{}, fmt.Errorf("read binlog position: %w", err)
	}
	if p.File == "" {
		return position.Point{}, outbox.WithHint(errors.New("the server reports no binlog position: the binlog is off"),
			"enable it with log_bin (and binlog_format=ROW) in my.cnf and restart, or run with --mode poll")
	}
	// The status row wraps long sets over lines.
	executed = strings.NewReplacer("\n", "", " ", "").Replace(executed)
	p.GTIDSet, err = parseServerGTIDSet(position.FlavorMySQL, "Executed_Gtid_Set", executed)
	return p, err
}

// parseServerGTIDSet parses a GTID set the server reported as what.
func parseServerGTIDSet(flavor, what, s string) (position.GTIDSet, error) {
	set, err := position.ParseGTIDSet(flavor, s)
	if err != nil {
		return position.GTIDSet{}, fmt.Errorf("%s %q: %w", what, logging.Truncate(s, 200), err)
	}
	return set, nil
}

// convertFilePosition turns a file position of this server (what: the
// stored one, or --start-from's) into the GTID position at the same place
// where the server has GTIDs, so that the relay resumes by GTID set and
// survives a failover from now on. Only MariaDB can tell the set at a file
// position (BINLOG_GTID_POS); on MySQL, and when MariaDB cannot tell, the
// file position stays.
func (r *Reader) convertFilePosition(ctx context.Context, p position.Point, what string) (position.Point, bool) {
	if r.cfg.Flavor != position.FlavorMariaDB {
		return p, false
	}
	set, err := r.mariaDBGTIDAt(ctx, p.File, p.Pos)
	if err != nil {
		r.log.Warn(what+" stays a file position, which does not survive a database failover",
			logging.KeyError, err, "position", p.String())
		return p, false
	}
	r.log.Info("converted "+what+" to a GTID position, which survives a database failover",
		"file_position", p.String(), "gtid_set", logging.Truncate(set.String(), 200))
	p.GTIDSet = set
	return p, true
}
