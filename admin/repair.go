package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// repairBatch is how many rows one append of repair carries.
const repairBatch = 500

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
	// Sink appends as the relay does (run's stream and format flags and
	// the position key); only Apply uses it.
	Sink *redisstream.Sink
	// Chunk and Page are verify's (VerifyOptions); both positive.
	Chunk, Page int
	// Apply appends the missing rows and stores the position; without it
	// Repair writes nothing.
	Apply bool
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
	// Applied says the missing rows were appended and Position stored.
	Applied  bool     `json:"applied"`
	Appended int      `json:"appended"`
	Position string   `json:"position,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Repair finds, in one consistent snapshot, the committed rows no stream
// holds; with Apply it appends them once, in id order (so each aggregate's
// rows in order), and stores as the position the binlog end as of that
// snapshot: every row the snapshot shows is then in a stream, and every
// row committed after it lies after the position, where run resumes.
// It refuses (ErrRepairRefused, nothing written) what it cannot prove.
func Repair(ctx context.Context, o RepairOptions) (RepairReport, error) {
	st, err := loadRelayState(ctx, o.Redis, o.Keys, "repair")
	if err != nil {
		return RepairReport{}, err
	}
	r := RepairReport{Mode: st.Mode, Table: o.Table.Database + "." + o.Table.Name}
	if o.Apply && st.Mode != mode.Binlog {
		return r, refuse("the table is relayed in poll mode, where run appends every unsent row itself: repair --apply is for binlog mode", "")
	}
	if err := o.checkLease(ctx, &r); err != nil {
		return r, err
	}
	conn, err := o.DB.Conn(ctx)
	if err != nil {
		return r, fmt.Errorf("repair: connect: %w", err)
	}
	defer conn.Close()
	// The snapshot first, its binlog end next: every row the snapshot
	// shows committed before that end, every row it lacks after it.
	if err := beginSnapshot(ctx, conn); err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	defer endSnapshot(conn)
	srv, err := mysqlserver.Detect(ctx, o.DB)
	if err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
	end, err := srv.SnapshotEnd(ctx, conn)
	if err != nil {
		return r, fmt.Errorf("repair: %w", err)
	}
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
	pos, err := snapshotPosition(ctx, conn, srv, end, st.Position)
	if err != nil {
		return r, err
	}
	if err := o.apply(ctx, conn, missing, st.Position, pos.Encode(), &r); err != nil {
		return r, err
	}
	r.Applied, r.Position = true, pos.String()
	return r, nil
}

// refuse builds the error of a refusal.
func refuse(why, hint string) error {
	err := fmt.Errorf("%w: %s", ErrRepairRefused, why)
	if hint != "" {
		return outbox.WithHint(err, "%s", hint)
	}
	return err
}

// checkLease refuses an apply while a relay holds the position's lease; a
// dry run only warns, its counts then include rows not yet relayed.
func (o RepairOptions) checkLease(ctx context.Context, r *RepairReport) error {
	if o.Keys.Lease == "" {
		return nil
	}
	info, _, held, err := redisstream.ReadLease(ctx, o.Redis, o.Keys.Lease)
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	if !held {
		return nil
	}
	if o.Apply {
		return refuse(fmt.Sprintf("a relay holds the lease %s (%s): it is running on the position", o.Keys.Lease, info),
			"stop every relay of this position (run), then repair --apply, then start run again")
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("a relay holds the lease %s (%s): rows it has not yet appended count as missing", o.Keys.Lease, info))
	return nil
}

// compare indexes the streams and walks the snapshot's rows, calling
// onMissing for each row without an entry. Every row is compared whatever
// the stored position: the relay is stopped, and a row it did not append
// it will not append from where it stands.
func (o RepairOptions) compare(ctx context.Context, conn *sql.Conn, st relayState, r *RepairReport, onMissing func(uint64, string)) (*verifier, error) {
	vr := &VerifyReport{CaughtUp: true}
	v := newVerifier(o.DB, o.Table, o.Chunk, st.Mode == mode.Poll, vr)
	v.onMissing = onMissing
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
// and a position that moved while repair compared (a relay without lease).
func (o RepairOptions) provable(ctx context.Context, v *verifier, r *RepairReport, st relayState) error {
	if r.Foreign > 0 {
		return refuse(fmt.Sprintf("%d entries name rows the table does not have (e.g. outbox_id %d): the rows they were appended for were lost, maybe by a failover", r.Foreign, r.Foreigns[0].OutboxID),
			"the entries are left as they are; see docs/incidents.md (failover gap) before repairing")
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
				return fmt.Errorf("repair: XINFO STREAM %s: %w", key, redisstream.Classify(err))
			}
			first, ok := parseOutboxID(info.FirstEntry.Values[redisstream.FieldOutboxID])
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
		return refuse("the stored position moved while repair compared: a relay is running on it", "stop every relay of this position, then repair --apply")
	}
	return nil
}

// snapshotPosition is the position at end, in the stored position's kind:
// by GTID when it resumes by GTID. It must be the snapshot's exact place in
// the binlog, not a later one, or run would skip the transactions in
// between: MariaDB reports it (binlog_snapshot_file and _position, which
// SnapshotEnd read; BINLOG_GTID_POS turns it into a GTID position), MySQL
// does not, and repair --apply refuses there.
func snapshotPosition(ctx context.Context, conn *sql.Conn, srv mysqlserver.Server, end position.End, stored []byte) (position.Binlog, error) {
	if !srv.MariaDB() {
		return position.Binlog{}, refuse("the server does not report the binlog position of a consistent snapshot (MariaDB's binlog_snapshot_file), so repair cannot prove where run must resume",
			"on MySQL, republish with poll mode or position set as docs/incidents.md describes")
	}
	p := position.Binlog{Flavor: position.FlavorMariaDB, ServerID: end.ServerID, ServerUUID: end.ServerUUID,
		File: end.File, Pos: end.Pos, Writer: "repair", UpdatedAt: time.Now().UTC()}
	if old, err := position.Decode(stored); err == nil && old.GTIDMode() {
		// gtid_binlog_pos (end.GTIDSet) was read after the snapshot began
		// and may hold later transactions: the GTID position of the
		// snapshot's offset is exact.
		var gtid sql.NullString
		if err := conn.QueryRowContext(ctx, "SELECT /* binlog-outbox */ BINLOG_GTID_POS(?, ?)", end.File, end.Pos).Scan(&gtid); err != nil {
			return position.Binlog{}, fmt.Errorf("repair: BINLOG_GTID_POS(%s, %d): %w", end.File, end.Pos, err)
		}
		p.GTIDSet = gtid.String
		p.EmptyGTIDSet = gtid.Valid && gtid.String == ""
	}
	return p, nil
}

// apply reads the missing rows in the snapshot and appends them a batch at
// a time, as the relay appends (a row the sink cannot deliver goes to the
// dead-letter stream with its reason); each batch's script checks the stored position is still prev
// (fencing a relay started meanwhile), and the last stores next. An
// interrupted apply leaves the position as it was: the next repair finds
// only the rows still missing.
func (o RepairOptions) apply(ctx context.Context, conn *sql.Conn, ids []uint64, prev, next []byte, r *RepairReport) error {
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
		to := prev
		if last {
			to = next
		}
		if len(events) > 0 || last {
			if err := o.Sink.Append(ctx, events, prev, to); err != nil {
				return fmt.Errorf("repair: %d entries appended, then: %w", r.Appended, err)
			}
		}
		r.Appended += len(events)
		if last {
			return nil
		}
	}
}
