package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Requirement names, as `check` prints them.
const (
	NameMySQL             = "mysql server"
	NameMySQLVersion      = "mysql version"
	NameLogBin            = "log_bin"
	NameBinlogFormat      = "binlog_format"
	NameBinlogRowImage    = "binlog_row_image"
	NameBinlogRowMetadata = "binlog_row_metadata"
	NameSyncBinlog        = "sync_binlog"
	NameFlushLogAtCommit  = "innodb_flush_log_at_trx_commit"
	NameGTIDMode          = "gtid_mode"
	NameReplicationSlave  = "replication slave privilege"
	NameReplicationClient = "replication client privilege"
	NameServerID          = "server id"
	NameSelect            = "select privilege"
	NameTable             = "outbox table"
	NameSkipLocked        = "skip locked"
	NamePollWrite         = "poll write privilege"
	NameOtherWorkers      = "other workers"
	NameRedisSentinel     = "redis sentinel"
	NameRedis             = "redis server"
	NameRedisEviction     = "redis maxmemory-policy"
	NameRedisPersistence  = "redis persistence"
	NameRedisFailover     = "redis failover"
)

// requirement is a name and the modes that need it, for the Skip results of
// checks that could not run.
type requirement struct {
	name  string
	modes []Mode
}

// afterMySQL lists, in order, the requirements checked once the server answers.
var afterMySQL = []requirement{
	{NameMySQLVersion, both},
	{NameLogBin, binlogOnly}, {NameBinlogFormat, binlogOnly}, {NameBinlogRowImage, binlogOnly},
	{NameBinlogRowMetadata, binlogOnly}, {NameSyncBinlog, both}, {NameFlushLogAtCommit, both}, {NameGTIDMode, binlogOnly},
	{NameReplicationSlave, binlogOnly}, {NameReplicationClient, binlogOnly}, {NameServerID, binlogOnly},
	{NameSelect, both}, {NameTable, both}, {NameSkipLocked, pollOnly}, {NamePollWrite, pollOnly},
}

// requirementsFrom returns the requirements of afterMySQL from first to last,
// both included, so that the Skip results of a check that could not run name
// exactly the requirements it covers.
func requirementsFrom(first, last string) []requirement {
	i := slices.IndexFunc(afterMySQL, func(r requirement) bool { return r.name == first })
	j := slices.IndexFunc(afterMySQL, func(r requirement) bool { return r.name == last })
	return afterMySQL[i : j+1]
}

func skipAll(reqs []requirement, why string) []Result {
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = skip(r.name, why, r.modes)
	}
	return out
}

// defaultConnectTimeout bounds the TCP connect when the DSN sets no timeout.
const defaultConnectTimeout = 5 * time.Second

// checkMySQL checks the server, its binlog settings, the user's privileges and
// the outbox table.
// gtid is the server's GTIDs (gtidState, gtid_mode), for checkFailover.
func checkMySQL(ctx context.Context, cfg Config) (srv mysqlserver.Server, res *schema.Resolution, tables []TableMatch, results []Result, gtid gtidInfo) {
	dsn, err := mysql.ParseDSN(cfg.MySQLDSN)
	if err != nil {
		return mysqlserver.Server{}, nil, nil, append([]Result{fail(NameMySQL,
			"cannot parse the MySQL DSN "+logging.RedactDSN(cfg.MySQLDSN)+": "+parseError(err, logging.DSNPassword(cfg.MySQLDSN)),
			"write it as user:password@tcp(host:3306)/database", both)},
			skipAll(afterMySQL, "not checked: the DSN is invalid")...), gtidInfo{}
	}
	scrub := func(err error) string { return safeError(err, dsn.Passwd) }
	database := dsn.DBName
	if cfg.Database != "" {
		database = cfg.Database
	}
	conn := dsn.Clone()
	// Connect without the database: a user without any privilege on it is
	// refused at connect time (error 1044), which would hide which privilege
	// is missing. The table checks qualify the table with the database.
	conn.DBName = ""
	if conn.Timeout == 0 {
		conn.Timeout = defaultConnectTimeout
	}
	connector, err := mysql.NewConnector(conn)
	if err != nil {
		return mysqlserver.Server{}, nil, nil, append([]Result{fail(NameMySQL, "invalid MySQL DSN: "+scrub(err),
			"write it as user:password@tcp(host:3306)/database", both)},
			skipAll(afterMySQL, "not checked: the DSN is invalid")...), gtidInfo{}
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(2)

	srv, err = mysqlserver.Detect(ctx, db)
	if err != nil {
		fix := "check host and port in --mysql-dsn, that the server runs and accepts TCP connections from this host"
		if mysqlserver.LoginRefused(err) {
			fix = mysqlserver.LoginRefusedHint
		}
		if f := tlsFix(err, "mysql", dsn.TLS); f != "" {
			fix = f
		}
		return mysqlserver.Server{}, nil, nil, append([]Result{fail(NameMySQL,
			fmt.Sprintf("cannot connect to %s as %s: %s", dsn.Addr, dsn.User, scrub(err)), fix, both)},
			skipAll(afterMySQL, "not checked: the MySQL server is unreachable")...), gtidInfo{}
	}
	results = []Result{pass(NameMySQL, fmt.Sprintf("%s at %s as %s, %s", srv, dsn.Addr, dsn.User, link(dsn.TLS)), both), checkVersion(srv)}

	vars, err := mysqlserver.GlobalVariables(ctx, db, append([]string{"log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
		"sync_binlog", "innodb_flush_log_at_trx_commit", "gtid_mode"}, gtidStateVariables...)...)
	if err != nil {
		results = append(results, skipAll(requirementsFrom(NameLogBin, NameGTIDMode), "not checked: "+scrub(err))...)
	} else {
		results = append(results, checkBinlogSettings(vars)...)
		results = append(results, checkDurability(vars)...)
		results = append(results, checkGTIDMode(srv, vars["gtid_mode"]))
		gtid = gtidInfo{state: gtidState(srv, vars), mode: vars["gtid_mode"]}
	}

	var account string
	if err := db.QueryRowContext(ctx, "SELECT /* binlog-outbox */ CURRENT_USER()").Scan(&account); err != nil {
		account = dsn.User + "@%"
	}
	acct := quoteAccount(account)
	results = append(results, checkReplicationPrivileges(ctx, db, srv, acct)...)
	results = append(results, checkServerID(ctx, db, srv, cfg.ServerID, acct))
	if len(cfg.Sources) > 0 {
		tables, tableResults := checkTables(ctx, db, srv, database, acct, cfg)
		return srv, nil, tables, append(results, tableResults...), gtid
	}
	res, tableResults := checkTable(ctx, db, srv, database, acct, cfg)
	return srv, res, nil, append(results, tableResults...), gtid
}

// checkVersion requires MySQL 8.0 or MariaDB 10.6: the oldest versions with
// SKIP LOCKED, and the oldest still maintained when this relay was written.
func checkVersion(s mysqlserver.Server) Result {
	if s.MariaDB() && !s.AtLeast(10, 6, 0) {
		return fail(NameMySQLVersion, s.String()+" is older than 10.6",
			"upgrade to MariaDB 10.6 or later", both)
	}
	if !s.MariaDB() && !s.AtLeast(8, 0, 0) {
		return fail(NameMySQLVersion, s.String()+" is older than 8.0",
			"upgrade to MySQL 8.0 or later", both)
	}
	return pass(NameMySQLVersion, s.String()+" is supported", both)
}

// What binlog_row_metadata short of FULL means for the relay (canal/layout.go).
const (
	positional = "with the table's columns from information_schema, only where it can prove no DDL on the table lies between a row and that read: " +
		"after a DDL on the table it reads them again; rows written before a DDL it finds ahead of it (an ALTER while the relay was stopped or behind) stop it with the range to republish"
	alterWhileCaughtUp = "change the outbox table only while the relay runs and has caught up"
)

// checkBinlogSettings checks the server variables row-based replication needs.
func checkBinlogSettings(vars map[string]string) []Result {
	var out []Result
	const orPoll = "; or run with --mode poll"
	switch v := vars["log_bin"]; {
	case strings.EqualFold(v, "ON") || v == "1":
		out = append(out, pass(NameLogBin, "the binary log is on", binlogOnly))
	default:
		out = append(out, fail(NameLogBin, "the binary log is off (log_bin="+orUnset(v)+")",
			"enable it in my.cnf [mysqld] with log_bin=mysql-bin and a unique server_id, then restart (MySQL 8 has it on unless --skip-log-bin or --disable-log-bin)"+orPoll, binlogOnly))
	}
	if v := vars["binlog_format"]; strings.EqualFold(v, "ROW") {
		out = append(out, pass(NameBinlogFormat, "binlog_format is ROW", binlogOnly))
	} else {
		out = append(out, fail(NameBinlogFormat, "binlog_format is "+orUnset(v)+": inserts are logged as SQL text, which the relay cannot read",
			"set binlog_format=ROW in my.cnf [mysqld] and restart, or SET GLOBAL binlog_format=ROW (new sessions only: reconnect the producers)"+orPoll, binlogOnly))
	}
	if v := vars["binlog_row_image"]; strings.EqualFold(v, "FULL") {
		out = append(out, pass(NameBinlogRowImage, "binlog_row_image is FULL", binlogOnly))
	} else {
		out = append(out, fail(NameBinlogRowImage, "binlog_row_image is "+orUnset(v)+": row events may omit columns filled by defaults",
			"set binlog_row_image=FULL in my.cnf [mysqld] and restart, or SET GLOBAL binlog_row_image=FULL (new sessions only)"+orPoll, binlogOnly))
	}
	switch v, ok := vars["binlog_row_metadata"]; {
	case strings.EqualFold(v, "FULL"):
		out = append(out, pass(NameBinlogRowMetadata, "binlog_row_metadata is FULL: row events carry column names", binlogOnly))
	case !ok:
		out = append(out, warn(NameBinlogRowMetadata, "the server has no binlog_row_metadata: row events carry no column names, so the relay maps values by position "+positional,
			"upgrade to a server with binlog_row_metadata (MySQL 8.0.1, MariaDB 10.5) and set binlog_row_metadata=FULL; until then "+alterWhileCaughtUp, binlogOnly))
	default:
		out = append(out, warn(NameBinlogRowMetadata, "binlog_row_metadata is "+v+": row events carry no column names, so the relay maps values by position "+positional,
			"set binlog_row_metadata=FULL in my.cnf [mysqld] and SET GLOBAL binlog_row_metadata=FULL; until then "+alterWhileCaughtUp, binlogOnly))
	}
	return out
}

// checkDurability warns when the server may lose, in an OS crash or power
// failure, transactions it reported committed. The relay may have appended
// such a transaction already; the server then rolls it back on recovery, and
// the streams hold events of a transaction that, as far as the database is
// concerned, never happened. A crash of the server process alone loses
// nothing with either setting: the kernel still writes what it was given.
func checkDurability(vars map[string]string) []Result {
	var out []Result
	binlogOn := strings.EqualFold(vars["log_bin"], "ON") || vars["log_bin"] == "1"
	switch v, ok := vars["sync_binlog"]; {
	case !ok:
		out = append(out, warn(NameSyncBinlog, "the server shows no sync_binlog, so whether it syncs the binary log at commit is unknown",
			"make sure the binary log is synced at every commit (sync_binlog=1 in my.cnf [mysqld])", both))
	case !binlogOn:
		out = append(out, pass(NameSyncBinlog, "the binary log is off, so sync_binlog does not matter", both))
	case v == "1":
		out = append(out, pass(NameSyncBinlog, "sync_binlog is 1: the binary log is synced at every commit", both))
	default:
		// With the binary log on, it decides at recovery which prepared
		// transactions commit: a transaction missing from it is rolled back
		// even when InnoDB had flushed it, which concerns poll mode too.
		out = append(out, warn(NameSyncBinlog, "sync_binlog is "+v+": an OS crash or power failure can lose the last transactions from the binary log, "+
			"and the server then rolls them back on recovery although the relay may already have appended their events (phantom events in the streams)",
			"SET GLOBAL sync_binlog=1; and set sync_binlog=1 in my.cnf [mysqld] so that it survives a restart (it costs one fsync per group of commits)", both))
	}
	switch v, ok := vars["innodb_flush_log_at_trx_commit"]; {
	case !ok:
		out = append(out, warn(NameFlushLogAtCommit, "the server shows no innodb_flush_log_at_trx_commit, so whether InnoDB flushes its log at commit is unknown",
			"make sure InnoDB flushes its log at every commit (innodb_flush_log_at_trx_commit=1 in my.cnf [mysqld])", both))
	case v == "1" || v == "3": // MariaDB's 3 flushes at prepare and at commit
		out = append(out, pass(NameFlushLogAtCommit, "innodb_flush_log_at_trx_commit is "+v+": InnoDB flushes its log at every commit", both))
	default:
		out = append(out, warn(NameFlushLogAtCommit, "innodb_flush_log_at_trx_commit is "+v+": an OS crash or power failure can lose up to a second of committed transactions, "+
			"whose events the relay may already have appended (phantom events in the streams)",
			"SET GLOBAL innodb_flush_log_at_trx_commit=1; and set innodb_flush_log_at_trx_commit=1 in my.cnf [mysqld] so that it survives a restart", both))
	}
	return out
}

// checkGTIDMode warns of MySQL's gtid_mode OFF_PERMISSIVE and ON_PERMISSIVE,
// the steps of a migration to GTIDs, when transactions with and without a
// GTID mix. A relay resuming by GTID set (a position stored from
// --start-from <gtid set>) stops at the first anonymous transaction: a GTID
// position cannot locate it. Where every transaction has a GTID
// (position.ResumesByGTID) the relay stores GTID positions; elsewhere file
// positions, which read both kinds (the failover line says what that costs).
func checkGTIDMode(srv mysqlserver.Server, mode string) Result {
	switch {
	case srv.MariaDB():
		return pass(NameGTIDMode, "MariaDB gives every transaction a GTID: the relay stores GTID positions", binlogOnly)
	case strings.EqualFold(mode, "ON_PERMISSIVE"), strings.EqualFold(mode, "OFF_PERMISSIVE"):
		return warn(NameGTIDMode, "gtid_mode is "+mode+": transactions with and without a GTID mix; the relay stores file positions, and one resuming by GTID set (--start-from <gtid set>) stops at the first transaction without",
			"finish the migration (ENFORCE_GTID_CONSISTENCY=ON, then gtid_mode=ON): the relay then stores GTID positions, which survive a failover", binlogOnly)
	case position.ResumesByGTID(srv.Flavor, mode):
		return pass(NameGTIDMode, "gtid_mode is ON: the relay stores GTID positions", binlogOnly)
	default:
		return pass(NameGTIDMode, "gtid_mode is "+orUnset(mode)+": the relay stores file positions", binlogOnly)
	}
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// checkReplicationPrivileges checks REPLICATION SLAVE (to dump the binlog) and
// REPLICATION CLIENT (to read the current position). SHOW GRANTS without FOR
// lists, on MariaDB, the privileges of the active roles too; statements that
// need the privilege prove it where the server has one that needs nothing else.
func checkReplicationPrivileges(ctx context.Context, db *sql.DB, srv mysqlserver.Server, acct string) []Result {
	lines, grantsErr := queryStrings(ctx, db, "SHOW /* binlog-outbox */ GRANTS")
	gs := parseGrants(lines)

	var slave Result
	slaveFix := "GRANT REPLICATION SLAVE ON *.* TO " + acct + ";"
	slaveProbe := errors.New("no statement proves it on MariaDB")
	if !srv.MariaDB() {
		// MySQL requires REPLICATION SLAVE for SHOW BINLOG EVENTS; MariaDB
		// requires BINLOG MONITOR instead, so there only the grants tell.
		slaveProbe = probe(ctx, db, "SHOW /* binlog-outbox */ BINLOG EVENTS LIMIT 1")
	}
	switch {
	case slaveProbe == nil:
		slave = pass(NameReplicationSlave, "granted (SHOW BINLOG EVENTS works)", binlogOnly)
	case isAccessDenied(slaveProbe):
		slave = fail(NameReplicationSlave, "not granted: "+slaveProbe.Error(), slaveFix, binlogOnly)
	case grantsErr != nil:
		slave = warn(NameReplicationSlave, "cannot read the grants: "+grantsErr.Error(),
			"make sure the relay user has REPLICATION SLAVE: "+slaveFix, binlogOnly)
	case gs.hasGlobal(privReplicationSlave...):
		slave = pass(NameReplicationSlave, "granted", binlogOnly)
	default:
		slave = fail(NameReplicationSlave, "not granted: SHOW GRANTS lists no REPLICATION SLAVE (or ALL) ON *.*", slaveFix, binlogOnly)
	}

	var client Result
	clientPriv := "REPLICATION CLIENT"
	if srv.MariaDB() && srv.AtLeast(10, 5, 2) {
		clientPriv = "BINLOG MONITOR"
	}
	clientFix := "GRANT " + clientPriv + " ON *.* TO " + acct + ";"
	q := srv.BinlogStatusQuery()
	stmt := strings.Replace(q, "/* binlog-outbox */ ", "", 1)
	switch err := probe(ctx, db, q); {
	case err == nil:
		client = pass(NameReplicationClient, "granted ("+stmt+" works)", binlogOnly)
	case isAccessDenied(err):
		client = fail(NameReplicationClient, "not granted: "+stmt+": "+err.Error(), clientFix, binlogOnly)
	case grantsErr == nil && gs.hasGlobal(privReplicationClient...):
		client = pass(NameReplicationClient, "granted ("+stmt+" failed for another reason: "+err.Error()+")", binlogOnly)
	default:
		client = fail(NameReplicationClient, stmt+" failed: "+err.Error(), clientFix, binlogOnly)
	}
	return []Result{slave, client}
}

// checkServerID checks that the relay's --server-id differs from the server's
// own and from every registered replica's: a second replica with the same id
// makes the server kick the first one (error 1236), and the two would take
// turns disconnecting each other.
func checkServerID(ctx context.Context, db *sql.DB, srv mysqlserver.Server, id uint32, acct string) Result {
	next := fmt.Sprintf("--server-id %d", id+1)
	switch {
	case id == 0:
		return fail(NameServerID, "--server-id is 0, which a replica cannot use",
			"give the relay a --server-id that no server or replica in the topology uses, e.g. --server-id 1001", binlogOnly)
	case id == srv.ServerID:
		return fail(NameServerID, fmt.Sprintf("--server-id %d is the server's own server_id", id),
			"give the relay a --server-id that no server or replica in the topology uses, e.g. "+next, binlogOnly)
	}
	q := srv.ReplicasQuery()
	rows, err := queryRows(ctx, db, q)
	if err != nil {
		priv := "REPLICATION SLAVE"
		if srv.MariaDB() {
			priv = "REPLICATION MASTER ADMIN"
		}
		return warn(NameServerID, fmt.Sprintf("--server-id %d differs from the server's %d, but the replicas cannot be listed: %v", id, srv.ServerID, err),
			fmt.Sprintf("make sure no replica or other relay uses server_id %d; to let check see them, GRANT %s ON *.* TO %s;", id, priv, acct), binlogOnly)
	}
	for _, r := range rows {
		if r["server_id"] == strconv.FormatUint(uint64(id), 10) {
			res := fail(NameServerID, fmt.Sprintf("--server-id %d is used by a replica connected from %s (port %s)", id, orUnset(r["host"]), orUnset(r["port"])),
				"give this relay a --server-id that no server or replica uses, e.g. "+next+"; or stop the other relay or replica", binlogOnly)
			res.Cause = CauseServerIDInUse
			return res
		}
	}
	return pass(NameServerID, fmt.Sprintf("--server-id %d is unused (server %d, %d replicas)", id, srv.ServerID, len(rows)), binlogOnly)
}

// probe runs a statement for its privilege check and discards the rows.
func probe(ctx context.Context, db *sql.DB, q string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// queryStrings returns the first column of every row.
func queryStrings(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := queryRows(ctx, db, q)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[""]
	}
	return out, nil
}

// queryRows returns every row as a map from lower-case column name to value,
// because SHOW statements name and order their columns differently across
// versions (Server_id vs Server_Id, Master_id vs Source_Id). The first
// column is also stored under "".
func queryRows(ctx context.Context, db *sql.DB, q string) ([]map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols)+1)
		for i, c := range cols {
			m[strings.ToLower(c)] = vals[i].String
		}
		if len(cols) > 0 {
			m[""] = vals[0].String
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// MySQL error numbers the checks tell apart.
const (
	errDBAccessDenied       = 1044
	errAccessDenied         = 1045
	errNoSuchDB             = 1049
	errTableAccessDenied    = 1142
	errColumnAccessDenied   = 1143
	errNoSuchTable          = 1146
	errSpecificAccessDenied = 1227
)

func isMySQLError(err error, numbers ...uint16) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	for _, n := range numbers {
		if me.Number == n {
			return true
		}
	}
	return false
}

func isAccessDenied(err error) bool {
	return isMySQLError(err, errDBAccessDenied, errAccessDenied, errTableAccessDenied, errColumnAccessDenied, errSpecificAccessDenied)
}

// safeError returns err's text with secret scrubbed, or a generic text when
// the message still holds a piece of it: parse errors quote fragments of
// their input, and a password must not reach a terminal or a log.
func safeError(err error, secret string) string {
	msg := logging.Scrub(err.Error(), secret)
	if logging.Leaks(msg, secret) {
		return "the message is withheld because it quotes part of the password"
	}
	return msg
}

// parseError returns the text of a DSN or URL parse error, or a generic text
// when the input has a password: parsers quote fragments cut at the very
// characters that broke the parse (`network 't:p' unknown`, `invalid port
// ":p"`), which no scrubbing reliably finds.
func parseError(err error, secret string) string {
	if secret != "" {
		return "message withheld, as it may quote part of the password"
	}
	return err.Error()
}

// link says how a connection with TLS configuration cfg (nil: none) is
// secured, for check's line about the server.
func link(cfg *tls.Config) string {
	switch {
	case cfg == nil:
		return "without TLS"
	case cfg.InsecureSkipVerify:
		return "over TLS without verifying the server's certificate"
	case cfg.ServerName != "":
		return "over TLS, certificate verified for " + cfg.ServerName
	}
	return "over TLS, each certificate verified for the address dialled"
}

// overTLS is " over TLS" for a failed connection that used TLS.
func overTLS(cfg *tls.Config) string {
	if cfg == nil {
		return ""
	}
	return " over TLS"
}

// tlsFix says how to fix a failed TLS handshake with the MySQL or Redis
// server (server "mysql" or "redis", the prefix of its TLS flags) over a
// connection with TLS configuration cfg (nil: none), or "" when err is no
// TLS failure.
func tlsFix(err error, server string, cfg *tls.Config) string {
	flag := "--" + server + "-tls-"
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var remote *net.OpError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is not signed by a CA the relay trusts: give the CA bundle that signed it with " + flag + "ca (managed services publish theirs: " + managedCAs[server] + ")"
	case errors.As(err, &host):
		return "the server's certificate is for another name (" + host.Error() + "): connect by a name the certificate carries, or set " + flag + "server-name to it"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "a certificate is expired or not yet valid (" + invalid.Error() + "): renew the server's certificate, or check this machine's clock"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid for TLS (" + invalid.Error() + "): fix the server's certificate"
	case errors.Is(err, mysql.ErrNoTLS):
		return "the server does not offer TLS: configure ssl_cert and ssl_key on the server, or drop the --mysql-tls-* flags"
	case errors.As(err, &remote) && remote.Op == "remote error":
		// crypto/tls reports the server's alert as an OpError of this Op;
		// a server that wants a client certificate (Redis with
		// tls-auth-clients, MySQL with REQUIRE X509) sends one.
		return "the server refused the TLS handshake (" + remote.Err.Error() + "): if it requires a client certificate, give one signed by a CA it trusts with " + flag + "cert and " + flag + "key"
	case server == "redis" && errors.As(err, &record):
		return "the server does not speak TLS on this port: use a redis:// URL, or the port of the server's tls-port"
	case cfg != nil && len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil && closedByPeer(err):
		// With TLS 1.3 the client's handshake ends before the server has
		// checked its certificate; the server's alert then races its close
		// with the client's first command, which may meet only the reset.
		return "the server closed the connection after the TLS handshake: if it requires a client certificate, give one signed by a CA it trusts with " + flag + "cert and " + flag + "key"
	}
	return ""
}

// closedByPeer reports whether err is the other side closing or resetting
// the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// managedCAs names, per server, the managed services whose CA bundles are
// not in the system's roots.
var managedCAs = map[string]string{
	"mysql": "AWS RDS, Azure, Google Cloud SQL",
	"redis": "e.g. Google Memorystore with in-transit encryption",
}
