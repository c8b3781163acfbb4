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

// ResolveSeveral chooses the one mode of a relay of several tables (more
// than one --table, or a pattern) and stores it for every table: binlog mode
// reads the binlog once for all of them, poll mode runs a poller per table.
// Each table's stored mode counts as it does for a table alone (Choose), so
// that a relay of one of them alone later keeps to it:
//
//   - --mode binlog or poll insists, and warns of each table it switches;
//   - auto mode keeps the mode the tables ran in (a table with none yet joins
//     them), and on a first start prefers binlog mode and falls back to poll
//     mode as for one table. Tables that ran in different modes are refused:
//     one relay runs one mode, and auto mode never switches a table by itself.
//
// Nothing is stored when it fails.
func ResolveSeveral(ctx context.Context, log *slog.Logger, rep preflight.Report, requested string, stores []Store) (string, error) {
	stored := make([]string, len(stores))
	var inBinlog, inPoll []string
	for i, s := range stores {
		m, err := s.Load(ctx)
		if err != nil {
			return "", fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
		}
		stored[i] = m
		switch m {
		case Binlog:
			inBinlog = append(inBinlog, s.Key())
		case Poll:
			inPoll = append(inPoll, s.Key())
		}
	}
	var m string
	var err error
	switch {
	case requested != Auto:
		for i, s := range stores {
			if stored[i] != "" && stored[i] != requested {
				warnSwitch(log, stored[i], requested, s.Key())
			}
		}
		m, err = requested, rep.Err(preflight.Mode(requested))
	case len(inBinlog) > 0 && len(inPoll) > 0:
		return "", outbox.WithHint(fmt.Errorf("%w: auto mode: the tables of --table ran in different modes, %s in binlog mode and %s in poll mode, and one relay relays all its tables in one mode",
			outbox.ErrConfig, shortKeys(inBinlog), shortKeys(inPoll)),
			"switch the tables of one mode deliberately as docs/switching-modes.md describes and run with --mode binlog or --mode poll; or relay each group with a relay of its own, each with its own --table")
	case len(inBinlog) > 0:
		m, err = Choose(log, rep, Auto, Binlog, inBinlog[0])
	case len(inPoll) > 0:
		m, err = Choose(log, rep, Auto, Poll, inPoll[0])
	default:
		m, err = Choose(log, rep, Auto, "", "")
	}
	if err != nil {
		return "", err
	}
	for i, s := range stores {
		if stored[i] != m {
			if err := s.Save(ctx, m); err != nil {
				return "", fmt.Errorf("store the mode (%s): %w", s.Key(), err)
			}
		}
	}
	return m, nil
}

// ResolveAdded claims for relayMode a table that a relay of several tables
// starts to relay while it runs (a pattern matched a table created since):
// as at the start (ResolveSeveral), a table whose stored mode differs is a
// switch, which auto mode refuses and --mode binlog or poll makes with a
// warning. A table without a stored mode gets relayMode.
func ResolveAdded(ctx context.Context, log *slog.Logger, requested, relayMode string, s Store) error {
	stored, err := s.Load(ctx)
	if err != nil {
		return fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
	}
	if stored == relayMode {
		return nil
	}
	if stored != "" {
		if requested == Auto {
			return outbox.WithHint(fmt.Errorf("%w: auto mode: the relay runs %s mode, and a table it found since the start ran in %s mode (%s)", outbox.ErrConfig, relayMode, stored, s.Key()),
				"auto mode never switches a table by itself (%s); switch it deliberately as docs/switching-modes.md describes and run with --mode %s, or leave it out of --table", switchCost(stored, relayMode), relayMode)
		}
		warnSwitch(log, stored, relayMode, s.Key())
	}
	if err := s.Save(ctx, relayMode); err != nil {
		return fmt.Errorf("store the mode (%s): %w", s.Key(), err)
	}
	return nil
}

// warnSwitch logs, once per table, that --mode switches it from one mode to
// the other, and what that takes.
func warnSwitch(log *slog.Logger, from, to, key string) {
	if from == Binlog && to == Poll {
		log.Warn("switching modes: poll mode appends again every row binlog mode appended and nobody marked; run `binlog-outbox mark-appended` first (docs/switching-modes.md)",
			"from", from, "to", to, "mode_key", key)
		return
	}
	log.Warn("switching modes: follow docs/switching-modes.md to lose and repeat nothing", "from", from, "to", to, "mode_key", key)
}

// switchCost says what a switch made without the documented steps does.
func switchCost(from, to string) string {
	if from == Binlog && to == Poll {
		return "polling would append again every row binlog mode appended"
	}
	return "binlog mode starting now would skip the rows not yet polled"
}

// shortKeys names the first few keys, for messages.
func shortKeys(keys []string) string {
	if len(keys) > 3 {
		return strings.Join(keys[:3], ", ") + fmt.Sprintf(" and %d more", len(keys)-3)
	}
	return strings.Join(keys, ", ")
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
		if stored != "" && stored != mode {
			warnSwitch(log, stored, mode, modeKey)
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
