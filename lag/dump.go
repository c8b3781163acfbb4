package lag

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/position"
)

// DefaultDumpTimeout bounds one short binlog dump, connection included.
const DefaultDumpTimeout = 10 * time.Second

// maxDumpEvents bounds the events a dump reads before it gives up looking:
// before the first event of a transaction the server sends only a few of
// its own (a rotate, the format description, GTID lists).
const maxDumpEvents = 32

// Dumper reads the timestamps of binlog events over short binlog dumps: SQL
// shows no binlog times (SHOW BINARY LOGS has names and sizes, SHOW BINLOG
// EVENTS no timestamps).
//
// A dump registers as no replica: it announces server id 0, which makes
// MySQL and MariaDB end the dump at the end of the binlog instead of waiting,
// and keeps them from closing another replica's connection of the same id
// (the relay's own, with --server-id). go-mysql's BinlogSyncer refuses id 0,
// so the few packets are spoken here. The user needs REPLICATION SLAVE, as
// the relay's binlog connection does.
type Dumper struct {
	// Addr is host:port of the server (or a unix socket's path); User,
	// Password and TLS reach it as the relay's binlog connection does.
	Addr     string
	User     string
	Password string
	TLS      *tls.Config
	// Flavor is position.FlavorMySQL or position.FlavorMariaDB.
	Flavor string
	// Timeout bounds one dump (default DefaultDumpTimeout).
	Timeout time.Duration
}

// dumpFlagNonBlock asks the server to end the dump at the end of the binlog
// (BINLOG_DUMP_NON_BLOCK) rather than wait for new events.
const dumpFlagNonBlock = 1

// FileStart returns when the server began the binlog file: the timestamp of
// its format description event, the file's first. It is also about when the
// file before it was last written (the server rotates by closing one file
// and opening the next at once).
func (d Dumper) FileStart(ctx context.Context, file string) (time.Time, error) {
	var at time.Time
	err := d.dump(ctx, file, 4, func(h *replication.EventHeader) bool {
		if h.EventType == replication.FORMAT_DESCRIPTION_EVENT && h.Timestamp != 0 {
			at = time.Unix(int64(h.Timestamp), 0)
			return true
		}
		return false
	})
	if err != nil {
		return time.Time{}, err
	}
	if at.IsZero() {
		return time.Time{}, fmt.Errorf("binlog dump of %s: no format description event at its start", file)
	}
	return at, nil
}

// FirstAfter returns the timestamp of the first event a transaction wrote
// at or after file:pos (the server's own events, rotates, format
// descriptions and GTID lists, are passed over), or ok false when the binlog
// ends before one. The timestamp is the start of the transaction's first
// statement, in whole seconds.
func (d Dumper) FirstAfter(ctx context.Context, file string, pos uint32) (at time.Time, ok bool, err error) {
	err = d.dump(ctx, file, pos, func(h *replication.EventHeader) bool {
		if h.Timestamp == 0 || serverEvent(h.EventType) {
			return false
		}
		at, ok = time.Unix(int64(h.Timestamp), 0), true
		return true
	})
	return at, ok, err
}

// serverEvent reports event types the server writes on its own, not for a
// transaction.
func serverEvent(t replication.EventType) bool {
	switch t {
	case replication.ROTATE_EVENT, replication.FORMAT_DESCRIPTION_EVENT, replication.HEARTBEAT_EVENT,
		replication.HEARTBEAT_LOG_EVENT_V2, replication.PREVIOUS_GTIDS_EVENT, replication.STOP_EVENT,
		replication.MARIADB_GTID_LIST_EVENT, replication.MARIADB_BINLOG_CHECKPOINT_EVENT,
		replication.MARIADB_START_ENCRYPTION_EVENT:
		return true
	}
	return false
}

// dump reads the events from file:pos and passes each header to fn until fn
// returns true, the binlog ends, or maxDumpEvents were read.
func (d Dumper) dump(ctx context.Context, file string, pos uint32, fn func(*replication.EventHeader) bool) error {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDumpTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Handshake, queries and the dump all end by the deadline: a
		// silent server cannot hold the probe.
		if err := c.SetDeadline(deadline); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	var opts []client.Option
	if d.TLS != nil {
		opts = append(opts, func(c *client.Conn) error {
			c.SetTLSConfig(d.TLS)
			return nil
		})
	}
	c, err := client.ConnectWithDialer(ctx, "", d.Addr, d.User, d.Password, "", dialer, opts...)
	if err != nil {
		return fmt.Errorf("binlog dump: connect: %w", err)
	}
	defer c.Close()
	// Checksum-aware, as every replica since MySQL 5.6 says it is: the
	// server refuses a dump to one that is not when binlog_checksum is on.
	if _, err := c.Execute("SET /* binlog-outbox */ @master_binlog_checksum = @@global.binlog_checksum, @source_binlog_checksum = @@global.binlog_checksum"); err != nil {
		return fmt.Errorf("binlog dump: announce checksums: %w", err)
	}
	if d.Flavor == position.FlavorMariaDB {
		// MARIA_SLAVE_CAPABILITY_GTID: MariaDB sends its GTID events as
		// such, not as dummy events of another type.
		if _, err := c.Execute("SET /* binlog-outbox */ @mariadb_slave_capability = 4"); err != nil {
			return fmt.Errorf("binlog dump: announce capabilities: %w", err)
		}
	}
	c.ResetSequence()
	cmd := make([]byte, 4+1+4+2+4+len(file))
	cmd[4] = mysql.COM_BINLOG_DUMP
	binary.LittleEndian.PutUint32(cmd[5:], pos)
	binary.LittleEndian.PutUint16(cmd[9:], dumpFlagNonBlock)
	binary.LittleEndian.PutUint32(cmd[11:], 0) // server id 0: no replica
	copy(cmd[15:], file)
	if err := c.WritePacket(cmd); err != nil {
		return fmt.Errorf("binlog dump of %s:%d: %w", file, pos, err)
	}
	for range maxDumpEvents {
		data, err := c.ReadPacket()
		if err != nil {
			return fmt.Errorf("binlog dump of %s:%d: %w", file, pos, err)
		}
		switch {
		case len(data) == 0:
			return fmt.Errorf("binlog dump of %s:%d: empty packet", file, pos)
		case data[0] == mysql.EOF_HEADER && len(data) < 9:
			return nil // the end of the binlog
		case data[0] == mysql.ERR_HEADER:
			return fmt.Errorf("binlog dump of %s:%d: %w", file, pos, serverError(data))
		}
		var h replication.EventHeader
		if err := h.Decode(data[1:]); err != nil {
			return fmt.Errorf("binlog dump of %s:%d: %w", file, pos, err)
		}
		if fn(&h) {
			return nil
		}
	}
	return nil
}

// serverError reads an error packet: 0xff, the code, '#' and the SQL state,
// the message.
func serverError(data []byte) error {
	if len(data) < 3 {
		return errors.New("malformed error packet")
	}
	code := binary.LittleEndian.Uint16(data[1:])
	msg := data[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		msg = msg[6:]
	}
	return fmt.Errorf("server error %d: %s", code, msg)
}
