// Package preflight checks that the MySQL/MariaDB server, the outbox table and
// Redis meet what the relay needs, before it streams a single event. It backs
// `binlog-outbox check`, and `run` calls it before starting.
//
// Each requirement gives one Result that says what was found and, when it is
// not met, how to fix it. Checks never stop at the first problem: an operator
// fixing a new installation should see every problem at once, not one per
// attempt. A requirement that only one mode has (row-based binlog for binlog
// mode, SKIP LOCKED for poll mode) fails only that mode, so `check --mode auto`
// can tell which modes can run.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Status is the outcome of one requirement.
type Status int

const (
	// Pass means the requirement is met.
	Pass Status = iota
	// Warn means the relay runs, at a cost the Result's Detail names.
	Warn
	// Fail means the relay cannot run in the Result's modes.
	Fail
	// Skip means the requirement was not checked because one it depends on
	// failed (the server is unreachable, the table missing); that failure is
	// reported on its own line, and one cause gives one failure.
	Skip
)

// String returns PASS, WARN, FAIL or SKIP, as `check` prints it.
func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	case Skip:
		return "SKIP"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Mode is a way the relay reads the outbox table.
type Mode string

const (
	// ModeBinlog tails the binary log as a replica.
	ModeBinlog Mode = "binlog"
	// ModePoll selects unsent rows with SELECT ... FOR UPDATE SKIP LOCKED.
	ModePoll Mode = "poll"
)

// AllModes lists every mode, in the order `check --mode auto` prefers them.
var AllModes = []Mode{ModeBinlog, ModePoll}

// both is the Modes of requirements that every mode has.
var both = AllModes

// binlogOnly and pollOnly are the Modes of mode-specific requirements.
var (
	binlogOnly = []Mode{ModeBinlog}
	pollOnly   = []Mode{ModePoll}
)

// Result is the outcome of one requirement.
type Result struct {
	// Name identifies the requirement, e.g. "binlog_format".
	Name string
	// Status is Pass, Warn, Fail or Skip.
	Status Status
	// Detail says what was found, e.g. "binlog_format is STATEMENT".
	Detail string
	// Fix is an actionable sentence; set when Status is Warn or Fail.
	Fix string
	// Modes are the modes that need the requirement: a Fail fails only them.
	Modes []Mode
	// Cause tells apart the failures of one requirement that a caller
	// treats differently; CauseNone for most.
	Cause Cause
	// Err, for a value `run` refuses, is the error it stops with; Detail
	// and Fix are its text and hint.
	Err error
}

// Cause names a particular reason a requirement failed, so that callers act
// on it without reading Detail.
type Cause int

const (
	// CauseNone is the Cause of results no caller singles out.
	CauseNone Cause = iota
	// CauseServerIDInUse: a connected replica uses --server-id. After a
	// crash it is usually the relay's own previous connection, which the
	// server drops when it notices; `run` tolerates it for a while.
	CauseServerIDInUse
)

// Needs reports whether mode needs the requirement.
func (r Result) Needs(mode Mode) bool { return slices.Contains(r.Modes, mode) }

// Config is what Run checks.
type Config struct {
	// MySQLDSN is the go-sql-driver DSN the relay connects with; its database
	// holds the outbox table.
	MySQLDSN string
	// Redis is how the relay connects to the Redis it appends to, one
	// server or a master found through Sentinel: the parsed --redis-url
	// with the TLS configuration of the --redis-tls-* flags and the
	// sentinels' credentials, so that the check connects exactly as the
	// relay does. Run leaves it as it is.
	Redis *redisconn.Target
	// Table is the outbox table's name in Database, or in the DSN's
	// database when Database is empty.
	Table    string
	Database string
	// Sources, for a relay of several tables (more than one --table, or a
	// pattern), replace Table, Database, Mapping and Declared: every table
	// they match is checked (for poll mode too), and binlog mode needs
	// PositionKey. A value without a database is in the DSN's.
	Sources []schema.Source
	// Mapping maps logical to physical column names; nil means
	// schema.DefaultMapping.
	Mapping schema.Mapping
	// Declared lists the logical columns the user mapped with --column
	// (schema.DeclaredColumns). Run resolves the others against the table:
	// an optional one the table lacks is absent (schema.Resolve).
	Declared []string
	// Extra are the columns --extra-column carries as fields; each must be
	// in the table.
	Extra []schema.ExtraColumn
	// ServerID is the relay's replica server id (--server-id).
	ServerID uint32
	// ReservedColumn, when set, is the column another worker of the table
	// sets on a row it takes (Laravel's jobs.reserved_at, which its
	// database queue worker sets): a row with it set is a job that worker
	// runs while the relay delivers it too, and Run warns.
	ReservedColumn string
	// OnSent is what poll mode does with a relayed row: "mark" (UPDATE its
	// sent_at) or "delete". Empty checks that at least one of them is allowed.
	OnSent string
	// PositionKey is the Redis key of binlog mode's stored position, which
	// the failover check reads; empty checks as if none were stored.
	PositionKey string
	// Format, when set, is the entry format (validated) that Run reports,
	// with the stream template (Stream, Partitions) it is written to; an
	// empty Stream is the default template for the table.
	Format     *entry.Format
	Stream     string
	Partitions int
	// Start, when set, is what `run` does with its flags at start: Run
	// checks it as `run` does (checkStart), and the keys of the relay in
	// Redis.
	Start *Start
	// StateRedis, with Start and PositionKey, is the relay's own client of
	// Redis (a cluster client on Redis Cluster), with which Run reads the
	// relay's state there (checkState); nil leaves it unchecked. The caller
	// closes it.
	StateRedis redis.UniversalClient
}

// Report is the outcome of Run: the server found and one Result per requirement.
type Report struct {
	// Server is the MySQL server; its zero value when it was unreachable.
	Server mysqlserver.Server
	// Results are in a fixed order: MySQL server, binlog, privileges, table,
	// poll mode, Redis, the position on failover.
	Results []Result
	// Table is the outbox table and the mapping resolved against it, which
	// `run` relays with in either mode; nil when the table could not be
	// inspected or does not exist (the table's Result says why).
	Table *schema.Resolution
	// Tables are, with Config.Sources, the tables they matched, each with
	// the mapping resolved against it; Table is nil then.
	Tables []TableMatch
	// PositionStored says a binlog position was stored at Config.PositionKey.
	PositionStored bool
	// Record is what the relay records of itself at start (RecordOf), nil
	// without Config.Start or a position key.
	Record *redisadmin.Record
}

// Mapping is the mapping resolved against the table, or against the first
// of the tables with Config.Sources (which must agree on the optional
// columns that shape the entries: checkTables); nil when none was inspected.
func (r Report) Mapping() schema.Mapping {
	switch {
	case r.Table != nil:
		return r.Table.Mapping
	case len(r.Tables) > 0:
		return r.Tables[0].Resolution.Mapping
	}
	return nil
}

// Failed returns the results that fail mode.
func (r Report) Failed(mode Mode) []Result { return r.with(Fail, mode) }

// Warned returns the warnings that concern mode, for `run` to log at start.
func (r Report) Warned(mode Mode) []Result { return r.with(Warn, mode) }

func (r Report) with(s Status, mode Mode) []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Status == s && res.Needs(mode) {
			out = append(out, res)
		}
	}
	return out
}

// Usable returns the modes no requirement fails, in AllModes order.
func (r Report) Usable() []Mode {
	var out []Mode
	for _, m := range AllModes {
		if len(r.Failed(m)) == 0 {
			out = append(out, m)
		}
	}
	return out
}

// ErrRequirements means a requirement of the chosen mode is not met.
var ErrRequirements = errors.New("requirements not met")

// Err returns nil when no requirement fails mode, and otherwise an error
// wrapping ErrRequirements that names the failed requirements, with their
// fixes as the operator hint.
func (r Report) Err(mode Mode) error {
	failed := r.Failed(mode)
	if len(failed) == 0 {
		return nil
	}
	names := make([]string, len(failed))
	fixes := make([]string, 0, len(failed))
	for i, f := range failed {
		names[i] = f.Name + " (" + f.Detail + ")"
		if f.Fix != "" {
			fixes = append(fixes, f.Fix)
		}
	}
	return outbox.WithHint(fmt.Errorf("%w for %s mode: %s", ErrRequirements, mode, strings.Join(names, "; ")),
		"%s", strings.Join(fixes, " "))
}

// Run checks every requirement and never panics or returns early: a failure
// to connect turns the checks that need the connection into Skip results. ctx
// bounds the whole run; give it a deadline, since an unreachable host can
// otherwise hang in TCP connect for minutes.
func Run(ctx context.Context, cfg Config) Report {
	if cfg.Mapping == nil {
		cfg.Mapping = schema.DefaultMapping()
	}
	var rep Report
	add := func(rs ...Result) { rep.Results = append(rep.Results, rs...) }
	srv, res, tables, mysqlResults, gtid := checkMySQL(ctx, cfg)
	rep.Server, rep.Table, rep.Tables = srv, res, tables
	add(mysqlResults...)
	if cfg.Start != nil {
		refuseInAuto(cfg.Start, rep.Results)
		add(checkStart(cfg, rep.Mapping())...)
	}
	redisResults, stored, storedErr := checkRedis(ctx, cfg.Redis, cfg.PositionKey, cfg.Start, relayKeys(cfg, res, tables))
	add(redisResults...)
	if redisUsable(redisResults) {
		withServerIDClaim(ctx, rep.Results, cfg)
	}
	resume := checkResume(ctx, cfg, srv, stored, storedErr)
	if len(resume) == 1 && resume[0].Status == Fail {
		add(skip(NameFailover, "not checked: the relay cannot resume the stored position ("+NameStoredPosition+")", binlogOnly))
	} else {
		add(checkFailover(srv, gtid, stored, storedErr))
	}
	add(resume...)
	hold := checkRepairHold(stored, cfg.PositionKey)
	refuseInAuto(cfg.Start, hold)
	add(hold...)
	rep.PositionStored = stored != nil
	rep.Record = RecordOf(cfg, rep.Mapping(), tables, res)
	if cfg.StateRedis != nil && storedErr == nil && srv.Flavor != "" && redisUsable(redisResults) {
		if rec := rep.Record; rec != nil {
			add(checkState(ctx, cfg, cfg.StateRedis, rec, stateTables(res, tables), stored)...)
		}
	}
	if cfg.Start != nil && stored == nil && storedErr == nil && srv.Flavor != "" {
		start := checkStartFrom(ctx, cfg, srv)
		refuseInAuto(cfg.Start, start)
		add(start...)
	}
	if cfg.Format != nil {
		stream := cfg.Stream
		if stream == "" {
			stream = entry.DefaultStream
			if m := rep.Mapping(); m != nil && !m.Has(schema.ColAggregateType) {
				stream = entry.DefaultStreamNoAggregateType
			}
		}
		add(checkFormat(cfg.Format, stream, cfg.Partitions))
	}
	refuseStateInAuto(cfg.Start, rep.Results)
	return rep
}

// relayKeys are the keys `run` reads at start beside the streams: the
// position, the lease and the mode of each table; none without cfg.Start.
func relayKeys(cfg Config, res *schema.Resolution, tables []TableMatch) []string {
	if cfg.Start == nil {
		return nil
	}
	var keys []string
	if cfg.PositionKey != "" {
		keys = append(keys, cfg.PositionKey)
		if cfg.Start.Lease {
			keys = append(keys, redisstream.KeysFor("", "", cfg.PositionKey).Lease)
		}
	}
	if res != nil && res.Table != nil {
		keys = append(keys, redisstream.KeysFor(res.Table.Database, res.Table.Name, "").Mode)
	}
	for _, t := range tables {
		keys = append(keys, redisstream.KeysFor(t.Database, t.Table, "").Mode)
	}
	return keys
}

// result builders keep the check code to one line per outcome.
func pass(name, detail string, modes []Mode) Result {
	return Result{Name: name, Status: Pass, Detail: detail, Modes: modes}
}

func warn(name, detail, fix string, modes []Mode) Result {
	return Result{Name: name, Status: Warn, Detail: detail, Fix: fix, Modes: modes}
}

func fail(name, detail, fix string, modes []Mode) Result {
	return Result{Name: name, Status: Fail, Detail: detail, Fix: fix, Modes: modes}
}

func skip(name, detail string, modes []Mode) Result {
	return Result{Name: name, Status: Skip, Detail: detail, Modes: modes}
}
