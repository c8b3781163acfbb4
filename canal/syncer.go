package canal

import (
	"context"
	"log/slog"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/binlogrow"
)

// syncerConfig configures go-mysql for one session: lk dials (and counts the
// bytes the watchdog sees), q receives the events, bounded by bytes. Without
// them (the layout proof's scan) go-mysql dials and queues as it does.
func (r *Reader) syncerConfig(lk *link, q *eventQueue) replication.BinlogSyncerConfig {
	var walk func() bool
	if q != nil {
		walk = q.walking
	}
	cfg := binlogrow.DecodeConfigWalking(r.cfg.Flavor, tableMatcher(r.sources.matches), walk)
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
