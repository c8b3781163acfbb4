package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
)

// NameFailover is the requirement that says whether the relay's position
// survives a database failover.
const NameFailover = "position on failover"

// gtidStateVariables are the variables that say which transactions a
// server's binlog holds, per flavor, for position.GTIDSet.HeldBy.
var gtidStateVariables = []string{"gtid_binlog_state", "gtid_executed"}

// gtidState picks the flavor's GTID state out of the global variables.
func gtidState(srv mysqlserver.Server, vars map[string]string) string {
	if srv.MariaDB() {
		return vars["gtid_binlog_state"]
	}
	return vars["gtid_executed"]
}

// NameRepairHold is the requirement that no repair holds the stored
// position (position.Binlog.Repair): `run` refuses to start on it.
const NameRepairHold = "position held by repair"

// storedPosition reads the stored position (nil: none) with the checks'
// Redis client, from the node that holds it on a Redis Cluster; an empty
// key reads nothing.
func storedPosition(ctx context.Context, c *redis.Client, key string) ([]byte, error) {
	if key == "" {
		return nil, nil
	}
	var raw []byte
	err := onNodeOf(ctx, c, func(n *redis.Client) (err error) {
		raw, err = n.Get(ctx, key).Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return raw, err
}

// checkRepairHold refuses, as the reader does at start, a stored position
// that a repair marked as its own; nil when there is none to refuse (an
// unreadable one is checkFailover's).
func checkRepairHold(stored []byte, key string) []Result {
	if stored == nil {
		return nil
	}
	b, err := position.Decode(stored)
	if err != nil || !b.Repairing() {
		return nil
	}
	return []Result{refusal(NameRepairHold, b.RepairError(key), binlogOnly)}
}

// gtidInfo is what checkFailover needs of the server's GTIDs: its GTID
// state (gtidState) and, on MySQL, gtid_mode.
type gtidInfo struct {
	state, mode string
}

// gtidFix is the fix where the server has no GTIDs and positions are file
// positions.
const gtidFix = "enable GTIDs (MySQL: enforce_gtid_consistency=ON, then gtid_mode OFF_PERMISSIVE, ON_PERMISSIVE, ON, one step at a time): " +
	"the relay then stores GTID positions, which survive a failover (a stored file position stays one until `binlog-outbox position set`); docs/database-failover.md"

// checkFailover says whether the position the relay resumes from survives a
// failover to another server, and whether this server can resume it: a GTID
// set names the same transactions on every server of a replication
// topology, a file position only means something on the server that wrote
// it. A position this server cannot resume is a warning, not a failure: the
// relay stops on it with the way on, and auto mode must not fall back to
// polling because of it. gtid is the server's GTIDs; stored the stored
// position, or storedErr why it could not be read.
func checkFailover(srv mysqlserver.Server, gtid gtidInfo, stored []byte, storedErr error) Result {
	byGTID := position.ResumesByGTID(srv.Flavor, gtid.mode)
	switch {
	case srv.Flavor == "":
		return skip(NameFailover, "not checked: the MySQL server is unreachable", binlogOnly)
	case storedErr != nil:
		return skip(NameFailover, "not checked: cannot read the stored position: "+storedErr.Error(), binlogOnly)
	case stored == nil && byGTID:
		return pass(NameFailover, "no position stored: a first start stores a GTID position, which survives a failover to any server of the topology that has its transactions", binlogOnly)
	case stored == nil:
		return warn(NameFailover, "no position stored: gtid_mode is "+orUnset(gtid.mode)+", so a first start stores a file position, which only this server can resume: "+
			"after a failover to another server the relay stops until someone sets a position (`binlog-outbox position set`)", gtidFix, binlogOnly)
	}
	b, err := position.Decode(stored)
	if err != nil {
		return warn(NameFailover, "the stored position cannot be read: "+err.Error(),
			"inspect it with `binlog-outbox position show` and replace it with `binlog-outbox position set`", binlogOnly)
	}
	here := fmt.Sprintf("server_id %d", srv.ServerID)
	if srv.ServerUUID != "" {
		here += " (" + srv.ServerUUID + ")"
	}
	if b.Flavor != srv.Flavor {
		return warn(NameFailover, fmt.Sprintf("the stored position belongs to a %s server, this is %s: the relay will refuse it", b.Flavor, srv.Flavor),
			"with the relay stopped, `binlog-outbox repair` lists the committed rows no stream holds and `repair --apply` appends them once and stores a position of this server (docs/incidents.md); "+
				"or `binlog-outbox position set --start-from earliest` or `--start-from now` (see the relay's error for the trade-off)", binlogOnly)
	}
	if !b.GTIDMode() {
		return checkFilePosition(srv, gtid, b, here)
	}
	set, err := position.ParseGTIDSet(b.Flavor, b.GTIDSet)
	if err != nil {
		return warn(NameFailover, "the stored GTID set cannot be read: "+err.Error(),
			"inspect it with `binlog-outbox position show` and replace it with `binlog-outbox position set`", binlogOnly)
	}
	held, err := set.HeldBy(srv.Flavor, gtid.state)
	switch {
	case err != nil:
		return warn(NameFailover, "cannot tell whether this server has the stored GTID set's transactions: "+err.Error(),
			"make sure the server has every transaction of the stored position (`binlog-outbox position show`)", binlogOnly)
	case !held:
		return warn(NameFailover, fmt.Sprintf("the stored GTID set %s names transactions this server (%s, which holds %s) does not have: the relay will refuse it; "+
			"after a failover, these are transactions the old primary committed and never shipped, whose events the relay may have appended",
			logging.Truncate(b.GTIDSet, 200), here, logging.Truncate(gtid.state, 200)),
			"with the relay stopped, `binlog-outbox repair` lists the entries whose rows this server lacks (never deleted) and the committed rows no stream holds; "+
				"once the consumers know what the former mean, `repair --apply --accept-foreign <n>` appends the latter and stores a position of this server (docs/incidents.md, failover gap); "+
				"or `binlog-outbox position set --start-from <gtid set>` with the promoted server's GTID position when it was promoted, or --start-from earliest; docs/database-failover.md", binlogOnly)
	}
	return pass(NameFailover, "the stored position is a GTID set ("+logging.Truncate(b.GTIDSet, 200)+") this server has: it survives a failover to any server "+
		"of the topology that has these transactions (replicas with log_slave_updates, MariaDB gtid_strict_mode)", binlogOnly)
}

// checkFilePosition is checkFailover's line for a stored file position b:
// refused on another server; on this one, converted at start where MariaDB
// can tell its GTID set, else a file position that does not survive a
// failover.
func checkFilePosition(srv mysqlserver.Server, gtid gtidInfo, b position.Binlog, here string) Result {
	const gtidWay = "resume by GTID set (`binlog-outbox position set --start-from <gtid set>`, or --start-from <gtid set> on a first start; docs/database-failover.md)"
	if b.ServerID != srv.ServerID || (b.ServerUUID != "" && srv.ServerUUID != "" && b.ServerUUID != srv.ServerUUID) {
		return warn(NameFailover, fmt.Sprintf("the stored file position %s:%d belongs to server_id %d %s, this is %s: file positions are server-local and the relay will refuse it",
			b.File, b.Pos, b.ServerID, b.ServerUUID, here),
			"with the relay stopped, `binlog-outbox repair` then `repair --apply` (appends the committed rows no stream holds once and stores a position of this server; docs/incidents.md), "+
				"or `binlog-outbox position set --start-from earliest` (re-read what the binlog has; consumers deduplicate by message_id) or `--start-from now` (accept a gap); then "+gtidWay, binlogOnly)
	}
	switch {
	case srv.MariaDB():
		return pass(NameFailover, "the stored position "+b.String()+" is a file position of this server ("+here+"): the relay converts it to a GTID position at start "+
			"(BINLOG_GTID_POS), which survives a failover", binlogOnly)
	case position.ResumesByGTID(srv.Flavor, gtid.mode):
		return warn(NameFailover, "the stored position "+b.String()+" is a file position of this server ("+here+"), which MySQL cannot convert to a GTID set: "+
			"after a failover to another server the relay stops on it", "with the relay stopped, "+gtidWay+" with the GTID set at the stored position", binlogOnly)
	}
	return warn(NameFailover, "the stored position "+b.String()+" is a file position of this server ("+here+"), and gtid_mode is "+orUnset(gtid.mode)+
		": after a failover to another server the relay stops on it until someone sets a position", gtidFix, binlogOnly)
}

// NameStoredPosition is the requirement that the server can resume the
// stored position as the relay resumes it (mysqlserver.Server.CheckResume).
const NameStoredPosition = "stored position"

// checkResume refuses, as the relay refuses it at start, a stored position
// the server cannot resume: another flavor's, a file position of another
// server, in a purged file or not at a transaction's start, a GTID set the
// server lacks transactions of or purged what follows of. Nil when nothing
// is stored, or when it cannot be read (checkFailover says so) or a repair
// holds it (checkRepairHold).
func checkResume(ctx context.Context, cfg Config, srv mysqlserver.Server, stored []byte, storedErr error) []Result {
	if stored == nil || storedErr != nil || srv.Flavor == "" {
		return nil
	}
	b, err := position.Decode(stored)
	if err != nil || b.Repairing() {
		return nil
	}
	err = withDB(ctx, cfg.MySQLDSN, func(db *sql.DB) error { return srv.CheckResume(ctx, db, b, cfg.PositionKey) })
	var unreached *unreachedError
	switch {
	case errors.As(err, &unreached):
		return []Result{skip(NameStoredPosition, "not checked: "+err.Error(), binlogOnly)}
	case err != nil:
		return []Result{refusal(NameStoredPosition, err, binlogOnly)}
	}
	return []Result{pass(NameStoredPosition, b.String()+": the server has what follows it", binlogOnly)}
}
