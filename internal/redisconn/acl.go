package redisconn

import (
	"fmt"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// ACLRules are the Redis ACL rules of the relay's user with the default
// stream names (--stream outbox:{aggregate_type}, or outbox for a table
// without aggregate_type, and the dead letters in outbox:dead-letter): the
// keys it may touch and every command that binlog-outbox's commands send,
// nothing else. docs/redis-tls-acl.md shows them, and a test creates a user
// with exactly these rules and runs run (both modes, --ensure-group,
// --trim), check, verify, status, mark-appended and position with it.
//
// By feature:
//   - connecting to a database other than 0: SELECT;
//   - check and --trim read the server's version and settings: INFO (CONFIG
//     GET is left out on purpose: it would also show the server's
//     passwords; check then warns that appendfsync is unknown);
//   - the append script (both modes, --ensure-group, --dedupe-window):
//     EVALSHA, and EVAL when the server does not have the script cached;
//     inside it GET and SET of the position and dedupe keys, TYPE, XADD,
//     XINFO GROUPS and XGROUP CREATE of the streams;
//   - the lease (--lease): SET, GET, PTTL, and in its scripts PEXPIRE,
//     DEL; on Redis Cluster the take's script also counts the epochs: INCR;
//   - on Redis Cluster, the slot record beside the position key
//     (SlotRecordKey): HSET and HSETNX in the position's script, HGETALL
//     at the start of each session; the intent (IntentKey): GET, SET and
//     DEL in the scripts of the position key's slot; the slots' fences
//     (FenceKey): GET and SET in the scripts;
//   - the MULTI append path of binlog mode (append_multi.go): WATCH, MULTI, EXEC,
//     and DISCARD or UNWATCH when a check refuses the batch; GET, SET, TYPE,
//     XINFO GROUPS, XGROUP CREATE and XADD as in the script;
//   - the mode key (auto mode) and the position commands: GET, SET, DEL;
//     run looks for a position under an older key name: EXISTS;
//   - the relay's record (Record): GET and SET of it, SMEMBERS, SADD and
//     SREM of the index of records (RecordIndexKey); check and run look
//     for entries of the table's rows when no position is stored: SCAN,
//     TYPE, XREVRANGE;
//   - --trim and --max-len: SCAN, and in the trim script TYPE, XINFO
//     GROUPS, XPENDING, XLEN and XTRIM;
//   - status, verify and mark-appended list the streams: SCAN, and TYPE of
//     the dead-letter stream;
//   - status and --group-metrics: GET, XINFO STREAM, XINFO GROUPS,
//     XPENDING, XINFO CONSUMERS, XRANGE, and EVALSHA (EVAL) of the script
//     that counts the entries a group has not been delivered yet;
//   - verify: XRANGE, ZSCAN of the symfony-doctrine streams' delayed sets,
//     and its temporary index binlog-outbox:verify:*: ZADD, EXPIRE,
//     ZRANGEBYSCORE, DEL;
//   - mark-appended: XINFO STREAM, XRANGE;
//   - dead-letters replay and purge: XRANGE, and XDEL of the dead letters
//     they delivered or purged (in replay's script, with XADD or ZADD).
//
// A relay with another --stream or --dead-letter-stream replaces the
// ~outbox patterns with patterns matching its streams.
const ACLRules = "resetkeys ~outbox ~outbox:* ~binlog-outbox:* resetchannels -@all " +
	"+ping +select +info +evalsha +eval +watch +unwatch +multi +exec +discard +get +set +del +exists +incr +hset +hsetnx +hgetall +type +scan " +
	"+smembers +sadd +srem " +
	"+xadd +xdel +xlen +xrange +xrevrange +xpending +xtrim +xinfo|stream +xinfo|groups +xinfo|consumers +xgroup|create " +
	"+zadd +zscan +zrangebyscore +expire +pexpire +pttl"

// ClusterACLRules are what the relay's user needs on every node of a Redis
// Cluster (--redis-cluster) beside ACLRules: go-redis's cluster client reads
// the slot map (CLUSTER SLOTS) and the command table (COMMAND), which it
// routes by.
const ClusterACLRules = "+cluster|slots +command"

// SentinelACLRules are the ACL rules of the user the relay authenticates to
// the sentinels as (--redis-sentinel-user), on each sentinel: Sentinel has
// users of its own, apart from the master's, which needs nothing more than
// ACLRules. docs/redis-tls-acl.md shows them, and a test creates a user with
// exactly these rules on every sentinel and runs check and run with it.
//
// By feature:
//   - finding the master before each new connection: SENTINEL
//     GET-MASTER-ADDR-BY-NAME; learning the other sentinels: SENTINEL
//     SENTINELS;
//   - hearing of a failover at once rather than at the next connection:
//     SUBSCRIBE to +switch-master (and +replica-reconf-done, which go-redis
//     subscribes to as well), and PING on that connection;
//   - check, when the sentinels know no master of the name: SENTINEL
//     MASTERS, to list the names they know (without it check only says
//     the name is unknown).
const SentinelACLRules = "resetchannels &+switch-master &+replica-reconf-done -@all +ping +subscribe " +
	"+sentinel|get-master-addr-by-name +sentinel|sentinels +sentinel|masters"

// aclHint is the fix of a NOPERM error: the rules the user lacks.
const aclHint = "the Redis user lacks a permission the relay needs; give it the relay's rules: " +
	"ACL SETUSER <user> " + ACLRules + " (with key patterns matching --stream and --dead-letter-stream if they differ from outbox:*; see docs/redis-tls-acl.md)"

// ErrPermission means the Redis user's ACL refuses a command the relay
// needs. It is a configuration error: the relay stops with the refused
// command, the key and the fix rather than retrying a refusal for ever.
var ErrPermission = outbox.NewConfigError("the Redis user lacks a permission")

// Denied wraps a NOPERM reply in ErrPermission with the fix.
func Denied(err error, hint string) error {
	return outbox.WithHint(fmt.Errorf("%w: %w", ErrPermission, err), "%s", hint)
}
