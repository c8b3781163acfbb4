package canal

import (
	"context"
	"fmt"
	"strconv"

	"github.com/go-mysql-org/go-mysql/client"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// identity returns the server's id and (MySQL) uuid, read at session start.
func (r *Reader) identity() (uint32, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.serverID, r.serverUUID
}

// identityQuery reads what tells one server from another: server_id, and on
// MySQL server_uuid (MariaDB has none; its server_id must be unique in a
// replication topology).
func (r *Reader) identityQuery() string {
	if r.cfg.Flavor == position.FlavorMySQL {
		return "SELECT @@server_id, @@server_uuid /* binlog-outbox */"
	}
	return "SELECT @@server_id, '' /* binlog-outbox */"
}

func (r *Reader) loadIdentity(ctx context.Context) error {
	var id uint32
	var uuid string
	if err := r.db.QueryRowContext(ctx, r.identityQuery()).Scan(&id, &uuid); err != nil {
		return fmt.Errorf("read the server's identity: %w", err)
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
// without one, where Config.Start says. prev is the stored position as is;
// converted says the start is the stored file position turned into a GTID
// position, which the session stores at once.
func (r *Reader) resolveStart(ctx context.Context) (start position.Point, prev []byte, converted bool, err error) {
	if err := r.loadIdentity(ctx); err != nil {
		return position.Point{}, nil, false, err
	}
	raw, err := r.sink.Position(ctx)
	if err != nil {
		return position.Point{}, nil, false, err
	}
	if raw != nil {
		p, converted, err := r.storedStart(ctx, raw)
		return p, raw, converted, err
	}
	p, err := r.resolveFrom(ctx, r.cfg.Start)
	return p, nil, false, err
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

// resolveFrom turns a --start-from choice into a point on this server: a
// GTID position where the server has GTIDs (position.ResumesByGTID), so
// that it survives a failover, else a file position.
func (r *Reader) resolveFrom(ctx context.Context, s position.Start) (position.Point, error) {
	switch s.Kind {
	case position.StartNow:
		return r.nowPoint(ctx)
	case position.StartEarliest:
		return r.earliestPoint(ctx)
	case position.StartFilePos, position.StartGTID:
		// In the words of check (preflight's start-from check): the point
		// is the operator's choice, not a stored position gone.
		srv, err := r.server(ctx)
		if err != nil {
			return position.Point{}, err
		}
		if err := srv.CheckStart(ctx, r.db, s); err != nil {
			return position.Point{}, err
		}
		if s.Kind == position.StartGTID {
			set, _ := s.GTIDSetOn(r.cfg.Flavor) // checked
			return position.Point{GTIDSet: set}, nil
		}
		p, _ := r.convertFilePosition(ctx, position.Point{File: s.File, Pos: s.Pos}, "--start-from "+s.File+":"+strconv.FormatUint(uint64(s.Pos), 10))
		return p, nil
	}
	return position.Point{}, fmt.Errorf("%w: unknown start kind %d", outbox.ErrConfig, s.Kind)
}

// storedPoint decodes the stored position raw into the point it resumes
// from, refusing one a repair holds.
func (r *Reader) storedPoint(raw []byte) (position.Binlog, position.Point, error) {
	b, err := position.Decode(raw)
	if err != nil {
		return b, position.Point{}, outbox.WithHint(fmt.Errorf("%w: stored position at %s: %v", outbox.ErrConfig, r.cfg.PositionKey, err),
			"inspect it with `binlog-outbox position show` and replace it with `binlog-outbox position set`")
	}
	// Checked again at every session: a relay whose session failed while
	// a repair marked the position must not go on from under it.
	if err := b.RepairError(r.cfg.PositionKey); err != nil {
		return b, position.Point{}, err
	}
	p, err := b.Point()
	if err != nil {
		return b, position.Point{}, fmt.Errorf("%w: stored position at %s: %v", outbox.ErrConfig, r.cfg.PositionKey, err)
	}
	return b, p, nil
}

// storedStart is the point the stored position raw resumes from, checked
// against the server as check checks it (mysqlserver.Server.CheckResume);
// converted says a file position of this server became a GTID position
// (convertFilePosition).
func (r *Reader) storedStart(ctx context.Context, raw []byte) (p position.Point, converted bool, err error) {
	b, p, err := r.storedPoint(raw)
	if err != nil {
		return position.Point{}, false, err
	}
	srv, err := r.server(ctx)
	if err != nil {
		return position.Point{}, false, err
	}
	// The identity of this session, not of the relay's start: the address
	// may lead to another server now.
	srv.ServerID, srv.ServerUUID = r.identity()
	if err := srv.CheckResume(ctx, r.db, b, r.cfg.PositionKey); err != nil {
		return position.Point{}, false, err
	}
	if b.GTIDMode() {
		if !srv.Same(b.ServerID, b.ServerUUID) {
			r.noticeNewServer(b, srv.ServerID, srv.ServerUUID)
		}
		return p, false, nil
	}
	p, converted = r.convertFilePosition(ctx, p, "the stored file position")
	return p, converted, nil
}

// noticeNewServer logs, once per change, that the stored GTID position was
// written reading another server than the one the relay is connected to
// now: a failover, or the address moved to another server (a VIP, DNS or
// proxy flip). A GTID set means the same transactions on every server of
// the topology, so the relay resumes; an operator should still know.
func (r *Reader) noticeNewServer(b position.Binlog, id uint32, uuid string) {
	from, to := mysqlserver.Describe(b.ServerID, b.ServerUUID), mysqlserver.Describe(id, uuid)
	if r.noticed == from+">"+to {
		return
	}
	r.noticed = from + ">" + to
	r.log.Warn("connected to another server than the one the stored position was read from; resuming by GTID set",
		"stored_server", from, "server", to, "gtid_set", logging.Truncate(b.GTIDSet, 200), "addr", fmt.Sprintf("%s:%d", r.cfg.Host, r.cfg.Port))
}

// sameServer checks, on the binlog connection itself, that it reached the
// server the session's start was checked against: a file position is
// server-local, and the address may have moved to another server (a VIP,
// DNS or proxy flip) between the checks and the dump, or the checks' pool
// may still hold a connection to the old one.
func (r *Reader) sameServer(c *client.Conn) error {
	res, err := c.Execute(r.identityQuery())
	if err != nil {
		return fmt.Errorf("read the server's identity on the binlog connection: %w", err)
	}
	defer res.Close()
	id, err := res.GetUint(0, 0)
	if err != nil {
		return fmt.Errorf("read server_id on the binlog connection: %w", err)
	}
	uuid, err := res.GetString(0, 1)
	if err != nil {
		return fmt.Errorf("read server_uuid on the binlog connection: %w", err)
	}
	wantID, wantUUID := r.identity()
	if uint32(id) != wantID || uuid != wantUUID {
		return fmt.Errorf("%w: the binlog connection to %s:%d reached %s, the checks before it %s; starting over",
			errServerChanged, r.cfg.Host, r.cfg.Port, mysqlserver.Describe(uint32(id), uuid), mysqlserver.Describe(wantID, wantUUID))
	}
	return nil
}

// currentPosition reads the end of the binlog, with the statement the server
// version understands.
func (r *Reader) currentPosition(ctx context.Context) (string, uint32, error) {
	srv, err := r.server(ctx)
	if err != nil {
		return "", 0, err
	}
	return srv.BinlogPosition(ctx, r.db)
}

// server is the server the reader was configured for, or, where the caller
// (a test) gave its flavor only, the one it detects.
func (r *Reader) server(ctx context.Context) (mysqlserver.Server, error) {
	if r.cfg.Server.Flavor != "" {
		return r.cfg.Server, nil
	}
	return mysqlserver.Detect(ctx, r.db)
}
