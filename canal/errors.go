package canal

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// appendError turns a failed append into the reader's error: a position
// mismatch becomes what package position decides it is (fenced, rolled back,
// deleted), the rest stays retryable.
func (r *Reader) appendError(err error) error {
	var mm *outbox.PositionMismatchError
	if !errors.As(err, &mm) {
		return fmt.Errorf("append to redis: %w", err)
	}
	return position.Compare(mm.Stored, r.writer, r.seq.Load()).Err()
}

// streamError classifies errors of the binlog connection; gtid says whether
// the session started from a GTID set, whose refusal has another cause
// than a file position's.
func (r *Reader) streamError(err error, gtid bool) error {
	var myErr *mysql.MyError
	if !errors.As(err, &myErr) {
		return err
	}
	switch myErr.Code {
	case errSlaveSameID:
		return r.clashError(err)
	case mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG: // 1236
		// The server says why in the message only; the duplicate server id
		// case needs a different fix than a purged binlog.
		if containsFold(myErr.Message, "server_id") || containsFold(myErr.Message, "server_uuid") {
			return r.clashError(err)
		}
		if hint, ok := anonymousRefusal(myErr.Message); ok {
			return outbox.WithHint(fmt.Errorf("%w: %v", outbox.ErrConfig, err), "%s", hint)
		}
		hint := recoveryHint
		if gtid {
			hint = gtidRecoveryHint
		}
		return outbox.WithHint(fmt.Errorf("%w: %v", outbox.ErrPositionGone, err), "%s", hint)
	case mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, mysql.ER_ACCESS_DENIED_ERROR, mysql.ER_DBACCESS_DENIED_ERROR:
		return outbox.WithHint(err, "grant the relay's user REPLICATION SLAVE and REPLICATION CLIENT: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '<user>'@'<host>'")
	}
	return err
}

// errSlaveSameID is MariaDB's ER_SLAVE_SAME_ID: a replica with our server id
// is connected. MySQL reports the same as 1236 with a message.
const errSlaveSameID = 4052

// errServerIDClash marks a refusal because of a duplicate server id. Right
// after a crash it is the relay's own dead connection the server has not
// noticed yet, so it is retried for Config.ServerIDClashGrace before it
// counts as a configuration error.
var errServerIDClash = errors.New("another replica is connected with the same server id")

func (r *Reader) clashError(err error) error {
	return outbox.WithHint(fmt.Errorf("%w: %v", errServerIDClash, err),
		"another replica (another relay?) uses server id %d; give each relay its own --server-id, different from every server and replica", r.cfg.ServerID)
}

const recoveryHint = "the binlog the stored position points into is gone (purged, or a different server). Events committed in the gap were not relayed. " +
	"Run `binlog-outbox repair` (a dry run: the committed rows no stream holds), then, with the relay stopped, `binlog-outbox repair --apply`: it appends them once " +
	"and stores the position run goes on from, while producers keep writing (docs/incidents.md). " +
	"Otherwise `binlog-outbox position set --start-from earliest` re-reads all the binlog the server still has (consumers deduplicate by message_id), " +
	"and `--start-from now` accepts the gap; " +
	"and keep binlogs longer (binlog_expire_logs_seconds) than the relay may be down"

// gtidRecoveryHint is the way on when a server refuses the stored GTID set.
// With asynchronous replication that is the failover case: the old primary
// committed transactions, the relay read them and appended their events, and
// the replica promoted in its place never received them.
const gtidRecoveryHint = "the server does not have every transaction of the stored GTID set in its binlog: after a failover, the old primary committed transactions " +
	"that it never shipped to the server promoted in its place (the relay may have appended their events: the streams hold events whose rows the new primary does not have), " +
	"or the binlog holding them was purged. With the relay stopped, `binlog-outbox repair` lists those entries (it never deletes them) and the committed rows no stream holds; " +
	"once the consumers know what the entries mean, `binlog-outbox repair --apply --accept-foreign <n>` appends the rows once and stores a position of this server to go on from, " +
	"while producers keep writing (docs/incidents.md, failover gap). " +
	"Otherwise `binlog-outbox position set --start-from <gtid set>` with the GTID position the promoted server had when it was promoted " +
	"(its @@gtid_binlog_pos, MySQL: @@gtid_executed, at that moment) relays everything written since, " +
	"`binlog-outbox position set --start-from earliest` re-reads all the binlog the server has (consumers deduplicate by message_id; docs/database-failover.md), " +
	"and `--start-from now` accepts the gap; " +
	"and keep binlogs longer (binlog_expire_logs_seconds) than the relay may be down"

// errServerChanged means the binlog connection reached another server than
// the one the session checked the stored position against: the address
// moved (a VIP, DNS or proxy flip) in between. The next session checks again.
var errServerChanged = errors.New("the server behind the address changed")

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
