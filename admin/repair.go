package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// repairBatch is how many rows one append of repair carries.
const repairBatch = 500

// repairLockWait bounds how long the lock of SnapshotLock waits for
// FLUSH TABLES WITH READ LOCK: while it waits (for a long statement to end)
// every write of the server waits behind it, so it gives up soon.
const repairLockWait = 10 * time.Second

// How Repair finds the binlog position of its snapshot (RepairOptions.Snapshot).
const (
	// SnapshotAuto is SnapshotStatus on MariaDB, SnapshotLock on MySQL.
	SnapshotAuto = "auto"
	// SnapshotStatus reads the position MariaDB reports with a consistent
	// snapshot (binlog_snapshot_file and _position): no lock, MariaDB only.
	SnapshotStatus = "status"
	// SnapshotLock takes the snapshot under FLUSH TABLES WITH READ LOCK and
	// reads the binlog end before UNLOCK TABLES, as mysqldump
	// --single-transaction --source-data does: no transaction commits in
	// between, so that end is the snapshot's. Writes wait for the few
	// milliseconds the lock is held; it needs the RELOAD privilege.
	SnapshotLock = "lock"
)

// ErrRepairRefused is the error of a repair that cannot prove what it
// would append; it wrote nothing.
var ErrRepairRefused = errors.New("repair refused")

// RepairOptions say what Repair compares and, with Apply, appends.
type RepairOptions struct {
	DB *sql.DB
	// Table is the outbox table with its resolved mapping; Extra the
	// columns carried as fields of their own, as run carries them.
	Table   outboxsql.Table
	Extra   []schema.ExtraColumn
	Redis   redis.UniversalClient
	Keys    redisstream.Keys
	Streams Streams
	// SinkConfig appends as the relay does (run's stream and format flags
	// and the position key); only Apply uses it, with a lease of its own.
	SinkConfig redisstream.Config
	// Chunk and Page are verify's (VerifyOptions); both positive.
	Chunk, Page int
	// DeleteRows says poll mode deletes the rows it relays (verify's
	// VerifyOptions.DeleteRows).
	DeleteRows bool
	// Apply appends the missing rows and stores the position; without it
	// Repair writes nothing.
	Apply bool
	// AcceptForeign is how many foreign entries (naming rows the table
	// lacks) the operator reviewed: Apply refuses unless there are exactly
	// that many, and leaves them in the streams.
	AcceptForeign int
	// Snapshot is how the binlog position of the snapshot is found in
	// binlog mode with Apply: SnapshotAuto (""), SnapshotStatus or
	// SnapshotLock.
	Snapshot string
	// Mode is --mode, binlog or poll: how the table is relayed, for a Redis
	// that does not say (no mode key, position or record: it lost its
	// data); "" takes what Redis says, and refuses to guess.
	Mode string

	// afterBatch, when set (by tests), runs after each append but the last.
	afterBatch func(ctx context.Context) error
	// lockWait, when set (by tests), replaces repairLockWait.
	lockWait time.Duration
}

// RepairReport is what Repair found and did; its JSON is `repair --json`.
type RepairReport struct {
	Mode    string `json:"mode"`
	Table   string `json:"table"`
	Streams int    `json:"streams"`
	Rows    int    `json:"rows"`
	Entries int    `json:"entries"`
	// Missing counts the committed rows of the snapshot no stream holds.
	Missing    int             `json:"missing"`
	Examples   []VerifyExample `json:"missing_examples"`
	Duplicated int             `json:"duplicated"`
	Foreign    int             `json:"foreign"`
	Foreigns   []VerifyExample `json:"foreign_examples,omitempty"`
	// Applied says the missing rows were appended and (binlog mode)
	// Position stored; Snapshot says how its place in the binlog was found.
	Applied  bool     `json:"applied"`
	Appended int      `json:"appended"`
	Position string   `json:"position,omitempty"`
	Snapshot string   `json:"snapshot,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Repair finds, in one consistent snapshot, the committed rows no stream
// holds; with Apply it appends them once, in id order (so each aggregate's
// rows in order). In binlog mode it holds the position's lease meanwhile,
// marks the position as its own before it reads anything (hold: no relay
// appends or starts on it then, with or without a lease), and stores as
// the position the binlog end as of that snapshot: every row the
// snapshot shows is then in a stream, and every row committed after it lies
// after the position, where run resumes. In poll mode the missing rows are
// those marked sent that no stream holds (the unsent ones are the poller's).
// It refuses (ErrRepairRefused, nothing written) what it cannot prove.
func Repair(ctx context.Context, o RepairOptions) (r RepairReport, err error) {
	st, err := loadRelayState(ctx, o.Redis, o.Keys, "repair")
	if err != nil {
		return RepairReport{}, err
	}
	if err := o.modeOf(&st); err != nil {
		return RepairReport{}, err
	}
	r = RepairReport{Mode: st.Mode, Table: o.Table.Database + "." + o.Table.Name}
	binlogApply := o.Apply && st.Mode == mode.Binlog
	if st.Mode == mode.Binlog {
		noteHold(st.Position, &r)
	}
	srv, err := mysqlserver.Detect(ctx, o.DB)
	if err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	how := ""
	if binlogApply {
		if how, err = o.snapshotMethod(srv); err != nil {
			return r, err
		}
	}
	lease, err := o.takeLease(ctx, &r, binlogApply)
	if err != nil {
		return r, err
	}
	if lease != nil {
		stop := keepLease(ctx, lease)
		defer stop()
	}
	if binlogApply {
		// Before the snapshot and the streams are read: from the mark on
		// no relay appends, so the streams as read hold all any did.
		orig := st.Position
		if st.Position, err = o.hold(ctx, srv, orig); err != nil {
			return r, err
		}
		defer func() {
			if err != nil && r.Appended == 0 {
				err = o.giveBack(st.Position, orig, err)
			}
		}()
	}
	conn, err := o.DB.Conn(ctx)
	if err != nil {
		return r, fmt.Errorf("repair: connect: %w", err)
	}
	defer conn.Close()
	end, err := o.snapshot(ctx, conn, srv, how)
	if err != nil {
		return r, err
	}
	defer endSnapshot(conn)
	var missing []uint64
	v, err := o.compare(ctx, conn, st, &r, func(id uint64, _ string) { missing = append(missing, id) })
	if err != nil {
		return r, err
	}
	if !o.Apply {
		return r, nil
	}
	if err := o.provable(ctx, v, &r, st); err != nil {
		return r, err
	}
	sc := o.SinkConfig
	sc.Lease = lease
	// A missing row is in no stream: a dedupe window that remembers its
	// message id (a deleted entry's) must not skip it.
	sc.Dedupe = redisstream.Dedupe{}
	sink, err := redisstream.New(o.Redis, sc)
	if err != nil {
		return r, err
	}
	if !binlogApply {
		if err := o.publish(ctx, conn, sink, missing, &r, nil); err != nil {
			return r, err
		}
		r.Applied = true
		return r, nil
	}
	pos, err := snapshotPosition(ctx, conn, srv, how, end, st.Position)
	if err != nil {
		return r, err
	}
	apply := o.apply
	if o.SinkConfig.Cluster {
		apply = o.applyCluster
	}
	if err := apply(ctx, conn, sink, lease, missing, st.Position, pos.Encode(), &r); err != nil {
		return r, err
	}
	r.Applied, r.Position, r.Snapshot = true, pos.String(), how
	return r, nil
}

// snapshot begins the snapshot on conn (the caller ends it with
// endSnapshot) and, with how, returns its binlog end: every row the
// snapshot shows committed before that end, every row it lacks after it.
func (o RepairOptions) snapshot(ctx context.Context, conn *sql.Conn, srv mysqlserver.Server, how string) (position.End, error) {
	var end position.End
	var err error
	if how == SnapshotLock {
		wait := repairLockWait
		if o.lockWait > 0 {
			wait = o.lockWait
		}
		end, err = lockedSnapshot(ctx, conn, srv, wait)
	} else {
		err = beginSnapshot(ctx, conn)
	}
	if err != nil {
		return end, fmt.Errorf("repair: %w", err)
	}
	if how == SnapshotStatus {
		if end, err = srv.SnapshotEnd(ctx, conn); err != nil {
			endSnapshot(conn)
			return end, fmt.Errorf("repair: %w", err)
		}
	}
	return end, nil
}

// repairHolder names this process as the holder of the lease and of the
// position's mark.
func repairHolder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("repair %s/%d", host, os.Getpid())
}

// noteHold says in r that the stored position is marked by a repair: an
// earlier run that did not finish (or one running now, which holds the
// lease then), from which --apply goes on.
func noteHold(stored []byte, r *RepairReport) {
	b, err := position.Decode(stored)
	if err != nil || !b.Repairing() {
		return
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("the position is marked by a repair (%s) that has not finished, or is running now: its appended rows count as relayed, and repair --apply goes on from its mark and clears it", b.Repair))
}

// hold compare-and-sets the stored position from stored to a mark of this
// repair (position.Binlog.HeldBy: the same coordinates, a holder and a
// time), and returns the mark, which each batch then expects. A running
// relay's next append finds it and stops, a relay started meanwhile
// refuses it, and `position set` replaces it. A position an earlier
// repair marked is marked again as this one's: that repair no longer holds
// the lease, this one does. Without a position to keep (none, or one that does not
// decode), the mark has the binlog's end as a file position: it is never
// resumed from.
func (o RepairOptions) hold(ctx context.Context, srv mysqlserver.Server, stored []byte) ([]byte, error) {
	base, err := position.Decode(stored)
	if err != nil {
		base = position.Binlog{Flavor: srv.Flavor, ServerID: srv.ServerID, ServerUUID: srv.ServerUUID, Writer: "repair", UpdatedAt: time.Now().UTC()}
		if base.File, base.Pos, err = srv.BinlogPosition(ctx, o.DB); err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
	}
	mark := base.HeldBy(repairHolder(), time.Now()).Encode()
	var ok bool
	if o.SinkConfig.Cluster {
		// A relay's slot scripts check their slots' positions, not the
		// key: the slots it may write are marked too.
		ok, err = redisstream.HoldClusterPosition(ctx, o.Redis, o.Keys.Position, stored, mark)
	} else {
		var n int
		n, err = casPositionScript.Run(ctx, o.Redis, []string{o.Keys.Position}, string(stored), string(mark)).Int()
		ok = n == 1
	}
	if err != nil {
		return nil, fmt.Errorf("repair: %w", redisconn.Classify(err))
	}
	if !ok {
		return nil, refuse("the stored position moved before repair could mark it: a relay is running on it", "stop every relay of this position, then repair --apply")
	}
	return mark, nil
}

// giveBack puts the position a refused or failed apply marked (mark) back
// to what it was (orig, nil: none), as nothing was appended; a position
// replaced meanwhile stays as it is. On Redis Cluster it stays marked.
// err is the apply's error, returned with what failed here.
func (o RepairOptions) giveBack(mark, orig []byte, err error) error {
	if o.SinkConfig.Cluster {
		// The slots hold the mark too, over what they held (some maybe
		// ahead of the key): only a repair that ends, or position set,
		// clears them as a whole.
		return outbox.WithHint(err, "%s; the position stays marked by this repair (on Redis Cluster its slots too), so no relay starts on it: run repair --apply again, or binlog-outbox position set", outbox.HintOf(err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, gerr := casPositionScript.Run(ctx, o.Redis, []string{o.Keys.Position}, string(mark), string(orig)).Result(); gerr != nil {
		return outbox.WithHint(fmt.Errorf("%w (and removing repair's mark from the position failed: %v)", err, redisconn.Classify(gerr)),
			"relays refuse the marked position: run repair --apply again, or binlog-outbox position set")
	}
	return err
}

// snapshotMethod resolves o.Snapshot for srv: MariaDB reports a snapshot's
// binlog position, MySQL does not (only the lock tells it there).
func (o RepairOptions) snapshotMethod(srv mysqlserver.Server) (string, error) {
	switch o.Snapshot {
	case "", SnapshotAuto:
		if srv.MariaDB() {
			return SnapshotStatus, nil
		}
		return SnapshotLock, nil
	case SnapshotStatus:
		if !srv.MariaDB() {
			return "", outbox.WithHint(fmt.Errorf("%w: repair --snapshot %s: %s does not report the binlog position of a consistent snapshot", outbox.ErrConfig, SnapshotStatus, srv),
				"use --snapshot lock (or auto) on MySQL")
		}
		return SnapshotStatus, nil
	case SnapshotLock:
		return SnapshotLock, nil
	}
	return "", fmt.Errorf("%w: repair --snapshot %q: want %s, %s or %s", outbox.ErrConfig, o.Snapshot, SnapshotAuto, SnapshotStatus, SnapshotLock)
}

// lockedSnapshot begins the snapshot of SnapshotLock and returns the binlog
// end it stands at. FLUSH TABLES WITH READ LOCK waits for the commits under
// way and holds every other: the snapshot begun under it sees exactly the
// transactions of the binlog up to the end read under it, on MySQL (whose
// snapshot reports no position) as on MariaDB. The GTID set is the server's
// (gtid_executed, gtid_binlog_pos) under the lock: exact too.
func lockedSnapshot(ctx context.Context, conn *sql.Conn, srv mysqlserver.Server, wait time.Duration) (position.End, error) {
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET /* binlog-outbox */ SESSION lock_wait_timeout = %d", max(1, int(wait.Seconds())))); err != nil {
		return position.End{}, fmt.Errorf("set lock_wait_timeout: %w", err)
	}
	defer conn.ExecContext(context.Background(), "SET /* binlog-outbox */ SESSION lock_wait_timeout = DEFAULT") //nolint:errcheck // the connection's own setting
	if _, err := conn.ExecContext(ctx, "FLUSH /* binlog-outbox */ TABLES WITH READ LOCK"); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1045 || me.Number == 1044) {
			return position.End{}, refuse(fmt.Sprintf("FLUSH TABLES WITH READ LOCK is not allowed: %v", err),
				"grant the RELOAD privilege to repair's user (GRANT RELOAD ON *.* TO ...), or on MariaDB use --snapshot status, which takes no lock; managed servers that forbid the lock (RDS, Cloud SQL) cannot prove a snapshot's binlog position on MySQL")
		}
		if errors.As(err, &me) && me.Number == 1205 {
			// Writes queued behind the waiting lock go on as it gives up.
			return position.End{}, refuse(fmt.Sprintf("FLUSH TABLES WITH READ LOCK waited %s for a running write statement and gave up: %v", wait, err),
				"find the long statement (SHOW PROCESSLIST) and run repair --apply again when it has ended")
		}
		return position.End{}, fmt.Errorf("FLUSH TABLES WITH READ LOCK: %w", err)
	}
	defer conn.ExecContext(context.Background(), "UNLOCK /* binlog-outbox */ TABLES") //nolint:errcheck // the session's lock; closing it releases it too
	if err := beginSnapshot(ctx, conn); err != nil {
		return position.End{}, err
	}
	end := position.End{ServerID: srv.ServerID, ServerUUID: srv.ServerUUID}
	var err error
	if end.File, end.Pos, err = srv.BinlogPosition(ctx, conn); err != nil {
		return position.End{}, err
	}
	q := "SELECT /* binlog-outbox */ @@GLOBAL.gtid_executed"
	if srv.MariaDB() {
		q = "SELECT /* binlog-outbox */ @@GLOBAL.gtid_binlog_pos"
	}
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, q).Scan(&gtid); err != nil {
		return position.End{}, fmt.Errorf("read the GTID set under the lock: %w", err)
	}
	if gtid.String != "" {
		if end.GTIDSet, err = position.ParseGTIDSet(srv.Flavor, gtid.String); err != nil {
			return position.End{}, fmt.Errorf("the GTID set under the lock: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK /* binlog-outbox */ TABLES"); err != nil {
		return position.End{}, fmt.Errorf("UNLOCK TABLES: %w", err)
	}
	return end, nil
}

// takeLease takes the position's lease for a binlog apply, so that a relay
// started meanwhile stands by until repair has stored its position instead
// of appending the same rows; without apply, a held lease is a warning (the
// counts then include rows not yet relayed). It returns nil when it takes
// none.
func (o RepairOptions) takeLease(ctx context.Context, r *RepairReport, apply bool) (*redisstream.Lease, error) {
	if o.Keys.Lease == "" {
		return nil, nil
	}
	if !apply {
		info, _, held, err := redisstream.ReadLease(ctx, o.Redis, o.Keys.Lease)
		if err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		switch {
		case held && strings.HasPrefix(info.Holder, "repair "):
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s holds the lease %s: an --apply is running, and the rows it has not yet appended count as missing", info.Holder, o.Keys.Lease))
		case held:
			r.Warnings = append(r.Warnings, fmt.Sprintf("a relay holds the lease %s (%s): rows it has not yet appended count as missing", o.Keys.Lease, info))
		}
		return nil, nil
	}
	// A relay without the lease reads under its server id's claim alone.
	if rec, ok, err := redisadmin.ReadRecord(ctx, o.Redis, o.Keys.Position); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	} else if ok && rec.ServerID != 0 {
		claim, claimed, err := redisstream.ReadServerIDClaim(ctx, o.Redis, rec.ServerID)
		if err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		if claimed && claim.PositionKey == o.Keys.Position {
			return nil, refuse(claim.String()+" reads the position without the lease: it is running on it",
				"stop every relay of this position (run), then repair --apply, then start run again")
		}
	}
	lease, err := redisstream.NewLease(o.Redis, redisstream.LeaseConfig{Key: o.Keys.Lease, Holder: repairHolder(),
		Cluster: o.SinkConfig.Cluster})
	if err != nil {
		return nil, err
	}
	held, holder, err := lease.TryAcquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("repair: take the lease %s: %w", o.Keys.Lease, err)
	}
	if !held {
		if info, ttl, ok, err := redisstream.ReadLease(ctx, o.Redis, o.Keys.Lease); err == nil && ok && strings.HasPrefix(info.Holder, "repair ") {
			return nil, repairHolds(info.Holder, o.Keys.Lease, ttl)
		}
		return nil, refuse(fmt.Sprintf("a relay holds the lease %s (%s): it is running on the position", o.Keys.Lease, holder),
			"stop every relay of this position (run), then repair --apply, then start run again")
	}
	return lease, nil
}

// keepLease renews lease until stop, which releases it: a relay standing by
// takes over at once, from the position repair stored.
func keepLease(ctx context.Context, lease *redisstream.Lease) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry.Every(ctx, redisstream.DefaultLeaseRenew, func(ctx context.Context) bool {
			// A lost lease makes the next append fail (ErrLeaseLost),
			// which refuses. A renewal that failed (Redis slow or away) is
			// tried again at the next tick: the lease outlives it by its
			// TTL, and past that the appends refuse too.
			held, err := lease.Renew(ctx)
			return err != nil || held
		})
	}()
	return func() {
		cancel()
		<-done
		lease.Release(context.Background()) //nolint:errcheck // it expires within its TTL anyway
	}
}

// foreignList names the foreign entries of examples for a refusal.
func foreignList(examples []VerifyExample) string {
	var b strings.Builder
	for i, e := range examples {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "outbox_id %d message_id %s in %s", e.OutboxID, e.MessageID, strings.Join(e.Entries, " "))
	}
	if len(examples) == verifyExamples {
		b.WriteString(", ...")
	}
	return b.String()
}

// refuse builds the error of a refusal.
// repairHolds is the refusal of a repair --apply whose lease another
// repair holds (holder: "repair <host>/<pid>"): one still running, or one
// killed whose lease has not expired yet, which a rerun right after the
// kill meets. It says which, where it can tell, and when to retry.
func repairHolds(holder, key string, ttl time.Duration) error {
	wait := ttl.Round(time.Second) + time.Second
	state := "running, or killed without giving the lease back"
	host, _ := os.Hostname()
	if h, pid, ok := strings.Cut(strings.TrimPrefix(holder, "repair "), "/"); ok && h == host {
		if n, err := strconv.Atoi(pid); err == nil && !processAlive(n) {
			state = fmt.Sprintf("no longer running (no process %d on this host)", n)
		} else if err == nil {
			state = fmt.Sprintf("running (process %d on this host)", n)
		}
	}
	return refuse(fmt.Sprintf("another %s holds the lease %s for another %s unless it renews it: it is %s", holder, key, ttl.Round(100*time.Millisecond), state),
		fmt.Sprintf("if that repair was stopped or killed, run repair --apply again in %s, once its lease has expired: it goes on from the earlier run's mark and appends only the rows still missing; if it is running, let it finish", wait))
}

// processAlive reports whether a process pid may run on this host: false
// only when the system says it does not.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil || pid <= 0 {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH)
}

func refuse(why, hint string) error {
	err := fmt.Errorf("%w: %s", ErrRepairRefused, why)
	if hint != "" {
		return outbox.WithHint(err, "%s", hint)
	}
	return err
}

// compare indexes the streams and walks the snapshot's rows, calling
// onMissing for each row without an entry. Every row is compared whatever
// the stored position: the relay is stopped, and a row it did not append
// it will not append from where it stands.
func (o RepairOptions) compare(ctx context.Context, conn *sql.Conn, st relayState, r *RepairReport, onMissing func(uint64, string)) (*verifier, error) {
	vr := &VerifyReport{CaughtUp: true}
	v := newVerifier(o.DB, o.Table, o.Chunk, st.Mode == mode.Poll, vr)
	v.deleteMode, v.onMissing = o.DeleteRows, onMissing
	idx := newEntryIndex(o.Redis, o.Keys, o.Page)
	defer idx.drop()
	var err error
	if vr.Streams, vr.Entries, err = idx.addAll(ctx, o.Streams, VerifyRange{}); err != nil {
		return nil, err
	}
	if err := v.walk(ctx, conn, idx); err != nil {
		return nil, err
	}
	r.Streams, r.Rows, r.Entries = vr.Streams, vr.Rows, vr.Entries
	r.Missing, r.Examples, r.Duplicated = vr.Missing, vr.Examples.Missing, vr.Duplicated
	r.Foreign, r.Foreigns = vr.Foreign, vr.Examples.Foreign
	if r.Examples == nil {
		r.Examples = []VerifyExample{}
	}
	return v, nil
}

// provable refuses what repair cannot prove: entries whose rows the table
// lacks (a failover that lost transactions: never deleted here), streams
// trimmed below the table's rows (a trimmed entry looks like a missing row),
// and a position that moved while repair compared (position set replaced
// the mark).
func (o RepairOptions) provable(ctx context.Context, v *verifier, r *RepairReport, st relayState) error {
	if r.Foreign > 0 && r.Foreign != o.AcceptForeign {
		return refuse(fmt.Sprintf("%d entries name rows the table does not have (%s): the rows they were appended for were lost, maybe by a failover", r.Foreign, foreignList(r.Foreigns)),
			fmt.Sprintf("the entries are never deleted; decide with the consumers what they mean, then repair --apply --accept-foreign %d leaves them in the streams and repairs the rest (docs/incidents.md, failover gap)", r.Foreign))
	}
	if r.Foreign > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d foreign entries left in the streams as --accept-foreign says", r.Foreign))
	}
	if v.hasRows {
		streams, err := o.Streams.list(ctx, o.Redis)
		if err != nil {
			return err
		}
		for _, key := range streams {
			if key == o.Streams.DeadLetter {
				continue
			}
			info, err := o.Redis.XInfoStream(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("repair: XINFO STREAM %s: %w", key, redisconn.Classify(err))
			}
			first, ok := parseOutboxID(info.FirstEntry.Values[entry.FieldOutboxID])
			if info.EntriesAdded > info.Length && ok && first > v.minID {
				return refuse(fmt.Sprintf("the stream %s was trimmed or had entries deleted, and its first entry (outbox_id %d) is above the table's lowest row (id %d): a trimmed row cannot be told from a missing one", key, first, v.minID),
					"delete the rows the streams no longer hold (binlog-outbox cleanup) or compare a newer range with verify --from-id")
			}
		}
	}
	now, err := st.Sink.Position(ctx)
	if err != nil {
		return err
	}
	if string(now) != string(st.Position) {
		// Marked, the position moves only by position set (or reset).
		return refuse("the stored position moved while repair compared: position set (or reset) replaced repair's mark", "stop every relay of this position, then repair --apply")
	}
	return nil
}

// snapshotPosition is the position at end, in the stored position's kind:
// by GTID when it resumes by GTID. It must be the snapshot's exact place in
// the binlog, not a later one, or run would skip the transactions in
// between: the lock's end is (lockedSnapshot), and so is MariaDB's
// binlog_snapshot_file and _position (SnapshotStatus), whose GTID position
// BINLOG_GTID_POS gives.
func snapshotPosition(ctx context.Context, conn *sql.Conn, srv mysqlserver.Server, how string, end position.End, stored []byte) (position.Binlog, error) {
	p := position.Binlog{Flavor: srv.Flavor, ServerID: end.ServerID, ServerUUID: end.ServerUUID,
		File: end.File, Pos: end.Pos, Writer: "repair", UpdatedAt: time.Now().UTC()}
	old, err := position.Decode(stored)
	if err != nil || !old.GTIDMode() {
		return p, nil
	}
	if how == SnapshotLock {
		p.GTIDSet = end.GTIDSet.String()
		p.EmptyGTIDSet = p.GTIDSet == ""
		return p, nil
	}
	// gtid_binlog_pos (end.GTIDSet) was read after the snapshot began and
	// may hold later transactions: the GTID position of the snapshot's
	// offset is exact.
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT /* binlog-outbox */ BINLOG_GTID_POS(?, ?)", end.File, end.Pos).Scan(&gtid); err != nil {
		return position.Binlog{}, fmt.Errorf("repair: BINLOG_GTID_POS(%s, %d): %w", end.File, end.Pos, err)
	}
	p.GTIDSet = gtid.String
	p.EmptyGTIDSet = gtid.Valid && gtid.String == ""
	return p, nil
}

// apply reads the missing rows in the snapshot and appends them a batch at
// a time, as the relay appends (a row the sink cannot deliver goes to the
// dead-letter stream with its reason); each batch's script checks the lease
// and that the stored position is still prev, repair's mark (position set
// replaces it), and the last stores next, which has no mark. An
// interrupted apply leaves the mark, a fenced one the position set: the
// next repair finds only the rows still missing.
func (o RepairOptions) apply(ctx context.Context, conn *sql.Conn, sink *redisstream.Sink, _ *redisstream.Lease, ids []uint64, prev, next []byte, r *RepairReport) error {
	return o.batches(ctx, conn, ids, func(events []outbox.Event, last bool) error {
		to := prev
		if last {
			to = next
		}
		if len(events) == 0 && !last {
			return nil
		}
		err := sink.Append(ctx, events, prev, to)
		var moved *outbox.PositionMismatchError
		if errors.As(err, &moved) || errors.Is(err, outbox.ErrFenced) || errors.Is(err, outbox.ErrLeaseLost) {
			return refuse(fmt.Sprintf("the stored position moved or the lease was taken after %d of %d entries were appended: %v", r.Appended, len(ids), err),
				"the entries appended stay, each once, and the position is another's: stop every relay of this position (and wait for position set), then repair again: it appends only the rows still missing")
		}
		if err != nil {
			return fmt.Errorf("repair: %d entries appended, then: %w", r.Appended, err)
		}
		r.Appended += len(events)
		return nil
	})
}

// applyCluster is apply on Redis Cluster, whose append scripts keep a
// position per hash slot beside the position key, which the relay reads
// together (a slot ahead skips what it holds): batches appended with them
// would have to advance them all. The rows go by Publish instead, which
// stores no position, each batch after checking that repair still holds the
// lease (the relays of a cluster stand by behind it) and that the position
// is still prev, repair's mark (position set replaces it); then the slot
// positions are deleted, as position set does, and the position key is
// compare-and-set to next. An interrupted apply leaves the mark, and the
// next repair finds only the rows still missing.
func (o RepairOptions) applyCluster(ctx context.Context, conn *sql.Conn, sink *redisstream.Sink, lease *redisstream.Lease, ids []uint64, prev, next []byte, r *RepairReport) error {
	moved := func(what string) error {
		return refuse(fmt.Sprintf("%s after %d of %d entries were appended", what, r.Appended, len(ids)),
			"the entries appended stay, each once: stop every relay of this position (and wait for position set), then repair again: it appends only the rows still missing")
	}
	check := func() error {
		if lease != nil && lease.Value() == "" {
			return moved("the lease was lost")
		}
		now, err := o.Redis.Get(ctx, o.Keys.Position).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("repair: read the position: %w", redisconn.Classify(err))
		}
		if string(now) != string(prev) {
			return moved("the stored position moved")
		}
		return nil
	}
	if err := o.publish(ctx, conn, sink, ids, r, check); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	// The slot positions go while the key is still marked (no relay
	// starts): a relay started between would take the slots repair marked
	// for writes it lost, and read again from their marks.
	if _, err := redisstream.DeleteSlotPositions(ctx, o.Redis, o.Keys.Position); err != nil {
		return outbox.WithHint(fmt.Errorf("repair: %d entries appended, then deleting the slot positions failed: %w", r.Appended, err),
			"the position stays marked, so no relay starts: run repair --apply again, which appends only the rows still missing")
	}
	ok, err := casPositionScript.Run(ctx, o.Redis, []string{o.Keys.Position}, string(prev), string(next)).Int()
	if err != nil {
		return fmt.Errorf("repair: store the position: %w", redisconn.Classify(err))
	}
	if ok != 1 {
		return moved("the stored position moved")
	}
	return nil
}

// casPositionScript sets KEYS[1] to ARGV[2] ("": deletes it) when it
// holds ARGV[1] ("": nothing), and returns 1; 0 without writing otherwise.
var casPositionScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = '' end
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
`)

// publish appends the rows ids a batch at a time with Publish, which
// stores no position, counting them in r; check (nil: none) approves each
// batch first. Poll mode's missing rows go so (it keeps its progress in the
// table: a poller running meanwhile appends only unsent rows, and these are
// marked sent), and a cluster's, whose check holds the lease and the mark.
func (o RepairOptions) publish(ctx context.Context, conn *sql.Conn, sink *redisstream.Sink, ids []uint64, r *RepairReport, check func() error) error {
	return o.batches(ctx, conn, ids, func(events []outbox.Event, _ bool) error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if len(events) == 0 {
			return nil
		}
		n, err := sink.Publish(ctx, events)
		if err != nil {
			return fmt.Errorf("repair: %d entries appended, then: %w", r.Appended, err)
		}
		r.Appended += n
		return nil
	})
}

// batches reads the rows ids in the snapshot, repairBatch at a time, and
// calls fn with each batch's events (last for the last, which may be
// empty); afterBatch runs between them.
func (o RepairOptions) batches(ctx context.Context, conn *sql.Conn, ids []uint64, fn func(events []outbox.Event, last bool) error) error {
	q := outboxsql.NewReplay(o.Table, schema.FieldColumns(o.Table.Mapping, o.Extra))
	d := newRowDecoder(o.Table, o.Extra)
	for start := 0; ; start += repairBatch {
		batch := ids[start:min(start+repairBatch, len(ids))]
		last := start+repairBatch >= len(ids)
		var events []outbox.Event
		if len(batch) > 0 {
			rs, err := conn.QueryContext(ctx, q.Rows(batch))
			if err != nil {
				return fmt.Errorf("repair: read rows: %w", err)
			}
			for rs.Next() {
				d.reset()
				if err := rs.Scan(d.dest...); err != nil {
					rs.Close()
					return fmt.Errorf("repair: read rows: %w", err)
				}
				e := d.event()
				e.Database, e.Table = o.Table.Database, o.Table.Name
				events = append(events, e)
			}
			err = rs.Err()
			rs.Close()
			if err != nil {
				return fmt.Errorf("repair: read rows: %w", err)
			}
		}
		if err := fn(events, last); err != nil {
			return err
		}
		if last {
			return nil
		}
		if o.afterBatch != nil {
			if err := o.afterBatch(ctx); err != nil {
				return err
			}
		}
	}
}

// modeOf settles the mode repair works in: what Redis says, or --mode
// where it says nothing (a Redis that lost its data), refusing a --mode
// that contradicts it, and a guess.
func (o RepairOptions) modeOf(st *relayState) error {
	said := st.Recorded || st.Position != nil
	switch {
	case o.Mode != "" && said && o.Mode != st.Mode:
		return refuse(fmt.Sprintf("--mode %s, but Redis says the table is relayed in %s mode (%s)", o.Mode, st.Mode, o.Keys.Mode),
			"leave --mode out: repair works in the mode the relay recorded")
	case o.Mode != "":
		st.Mode = o.Mode
	case !said:
		return refuse(fmt.Sprintf("nothing in Redis says how %s is relayed (no mode at %s, no position or record at %s): Redis lost its data, or no relay ran here", o.Table.Name, o.Keys.Mode, o.Keys.Position),
			"give --mode binlog (the relay reads the binlog: every row no stream holds is missing) or --mode poll (rows marked sent that no stream holds are missing)")
	}
	return nil
}
