package canal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// identity returns the server's id and (MySQL) uuid, read at session start.
func (r *Reader) identity() (uint32, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.serverID, r.serverUUID
}

func (r *Reader) loadIdentity(ctx context.Context) error {
	var id uint32
	if err := r.db.QueryRowContext(ctx, "SELECT @@server_id /* binlog-outbox */").Scan(&id); err != nil {
		return fmt.Errorf("read server_id: %w", err)
	}
	var uuid string
	if r.cfg.Flavor == position.FlavorMySQL {
		if err := r.db.QueryRowContext(ctx, "SELECT @@server_uuid /* binlog-outbox */").Scan(&uuid); err != nil {
			return fmt.Errorf("read server_uuid: %w", err)
		}
	}
	if id == r.cfg.ServerID {
		return outbox.WithHint(fmt.Errorf("%w: --server-id %d is the server's own server_id", outbox.ErrConfig, id),
			"choose a --server-id that no server or replica in the replication topology uses")
	}
	r.mu.Lock()
	r.serverID, r.serverUUID = id, uuid
	r.mu.Unlock()
	return nil
}

// resolveStart decides where the session starts: at the stored position, or,
// without one, where Config.Start says. prev is the stored position as is.
func (r *Reader) resolveStart(ctx context.Context) (start position.Point, prev []byte, err error) {
	if err := r.loadIdentity(ctx); err != nil {
		return position.Point{}, nil, err
	}
	raw, err := r.sink.Position(ctx)
	if err != nil {
		return position.Point{}, nil, err
	}
	if raw != nil {
		p, err := r.storedStart(ctx, raw)
		return p, raw, err
	}
	p, err := r.resolveFrom(ctx, r.cfg.Start)
	return p, nil, err
}

// StartPosition resolves a --start-from choice on the server into the
// position a first start would store, for `binlog-outbox position set`.
func (r *Reader) StartPosition(ctx context.Context, s position.Start) ([]byte, error) {
	if err := r.loadIdentity(ctx); err != nil {
		return nil, err
	}
	p, err := r.resolveFrom(ctx, s)
	if err != nil {
		return nil, err
	}
	return r.encode(p), nil
}

// resolveFrom turns a --start-from choice into a point on this server.
func (r *Reader) resolveFrom(ctx context.Context, s position.Start) (position.Point, error) {
	switch s.Kind {
	case position.StartNow:
		file, pos, err := r.currentPosition(ctx)
		if err != nil {
			return position.Point{}, err
		}
		return position.Point{File: file, Pos: pos}, nil
	case position.StartEarliest:
		logs, err := r.binaryLogs(ctx)
		if err != nil {
			return position.Point{}, err
		}
		if len(logs) == 0 {
			return position.Point{}, outbox.WithHint(errors.New("the server lists no binary logs"), "enable the binlog: log_bin=ON")
		}
		return position.Point{File: logs[0], Pos: 4}, nil
	case position.StartFilePos:
		if err := r.checkFile(ctx, s.File); err != nil {
			return position.Point{}, err
		}
		return position.Point{File: s.File, Pos: s.Pos}, nil
	case position.StartGTID:
		set, err := position.ParseGTIDSet(r.cfg.Flavor, s.GTIDSet)
		if err != nil {
			return position.Point{}, outbox.WithHint(fmt.Errorf("%w: --start-from %q: %v", outbox.ErrConfig, s.GTIDSet, err),
				"MySQL GTID sets look like 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42, MariaDB ones like 0-1-42")
		}
		return position.Point{GTIDSet: set}, nil
	}
	return position.Point{}, fmt.Errorf("%w: unknown start kind %d", outbox.ErrConfig, s.Kind)
}

func (r *Reader) storedStart(ctx context.Context, raw []byte) (position.Point, error) {
	b, err := position.Decode(raw)
	if err != nil {
		return position.Point{}, outbox.WithHint(fmt.Errorf("%w: stored position at %s: %v", outbox.ErrConfig, r.cfg.PositionKey, err),
			"inspect it with `binlog-outbox position show` and replace it with `binlog-outbox position set`")
	}
	if b.Flavor != r.cfg.Flavor {
		return position.Point{}, outbox.WithHint(fmt.Errorf("%w: the stored position belongs to a %s server, this is %s", outbox.ErrPositionGone, b.Flavor, r.cfg.Flavor), "%s", recoveryHint)
	}
	p, err := b.Point()
	if err != nil {
		return position.Point{}, fmt.Errorf("%w: stored position at %s: %v", outbox.ErrConfig, r.cfg.PositionKey, err)
	}
	if b.GTIDMode() {
		return p, nil
	}
	id, uuid := r.identity()
	if b.ServerID != id || (b.ServerUUID != "" && uuid != "" && b.ServerUUID != uuid) {
		return position.Point{}, outbox.WithHint(fmt.Errorf("%w: the stored position %s:%d belongs to server_id %d %s, connected to server_id %d %s; file positions are server-local",
			outbox.ErrPositionGone, b.File, b.Pos, b.ServerID, b.ServerUUID, id, uuid), "%s", recoveryHint)
	}
	if err := r.checkFile(ctx, b.File); err != nil {
		return position.Point{}, err
	}
	return p, nil
}

func (r *Reader) checkFile(ctx context.Context, file string) error {
	logs, err := r.binaryLogs(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(logs, file) {
		first := ""
		if len(logs) > 0 {
			first = logs[0]
		}
		return outbox.WithHint(fmt.Errorf("%w: binlog file %s is not on the server (it has %d files from %s); it was purged or the server is another one",
			outbox.ErrPositionGone, file, len(logs), first), "%s", recoveryHint)
	}
	return nil
}

// binaryLogs lists the binlog files the server has, oldest first.
func (r *Reader) binaryLogs(ctx context.Context) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, "SHOW BINARY LOGS /* binlog-outbox */")
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("list binary logs: %w", err), "the relay's user needs REPLICATION CLIENT (MariaDB: BINLOG MONITOR), and log_bin must be ON")
	}
	defer rows.Close()
	var names []string
	err = mysqlserver.ScanRows(rows, func(vals []sql.RawBytes) {
		names = append(names, string(vals[0]))
	})
	return names, err
}

// currentPosition reads the end of the binlog, with the statement the server
// version understands.
func (r *Reader) currentPosition(ctx context.Context) (string, uint32, error) {
	srv := r.cfg.Server
	if srv.Flavor == "" {
		var err error
		if srv, err = mysqlserver.Detect(ctx, r.db); err != nil {
			return "", 0, err
		}
	}
	return srv.BinlogPosition(ctx, r.db)
}
