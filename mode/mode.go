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
	// Save stores mode; a later Load returns it, and Prepared "".
	Save(ctx context.Context, mode string) error
	// Prepared returns the mode the documented switch prepared the table
	// for (Prepare), or "" when none.
	Prepared(ctx context.Context) (string, error)
	// Prepare records that the documented switch to mode was made:
	// mark-appended marked what binlog mode appended (poll), or `position
	// set` stored where binlog mode starts (binlog).
	Prepare(ctx context.Context, mode string) error
	// Key names where the mode is kept, for messages.
	Key() string
}

// stored is what a Store holds of one table.
type stored struct {
	mode, prepared, key string
}

// load reads the stored mode and the prepared switch of s.
func load(ctx context.Context, s Store) (stored, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return stored{}, fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
	}
	st := stored{mode: m, key: s.Key()}
	if m != "" {
		if st.prepared, err = s.Prepared(ctx); err != nil {
			return stored{}, fmt.Errorf("read the switch prepared for this table (%s): %w", s.Key(), err)
		}
	}
	return st, nil
}

// PrepareSwitch records, for the documented switch to mode, that its
// preparing step was made (see Store.Prepare), when the table ran in the
// other mode; it does nothing for a table that ran in mode or in none.
func PrepareSwitch(ctx context.Context, s Store, mode string) (prepared bool, err error) {
	m, err := s.Load(ctx)
	if err != nil {
		return false, fmt.Errorf("read the mode this table ran in (%s): %w", s.Key(), err)
	}
	if m == "" || m == mode {
		return false, nil
	}
	if err := s.Prepare(ctx, mode); err != nil {
		return false, fmt.Errorf("record the switch to %s mode (%s): %w", mode, s.Key(), err)
	}
	return true, nil
}

// Switch decides whether a relay of mode requested (binlog or poll) may run
// on a table that ran in mode from (stored under key; "" none) and for which
// the documented switch prepared mode prepared: only the procedure of
// docs/switching-modes.md switches, since poll mode after binlog mode would
// append again every row binlog mode appended, and binlog mode starting now
// after polling would skip the rows not yet polled. The refusal names the
// steps; `check --mode` reports it as run does.
func Switch(from, prepared, requested, key string) error {
	if from == "" || from == requested || prepared == requested {
		return nil
	}
	steps := "stop the binlog relay and its standbys, run `binlog-outbox mark-appended` (it marks what binlog mode appended), then start `binlog-outbox run --mode poll`; " +
		"or, without a stop, run the binlog relay with --dedupe-window 24h first and the pollers with the same window"
	if requested == Binlog {
		steps = "run `binlog-outbox position set --start-from now` (where binlog mode will start), wait until the pollers sent every row committed before it, " +
			"then start `binlog-outbox run --mode binlog --dedupe-window 24h` with the pollers' window"
	}
	return outbox.WithHint(fmt.Errorf("%w: --mode %s: this table ran in %s mode (%s), and the switch was not prepared: %s",
		outbox.ErrConfig, requested, from, key, switchCost(from, requested)),
		"to switch, follow docs/switching-modes.md: %s; to go on as before, run with --mode %s or --mode auto", steps, from)
}

// Resolve chooses the mode (see Choose) and stores it when it changed.
func Resolve(ctx context.Context, log *slog.Logger, rep preflight.Report, requested string, s Store) (string, error) {
	st, err := load(ctx, s)
	if err != nil {
		return "", err
	}
	m, err := Choose(log, rep, requested, st.mode, st.prepared, s.Key())
	if err != nil {
		return "", err
	}
	if m != st.mode {
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
//   - --mode binlog or poll runs, and switches each table whose switch was
//     prepared (Switch); a table that ran in the other mode unprepared is
//     refused;
//   - auto mode keeps the mode the tables ran in (a table with none yet joins
//     them), and on a first start prefers binlog mode and falls back to poll
//     mode as for one table. Tables that ran in different modes are refused:
//     one relay runs one mode, and auto mode never switches a table by itself.
//
// Nothing is stored when it fails.
func ResolveSeveral(ctx context.Context, log *slog.Logger, rep preflight.Report, requested string, stores []Store) (string, error) {
	stored := make([]string, len(stores))
	var inBinlog, inPoll []string
	var refused error
	for i, s := range stores {
		st, err := load(ctx, s)
		if err != nil {
			return "", err
		}
		m := st.mode
		stored[i] = m
		if requested != Auto && refused == nil {
			refused = Switch(m, st.prepared, requested, st.key)
		}
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
	case refused != nil:
		return "", refused
	case requested != Auto:
		for i, s := range stores {
			if stored[i] != "" && stored[i] != requested {
				logSwitch(log, stored[i], requested, s.Key())
			}
		}
		m, err = requested, rep.Err(preflight.Mode(requested))
	case len(inBinlog) > 0 && len(inPoll) > 0:
		return "", outbox.WithHint(fmt.Errorf("%w: auto mode: the tables of --table ran in different modes, %s in binlog mode and %s in poll mode, and one relay relays all its tables in one mode",
			outbox.ErrConfig, shortKeys(inBinlog), shortKeys(inPoll)),
			"switch the tables of one mode deliberately as docs/switching-modes.md describes and run with --mode binlog or --mode poll; or relay each group with a relay of its own, each with its own --table")
	case len(inBinlog) > 0:
		m, err = Choose(log, rep, Auto, Binlog, "", inBinlog[0])
	case len(inPoll) > 0:
		m, err = Choose(log, rep, Auto, Poll, "", inPoll[0])
	default:
		m, err = Choose(log, rep, Auto, "", "", "")
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
// switch, which auto mode refuses and --mode binlog or poll makes only when
// it was prepared (Switch). A table without a stored mode gets relayMode.
func ResolveAdded(ctx context.Context, log *slog.Logger, requested, relayMode string, s Store) error {
	st, err := load(ctx, s)
	if err != nil {
		return err
	}
	stored := st.mode
	if stored == relayMode {
		return nil
	}
	if stored != "" {
		if requested == Auto {
			return outbox.WithHint(fmt.Errorf("%w: auto mode: the relay runs %s mode, and a table it found since the start ran in %s mode (%s)", outbox.ErrConfig, relayMode, stored, s.Key()),
				"auto mode never switches a table by itself (%s); switch it deliberately as docs/switching-modes.md describes and run with --mode %s, or leave it out of --table", switchCost(stored, relayMode), relayMode)
		}
		if err := Switch(stored, st.prepared, relayMode, st.key); err != nil {
			return err
		}
		logSwitch(log, stored, relayMode, s.Key())
	}
	if err := s.Save(ctx, relayMode); err != nil {
		return fmt.Errorf("store the mode (%s): %w", s.Key(), err)
	}
	return nil
}

// logSwitch logs, once per table, that --mode switches it, as the
// documented procedure prepared (Switch refuses any other switch).
func logSwitch(log *slog.Logger, from, to, key string) {
	log.Info("switching modes as prepared (docs/switching-modes.md)", "from", from, "to", to, "mode_key", key)
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
// switch is deliberate: the steps of docs/switching-modes.md, which record
// the prepared mode, then --mode (Switch refuses it unprepared).
func Choose(log *slog.Logger, rep preflight.Report, mode, stored, prepared, modeKey string) (string, error) {
	switch mode {
	case Binlog, Poll:
		if err := Switch(stored, prepared, mode, modeKey); err != nil {
			return "", err
		}
		if stored != "" && stored != mode {
			logSwitch(log, stored, mode, modeKey)
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
