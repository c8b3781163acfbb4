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
		hint := position.HintGone
		if gtid {
			hint = position.HintGTIDGone
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

// errServerChanged means the binlog connection reached another server than
// the one the session checked the stored position against: the address
// moved (a VIP, DNS or proxy flip) in between. The next session checks again.
var errServerChanged = errors.New("the server behind the address changed")

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
