package canal

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/position"
)

// syncerConfig configures go-mysql for one session: lk dials (and counts the
// bytes the watchdog sees), q receives the events, bounded by bytes. Without
// them (the layout proof's scan) go-mysql dials and queues as it does.
func (r *Reader) syncerConfig(lk *link, q *eventQueue) replication.BinlogSyncerConfig {
	cfg := decodeConfig(r.cfg.Flavor, r.sources.matches)
	cfg.ServerID = r.cfg.ServerID
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.TLSConfig = r.cfg.Host, r.cfg.Port, r.cfg.User, r.cfg.Password, r.cfg.TLSConfig
	cfg.HeartbeatPeriod = r.cfg.HeartbeatPeriod
	// No per-packet read deadline: re-arming it for every packet cost a
	// sixth of the reader's CPU. The session's watchdog closes a connection
	// that stays silent past ReadTimeout instead.
	cfg.ReadTimeout = 0
	cfg.DisableRetrySync = true // recovery restarts from the stored position
	cfg.EventCacheCount = r.cfg.EventCacheCount
	if lk != nil {
		cfg.Dialer = lk.dial
	}
	if q != nil {
		// Events go to q, bounded by bytes, not to go-mysql's channel.
		cfg.SynchronousEventHandler = q
		cfg.EventCacheCount = 1
		// The machine follows the GTID set itself, copying it once per
		// stored position; go-mysql would copy it for every transaction.
		cfg.DiscardGTIDSet = true
	}
	cfg.Logger = slog.New(warnOnly{r.log.Handler()}).With("component", "go-mysql")
	cfg.Localhost = "binlog-outbox"
	// The reader may pause while Redis is slow; the server must not give up
	// on the dump connection meanwhile (net_write_timeout, 60s).
	cfg.Option = func(c *client.Conn) error {
		if _, err := c.Execute("SET SESSION net_write_timeout = GREATEST(@@SESSION.net_write_timeout, 600) /* binlog-outbox */"); err != nil {
			return err
		}
		// A file position checked on one server must not be read on another.
		return r.sameServer(c)
	}
	return cfg
}

// decodeConfig is the part of the syncer's configuration that decides what
// the events look like: how rows, times, decimals and JSON are decoded, and
// which rows are decoded at all: those of the tables match accepts. match
// runs on go-mysql's parsing goroutine. The tests that replay binlog files recorded
// by real MySQL servers build their parser from it, so what they check is
// what the live reader decodes.
func decodeConfig(flavor string, match func(database, table string) bool) replication.BinlogSyncerConfig {
	cfg := replication.BinlogSyncerConfig{
		Flavor:                  flavor,
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		UseDecimal:              false,
		// MariaDB 11.4+ writes LogPos 0 inside transactions.
		FillZeroLogPos:            flavor == position.FlavorMariaDB,
		PayloadDecoderConcurrency: 1,
	}
	// The parser calls the function on one goroutine (compressed
	// transactions too: PayloadDecoderConcurrency is 1), so the cache is
	// its own.
	var matched nameCache[bool]
	var images imageDecoder
	// Table maps' optional metadata is decoded for the followed tables
	// only, when their rows are (tablemeta.go).
	var metas tableMetas
	cfg.TableMapOptionalMetaDecodeFunc = metas.stash
	// imageDecoder renders values as go-mysql does with these settings
	// only; with others every row is go-mysql's to decode.
	ownDecoder := cfg.TimestampStringLocation == time.UTC && !cfg.ParseTime && !cfg.UseDecimal
	cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
		pos, err := ev.DecodeHeader(data)
		if err != nil {
			return err
		}
		if ev.Flags&replication.RowsEventStmtEndFlag != 0 {
			// go-mysql forgets the statement's table maps after this event.
			defer metas.statementEnd()
		}
		if ev.Table == nil {
			return nil
		}
		ok, known := matched.get(ev.Table)
		if !known {
			ok = match(string(ev.Table.Schema), string(ev.Table.Table))
			matched.put(ev.Table, ok)
		}
		// Rows of other tables are never decoded: on a busy server they are
		// most of the binlog.
		if !ok {
			return nil
		}
		if err := metas.complete(ev.Table); err != nil {
			return err
		}
		// The relay reads the INSERTs of its tables; their UPDATEs and
		// DELETEs (a clean-up of relayed rows) only need the header, as
		// the rows of other tables do. Rows events of a type go-mysql
		// cannot name are decoded, for the guard to stop at (guard.go).
		if t := ev.Type(); t == replication.EnumRowsEventTypeUpdate || t == replication.EnumRowsEventTypeDelete {
			return nil
		}
		if ownDecoder && images.decode(ev, pos, data) {
			return nil
		}
		return ev.DecodeData(pos, data)
	}
	return cfg
}

// warnOnly passes go-mysql's warnings and errors on and drops its chatter
// (it logs every connect and rotate at info, and its config as unencodable
// JSON); the reader logs what an operator needs itself.
type warnOnly struct{ slog.Handler }

// Enabled implements slog.Handler.
func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h warnOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnOnly{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
