package preflight

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Requirement names of the start of `run`, as `check` prints them.
const (
	// NameSettings is the requirement on the flags that shape the entries
	// and the start (Start): the values `run` would refuse.
	NameSettings = "relay settings"
	// NameRedisKeys is the requirement on the relay's own keys in Redis:
	// each holds what the relay keeps there, or nothing yet.
	NameRedisKeys = "redis keys"
	// NameStartFrom is where binlog mode starts without a stored
	// position (--start-from): a point this server has.
	NameStartFrom = "start position"
	// NameBinlogAddress is binlog mode's need of a TCP address in the DSN:
	// it connects to the server as a replica.
	NameBinlogAddress = "binlog address"
)

// Start is what `run` does with its flags at start, beside connecting: the
// sink it builds, the lease, trimming and where binlog mode starts. Run
// checks each value as `run` uses it, so that whatever `run` would refuse,
// `check` reports first, with the same error (Result.Err).
type Start struct {
	// Sink is the sink of `run`. An empty Stream is the default template
	// for the table (StreamFor), and NoAggregateType and NoHeaders follow
	// the mapping resolved against it (SinkConfig).
	Sink redisstream.Config
	// Refused is what the relay's own validation refused of its options
	// (relay.Options.Validate: what the flags say together, such as the
	// lease's renewals against its TTL), nil when they are valid; joined
	// errors are reported one by one. The preflight reports it as it is
	// and checks no flag's range again: the command line checked each
	// flag as it read it.
	Refused error
	// Lease is --lease.
	Lease bool
	// Trim is --trim, as the report shows it; Trimming the trimmer's
	// configuration, nil when run trims nothing, which the preflight
	// checks Redis against (Trimmer.Check).
	Trim     string
	Trimming *redisstream.TrimConfig
	// StartFrom is --start-from.
	StartFrom string
	// Mode is --mode. Auto mode needs what binlog mode needs to decide
	// between the modes (the position key of several tables), so a
	// refusal of binlog mode's values stops it too.
	Mode string
}

// StreamFor is the stream template of `run`: given, or by default one per
// aggregate type, or one stream for a table without an aggregate_type
// column. A nil mapping is the default mapping's.
func StreamFor(given string, m schema.Mapping) string {
	switch {
	case given != "":
		return given
	case m != nil && !m.Has(schema.ColAggregateType):
		return entry.DefaultStreamNoAggregateType
	}
	return entry.DefaultStream
}

// SinkConfig is s.Sink for the mapping resolved against the table.
func (s Start) SinkConfig(m schema.Mapping) redisstream.Config {
	c := s.Sink
	c.Stream = StreamFor(c.Stream, m)
	if m != nil {
		c.NoAggregateType = !m.Has(schema.ColAggregateType)
		c.NoHeaders = !m.Has(schema.ColHeaders)
	}
	return c
}

// BinlogAddr is the host and port binlog mode connects to as a replica: the
// DSN's address, which must be TCP.
func BinlogAddr(netw, addr string) (host string, port uint16, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil || netw != "tcp" {
		return "", 0, outbox.WithHint(fmt.Errorf("%w: binlog mode needs a TCP address in --mysql-dsn, got %s(%s)", outbox.ErrConfig, netw, addr),
			"the binlog is read over TCP: write the DSN as user:pass@tcp(host:3306)/app (on the server's own host tcp(127.0.0.1:3306), with the account allowed from 127.0.0.1; "+
				"with --laravel-env, set DB_HOST and DB_PORT and leave DB_SOCKET empty), or run --mode poll, which works over the socket")
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, outbox.WithHint(fmt.Errorf("%w: port %q in --mysql-dsn", outbox.ErrConfig, portStr), "write the DSN as user:pass@tcp(host:3306)/app")
	}
	return host, uint16(p), nil
}

// checkStart checks the values of cfg.Start as `run` uses them, with the
// mapping resolved against the table (nil when none was inspected). Each
// refusal stops every mode, as it stops `run` whichever mode it picks.
func checkStart(cfg Config, m schema.Mapping) []Result {
	s := cfg.Start
	errs := []error{s.Refused}
	if joined, ok := s.Refused.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	sc := s.SinkConfig(m)
	errs = append(errs, sc.Validate())
	var out []Result
	for _, err := range errs {
		if err != nil {
			out = append(out, refusal(NameSettings, err, both))
		}
	}
	if dsn, err := mysql.ParseDSN(cfg.MySQLDSN); err == nil {
		if _, _, err := BinlogAddr(dsn.Net, dsn.Addr); err != nil {
			out = append(out, refusal(NameBinlogAddress, err, binlogOnly))
		}
	}
	if len(out) == 0 {
		out = append(out, pass(NameSettings, fmt.Sprintf("stream %s, dead letters to %s, trim %s", sc.Stream, orDefault(sc.DeadLetterStream, redisstream.DefaultDeadLetterStream), strings.ToLower(s.Trim)), both))
	}
	return out
}

// refuseInAuto makes the refusals of binlog mode's values (Result.Err)
// stop every mode unless s.Mode is poll: `run` refuses them in auto mode
// as in binlog mode, rather than fall back to polling for a flag's sake.
func refuseInAuto(s *Start, results []Result) {
	if s == nil || strings.EqualFold(s.Mode, string(ModePoll)) {
		return
	}
	for i, r := range results {
		if r.Status == Fail && r.Err != nil && (r.Name == NamePositionKey || r.Name == NameStartFrom || r.Name == NameRepairHold) {
			results[i].Modes = both
		}
	}
}

// stateNames are the requirements on the relay's state that stop auto
// mode when binlog mode could otherwise run (refuseStateInAuto).
var stateNames = []string{NameStoredPosition, NameRelays, NameFirstStart, NameWithoutLease}

// refuseStateInAuto makes the refusals of binlog mode's state (stateNames)
// stop every mode unless s.Mode is poll, when they are the only reason
// binlog mode could not run: auto mode must not fall back to polling
// because of a lost position or a second relay. Where binlog mode cannot
// run anyway (the binlog is off, say), auto mode polls, and they are moot.
func refuseStateInAuto(s *Start, results []Result) {
	if s == nil || strings.EqualFold(s.Mode, string(ModePoll)) {
		return
	}
	var state []int
	for i, r := range results {
		if r.Status != Fail || !r.Needs(ModeBinlog) || r.Needs(ModePoll) {
			continue
		}
		if !slices.Contains(stateNames, r.Name) || r.Err == nil {
			return // binlog mode fails for another reason
		}
		state = append(state, i)
	}
	for _, i := range state {
		results[i].Modes = both
	}
}

// checkStartFrom checks --start-from against the server when no position
// is stored, as binlog mode resolves it (mysqlserver.Server.CheckStart): a
// point this server can start a dump at. Nil when there is nothing to check.
func checkStartFrom(ctx context.Context, cfg Config, srv mysqlserver.Server) []Result {
	s, err := position.ParseStart(cfg.Start.StartFrom)
	if err != nil || (s.Kind != position.StartGTID && s.Kind != position.StartFilePos) {
		return nil // refused as the flag was read, or always on the server
	}
	err = withDB(ctx, cfg.MySQLDSN, func(db *sql.DB) error { return srv.CheckStart(ctx, db, s) })
	var unreached *unreachedError
	switch {
	case errors.As(err, &unreached):
		return []Result{skip(NameStartFrom, "not checked: "+err.Error(), binlogOnly)}
	case err != nil:
		return []Result{refusal(NameStartFrom, err, binlogOnly)}
	}
	return []Result{pass(NameStartFrom, "no position stored: --start-from "+cfg.Start.StartFrom+" is a point this server can start at", binlogOnly)}
}

// unreachedError is withDB's failure to connect: the check it guards is
// then not made, rather than failed.
type unreachedError struct{ msg string }

func (e *unreachedError) Error() string { return e.msg }

// withDB runs do on a pool of the server dsn names, closed afterwards. A
// failure to open it is an *unreachedError, without the password.
func withDB(ctx context.Context, dsn string, do func(*sql.DB) error) error {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The mysql server check reports it, without the password.
		return &unreachedError{"the MySQL DSN does not parse"}
	}
	if c.Timeout == 0 {
		c.Timeout = defaultConnectTimeout
	}
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return &unreachedError{safeError(err, c.Passwd)}
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return &unreachedError{safeError(err, c.Passwd)}
	}
	return do(db)
}

// checkStartRedis checks what `run` asks of Redis at start beside the
// append: the relay's keys hold what it keeps there (or nothing), and
// trimming is possible. keys are the position, lease and mode keys.
func checkStartRedis(ctx context.Context, c *redis.Client, s *Start, keys []string) []Result {
	var out []Result
	for _, key := range keys {
		typ, err := keyType(ctx, c, key)
		if err != nil {
			out = append(out, fail(NameRedisKeys, fmt.Sprintf("cannot read the type of %s: %v", key, redisconn.Classify(err)), outbox.HintOf(redisconn.Classify(err)), both))
			continue
		}
		if typ != "string" && typ != "none" {
			out = append(out, refusal(NameRedisKeys, WrongKeyType(key, typ), both))
		}
	}
	if s.Trimming != nil {
		tr, err := redisstream.NewTrimmer(c, *s.Trimming, nil)
		if err == nil {
			err = tr.Check(ctx)
		}
		if err != nil {
			out = append(out, refusal(NameSettings, err, both))
		}
	}
	if len(out) == 0 {
		out = append(out, pass(NameRedisKeys, strings.Join(keys, ", ")+": none or the relay's", both))
	}
	return out
}

// keyType is TYPE key, asked of the node of a Redis Cluster that holds
// the key (onNodeOf).
func keyType(ctx context.Context, c *redis.Client, key string) (string, error) {
	var typ string
	err := onNodeOf(ctx, c, func(n *redis.Client) (err error) {
		typ, err = n.Type(ctx, key).Result()
		return err
	})
	return typ, err
}

// onNodeOf runs do with c, and when c's node answers MOVED (a Redis
// Cluster: the checks talk to one node) again with a client of the node
// that holds the key.
func onNodeOf(ctx context.Context, c *redis.Client, do func(*redis.Client) error) error {
	err := do(c)
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return err
	}
	moved, ok := strings.CutPrefix(rerr.Error(), "MOVED ")
	if !ok {
		return err
	}
	_, addr, _ := strings.Cut(moved, " ")
	opts := *c.Options()
	opts.Addr = addr
	node := redis.NewClient(&opts)
	defer node.Close()
	return do(node)
}

// NoPositionKey refuses a relay of several tables (more than one --table,
// or a pattern; tables names them) without --position-key: a key derived
// from the list would change when a table is added or removed, and the
// relay would start afresh under the new key, skipping what it had not
// relayed yet.
func NoPositionKey(tables string) error {
	return outbox.WithHint(fmt.Errorf("%w: --table names several tables (%s), and one position covers them all: give it a key with --position-key", outbox.ErrConfig, tables),
		"choose a key that stays when tables are added or removed, e.g. --position-key binlog-outbox:position:tenants; to go on from a relay of one of these tables alone, give its key, binlog-outbox:position:<database>.<table> (`binlog-outbox position show` with that --table prints it)")
}

// WrongKeyType is the error of a relay key (position, lease, mode) that
// holds another Redis type than the string the relay keeps there.
func WrongKeyType(key, typ string) error {
	return outbox.WithHint(fmt.Errorf("%w: %s holds a %s, not what the relay keeps there (a string)", outbox.ErrConfig, key, typ),
		"another application uses the key, or it was written by hand: give the relay keys of their own (--position-key), or delete it if nothing needs it (redis-cli DEL %s)", key)
}

// refusal is a failure that stops `run` with err, which `check` prints as
// the detail and its hint as the fix.
func refusal(name string, err error, modes []Mode) Result {
	r := fail(name, err.Error(), outbox.HintOf(err), modes)
	r.Err = err
	return r
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Stop returns the failure that stops `run` at once, whichever mode it
// would pick: first a value it refuses (Result.Err, as it would refuse
// it), then a requirement of every mode (a server it cannot reach, the
// table), with the fix `check` prints as the hint. Nil when none; the
// requirements of one mode are for the mode package to weigh.
func (r Report) Stop() error {
	for _, res := range r.Results {
		if res.Status == Fail && res.Err != nil && res.Needs(ModeBinlog) && res.Needs(ModePoll) {
			return res.Err
		}
	}
	for _, res := range r.Results {
		if res.Status == Fail && res.Needs(ModeBinlog) && res.Needs(ModePoll) {
			return outbox.WithHint(fmt.Errorf("%w: %s (%s)", ErrRequirements, res.Name, res.Detail), "%s", res.Fix)
		}
	}
	return nil
}

// TolerateOwnServerID turns a "server id in use" failure into a warning.
// Right after a crash or restart the replica holding the id is usually the
// relay's own previous connection, which the server drops when it notices;
// the reader retries a refused id for a grace period and then stops with the
// fix. Failing here instead would keep a restarted relay from starting, and
// would make auto mode fall back to polling for a moment.
func (r *Report) TolerateOwnServerID() {
	for i, res := range r.Results {
		if res.Status == Fail && res.Cause == CauseServerIDInUse {
			r.Results[i].Status = Warn
			r.Results[i].Detail += "; if this is the relay's own previous connection the server drops it shortly, otherwise the relay stops after a minute of refusals"
		}
	}
}
