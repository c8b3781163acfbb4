// Package mode decides which mode relays an outbox table: binlog mode (tail
// the binary log, exactly once) or poll mode (SELECT ... FOR UPDATE SKIP
// LOCKED). The choice weighs the requested mode (--mode), what the preflight
// found, and the mode the table was relayed in before, which is kept in
// Redis: auto mode must never switch by itself, since polling after binlog
// mode would append again every row binlog mode appended, and binlog mode
// starting "now" after polling would skip the rows not yet polled.
package mode

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/preflight"
)

// The modes --mode accepts.
const (
	Binlog = string(preflight.ModeBinlog)
	Poll   = string(preflight.ModePoll)
	// Auto prefers binlog mode on a first start, then keeps the mode the
	// table was relayed in.
	Auto = "auto"
)

// Parse validates a --mode value; case does not matter.
func Parse(s string) (string, error) {
	m := strings.ToLower(s)
	if m != Auto && m != Binlog && m != Poll {
		return "", fmt.Errorf("%w: --mode %q: want binlog, poll or auto", outbox.ErrConfig, s)
	}
	return m, nil
}

// Store keeps the mode a table was relayed in; redisstream.ModeStore
// implements it.
type Store interface {
	// Load returns the stored mode, or "" when none is stored.
	Load(ctx context.Context) (string, error)
	// Save stores mode; a later Load returns it.
	Save(ctx context.Context, mode string) error
	// Key names where the mode is kept, for messages.
	Key() string
}

// Resolve chooses the mode (see Choose) and stores it when it changed.
func Resolve(ctx context.Context, log *slog.Logger, rep preflight.Report, requested string, s Store) (string, error) {
	stored, err := s.Load(ctx)
	if err != nil {
		return "", fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
	}
	m, err := Choose(log, rep, requested, stored, s.Key())
	if err != nil {
		return "", err
	}
	if m != stored {
		if err := s.Save(ctx, m); err != nil {
			return "", fmt.Errorf("store the mode (%s): %w", s.Key(), err)
		}
	}
	return m, nil
}

// ResolveSeveral chooses the mode of a relay of several tables: binlog mode,
// the only one that relays several tables in one process, so poll mode is
// refused and auto mode never falls back to it. Each table's stored mode
// counts as it does for a table alone: auto mode does not take over a table
// relayed in poll mode (that would be a switch, made deliberately), and
// --mode binlog over one warns as a switch does. binlog is stored for every
// table once all of them can take it, so that a relay of one of them alone
// later knows it ran in binlog mode.
func ResolveSeveral(ctx context.Context, log *slog.Logger, rep preflight.Report, requested string, stores []Store) (string, error) {
	if requested == Poll {
		return "", outbox.WithHint(fmt.Errorf("%w: poll mode relays one table, and --table names several", outbox.ErrConfig),
			"run binlog mode (--mode binlog or auto), which relays every table with one position; or one poll relay per table, each with its own --table")
	}
	stored := make([]string, len(stores))
	for i, s := range stores {
		m, err := s.Load(ctx)
		if err != nil {
			return "", fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
		}
		stored[i] = m
		if m != Poll {
			continue
		}
		if requested == Auto {
			return "", outbox.WithHint(fmt.Errorf("%w: auto mode: a table of --table is relayed in poll mode (%s), and several tables are relayed in binlog mode only", outbox.ErrConfig, s.Key()),
				"switch that table to binlog mode deliberately as docs/switching-modes.md describes, then run with --mode binlog; or relay it on its own in poll mode and leave it out of --table")
		}
		log.Warn("switching modes: follow docs/switching-modes.md to lose and repeat nothing", "from", m, "to", Binlog, "mode_key", s.Key())
	}
	if err := rep.Err(preflight.ModeBinlog); err != nil {
		return "", err
	}
	for i, s := range stores {
		if stored[i] != Binlog {
			if err := s.Save(ctx, Binlog); err != nil {
				return "", fmt.Errorf("store the mode (%s): %w", s.Key(), err)
			}
		}
	}
	return Binlog, nil
}

// Choose applies the requested mode (--mode) to the preflight report and to the mode the
// table ran in before (stored in Redis). Auto mode prefers binlog mode on a
// first start and says in one line why it falls back to polling; after that
// it stays with the mode it chose. Changing modes silently would lose or
// repeat events: poll mode would re-append every row binlog mode left
// unmarked, binlog mode starting "now" would skip rows not yet polled. A
// switch is deliberate: --mode and docs/switching-modes.md.
func Choose(log *slog.Logger, rep preflight.Report, mode, stored, modeKey string) (string, error) {
	switch mode {
	case Binlog, Poll:
		switch {
		case stored == Binlog && mode == Poll:
			log.Warn("switching modes: poll mode appends again every row binlog mode appended and nobody marked; run `binlog-outbox mark-appended` first (docs/switching-modes.md)",
				"from", stored, "to", mode)
		case stored != "" && stored != mode:
			log.Warn("switching modes: follow docs/switching-modes.md to lose and repeat nothing", "from", stored, "to", mode)
		}
		return mode, rep.Err(preflight.Mode(mode))
	}
	switch stored {
	case Binlog:
		if err := rep.Err(preflight.ModeBinlog); err != nil {
			return "", outbox.WithHint(fmt.Errorf("auto mode: this table is relayed in binlog mode (%s), and binlog mode cannot run: %w", modeKey, err),
				"%s; auto mode never falls back to polling once binlog mode ran (polling would append again every row binlog mode appended); to switch for good follow docs/switching-modes.md", outbox.HintOf(err))
		}
		return Binlog, nil
	case Poll:
		if len(rep.Failed(preflight.ModeBinlog)) == 0 {
			log.Info("auto mode: binlog mode is available; this table is relayed in poll mode, switch deliberately (docs/switching-modes.md)")
		}
		return Poll, rep.Err(preflight.ModePoll)
	}
	failed := rep.Failed(preflight.ModeBinlog)
	if len(failed) == 0 {
		log.Info("auto mode: binlog requirements met, using binlog mode")
		return Binlog, nil
	}
	if err := rep.Err(preflight.ModePoll); err != nil {
		return "", fmt.Errorf("auto mode: neither mode can run: %w", err)
	}
	log.Warn("auto mode: binlog mode unavailable, using poll mode",
		"reason", failed[0].Name+": "+failed[0].Detail, logging.KeyHint, failed[0].Fix,
		"how", "meet the binlog requirements (`binlog-outbox check --mode binlog` lists them), then switch as docs/switching-modes.md describes for exactly-once binlog mode")
	return Poll, nil
}
