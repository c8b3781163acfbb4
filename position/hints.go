package position

import (
	"errors"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// The ways on from a point the server cannot start a dump at, in the same
// words wherever the relay, `check` or `position set` meets one.

// HintGone is the way on when the binlog the stored file position points
// into is gone (purged, or a different server).
const HintGone = "the binlog the stored position points into is gone (purged, or a different server). Events committed in the gap were not relayed. " +
	"Run `binlog-outbox repair` (a dry run: the committed rows no stream holds), then, with the relay stopped, `binlog-outbox repair --apply`: it appends them once " +
	"and stores the position run goes on from, while producers keep writing (docs/incidents.md). " +
	"Otherwise `binlog-outbox position set --start-from earliest` re-reads all the binlog the server still has (consumers deduplicate by message_id), " +
	"and `--start-from now` accepts the gap; " +
	"and keep binlogs longer (binlog_expire_logs_seconds) than the relay may be down"

// HintGTIDGone is the way on when the server lacks transactions of the
// stored GTID set, or purged those after it. With asynchronous replication
// the first is the failover case: the old primary committed transactions,
// the relay read them and appended their events, and the replica promoted
// in its place never received them.
const HintGTIDGone = "the server does not have every transaction of the stored GTID set in its binlog: after a failover, the old primary committed transactions " +
	"that it never shipped to the server promoted in its place (the relay may have appended their events: the streams hold events whose rows the new primary does not have), " +
	"or the binlog holding them was purged. With the relay stopped, `binlog-outbox repair` lists those entries (it never deletes them) and the committed rows no stream holds; " +
	"once the consumers know what the entries mean, `binlog-outbox repair --apply --accept-foreign <n>` appends the rows once and stores a position of this server to go on from, " +
	"while producers keep writing (docs/incidents.md, failover gap). " +
	"Otherwise `binlog-outbox position set --start-from <gtid set>` with the GTID position the promoted server had when it was promoted " +
	"(its @@gtid_binlog_pos, MySQL: @@gtid_executed, at that moment) relays everything written since, " +
	"`binlog-outbox position set --start-from earliest` re-reads all the binlog the server has (consumers deduplicate by message_id; docs/database-failover.md), " +
	"and `--start-from now` accepts the gap; " +
	"and keep binlogs longer (binlog_expire_logs_seconds) than the relay may be down"

// hintNotAStart is the way on from a stored file position that is no
// transaction's start: written by hand, or by a tool that guessed.
const hintNotAStart = "the stored position does not point at the start of a transaction, so no dump can start there; with the relay stopped, " +
	"`binlog-outbox repair` lists the committed rows no stream holds and `repair --apply` appends them once and stores a position it proved (docs/incidents.md), " +
	"or `binlog-outbox position set --start-from <file>:<offset>` with the offset of a transaction's start (SHOW BINLOG EVENTS IN '<file>' lists the events: " +
	"a transaction starts at a Gtid event, MySQL: Gtid or Anonymous_Gtid)"

// hintGiven is the way on from a --start-from the server cannot start at.
const hintGiven = "give a point of this server's binlog where a transaction starts: SHOW BINARY LOGS lists the files and SHOW BINLOG EVENTS IN '<file>' their events " +
	"(a transaction starts at a Gtid event, MySQL: Gtid or Anonymous_Gtid); SELECT @@gtid_binlog_pos (MySQL: @@gtid_executed) is the GTID position of now, " +
	"BINLOG_GTID_POS('<file>', <offset>) the one at a point of the binlog, with every replication domain; or --start-from earliest or now"

// StoredPointError adds the way on to err, a refusal of the stored
// position (gtid: a GTID position) by mysqlserver's start checks.
func StoredPointError(err error, gtid bool) error {
	switch {
	case errors.Is(err, outbox.ErrConfig):
		return outbox.WithHint(err, "%s", hintNotAStart)
	case !errors.Is(err, outbox.ErrPositionGone):
		return err
	case gtid:
		return outbox.WithHint(err, "%s", HintGTIDGone)
	}
	return outbox.WithHint(err, "%s", HintGone)
}

// GivenPointError adds the way on to err, a refusal of a --start-from by
// mysqlserver's start checks: a value of the operator's, so a
// configuration error either way.
func GivenPointError(err error) error {
	if !errors.Is(err, outbox.ErrConfig) && !errors.Is(err, outbox.ErrPositionGone) {
		return err
	}
	if !errors.Is(err, outbox.ErrConfig) {
		err = &configError{err}
	}
	return outbox.WithHint(err, "%s", hintGiven)
}

// configError makes a refusal of the server's (ErrPositionGone) a
// configuration error too, for a value the operator gave.
type configError struct{ error }

func (e *configError) Unwrap() []error { return []error{e.error, outbox.ErrConfig} }
