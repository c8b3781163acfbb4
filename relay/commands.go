package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// What the commands beside run share with it: check's verdict, the reader
// `position set` checks a position with.

// CheckVerdict is the outcome of `check --mode requested` of rep: nil when
// the mode can run (with auto, when either can), or an
// preflight.ErrRequirements that names what failed; the report's lines
// give the fixes.
func CheckVerdict(rep preflight.Report, requested string) error {
	if requested == mode.Auto {
		if len(rep.Usable()) == 0 {
			return fmt.Errorf("%w: neither binlog nor poll mode can run", preflight.ErrRequirements)
		}
		return nil
	}
	failed := rep.Failed(preflight.Mode(requested))
	if len(failed) == 0 {
		return nil
	}
	names := make([]string, len(failed))
	for i, f := range failed {
		names[i] = f.Name
	}
	err := fmt.Errorf("%w for %s mode: %s", preflight.ErrRequirements, requested, strings.Join(names, ", "))
	// The way out on the hint line too, where the eye ends: with one
	// failure its fix, with more the lines that hold theirs.
	if len(failed) == 1 && failed[0].Fix != "" {
		return outbox.WithHint(err, "%s", failed[0].Fix)
	}
	return outbox.WithHint(err, "fix each FAIL line above as its fix: line says, then run check again")
}

// PositionReader connects to MySQL and builds the binlog reader that
// `position set` checks start with (NewReader), of the server it detects.
// The caller closes the pool.
func PositionReader(ctx context.Context, cfg settings.Config, positionKey string, sink *redisstream.Sink, start position.Start) (*canal.Reader, *sql.DB, error) {
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return nil, nil, fmt.Errorf("open mysql: %w", err)
	}
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("connect to mysql: %w", err)
	}
	reader, err := NewReader(cfg, positionKey, srv, db, sink, start)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return reader, db, nil
}
