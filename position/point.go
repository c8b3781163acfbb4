package position

import (
	"errors"
	"fmt"
	"strconv"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Point is a place in the binlog as the reader advances it: where to resume
// (File and Pos, or GTIDSet in GTID mode), the GTID of the last transaction
// read, and how many outbox rows of the transaction starting there were
// already appended. It is what a Binlog is before it is stamped with its
// writer and stored.
type Point struct {
	File    string
	Pos     uint32
	GTIDSet GTIDSet // GTID mode only
	// LastGTID stays unformatted until the point is stored or shown.
	LastGTID GTID
	// TxRows counts the outbox rows of the transaction at the point already
	// appended (chunked delivery of a huge transaction; see Binlog.TxRows).
	TxRows uint64
	// CommitTS is the binlog timestamp of the transaction ending here (0:
	// not a commit), for the lag metric; it is not stored.
	CommitTS uint32
}

// String renders the point for logs and metrics, as Binlog.String does.
func (p Point) String() string {
	return format(p.File, p.Pos, p.GTIDSet.String(), !p.GTIDSet.IsZero(), p.TxRows)
}

// Binlog returns the point as the position a relay of flavor stores, without
// the fields that say who wrote it and when (ServerID, ServerUUID, Writer,
// Seq, UpdatedAt): the writer fills those.
func (p Point) Binlog(flavor string) Binlog {
	b := Binlog{
		Flavor: flavor, File: p.File, Pos: p.Pos, GTIDSet: p.GTIDSet.String(),
		LastGTID: p.LastGTID.String(), TxRows: p.TxRows,
	}
	b.EmptyGTIDSet = !p.GTIDSet.IsZero() && b.GTIDSet == ""
	return b
}

// Point returns the point to resume from, with the GTID set parsed in the
// position's flavor. LastGTID stays empty: it names the transaction before
// the point, which the reader does not need to resume.
func (b Binlog) Point() (Point, error) {
	p := Point{File: b.File, Pos: b.Pos, TxRows: b.TxRows}
	if b.GTIDMode() {
		set, err := ParseGTIDSet(b.Flavor, b.GTIDSet)
		if err != nil {
			return Point{}, fmt.Errorf("position: gtid_set %q: %w", logging.Truncate(b.GTIDSet, 100), err)
		}
		p.GTIDSet = set
	}
	return p, nil
}

// format is the one rendering of a position for people.
func format(file string, pos uint32, gtidSet string, gtid bool, txRows uint64) string {
	s := file + ":" + strconv.FormatUint(uint64(pos), 10)
	switch {
	case gtidSet != "":
		s += " gtid_set=" + gtidSet
	case gtid:
		s += " gtid_set=(empty)"
	}
	if txRows > 0 {
		s += " (+" + strconv.FormatUint(txRows, 10) + " rows of the next transaction)"
	}
	return s
}

// MismatchKind says what a stored position that is not the one a relay last
// wrote means.
type MismatchKind int

// The kinds of mismatch.
const (
	// Fenced: another process wrote the position (or one the relay cannot
	// read): two relays run for the same position key.
	Fenced MismatchKind = iota + 1
	// RolledBack: an older position of the relay's own: Redis lost
	// acknowledged writes (a failover to a lagging replica, a restart
	// without persistence), and the streams lost the same entries.
	RolledBack
	// Deleted: no position is stored any more (position reset, or the key
	// deleted).
	Deleted
	// Repairing: `repair --apply` marked the position as its own
	// (Binlog.Repair).
	Repairing
)

// Mismatch is the decision about a stored position a relay's compare-and-set
// did not expect.
type Mismatch struct {
	Kind MismatchKind
	// By is the writer of the stored position; "" when unknown.
	By string
	// StoredSeq is the stored position's Seq, LastSeq the last one the
	// relay wrote.
	StoredSeq, LastSeq uint64
	// Repair is the repair's hold, for Repairing.
	Repair RepairHold
}

// Compare decides what the stored position (nil: none) means to the relay
// identified by writer whose last write was sequence number lastSeq. Only
// its own older write counts as a rollback: a position it cannot decode, or
// one without a writer, is someone else's; one a repair marked is the
// repair's, whoever wrote it before.
func Compare(stored []byte, writer string, lastSeq uint64) Mismatch {
	if stored == nil {
		return Mismatch{Kind: Deleted, LastSeq: lastSeq}
	}
	b, err := Decode(stored)
	if err != nil {
		return Mismatch{Kind: Fenced, LastSeq: lastSeq}
	}
	m := Mismatch{Kind: Fenced, By: b.Writer, StoredSeq: b.Seq, LastSeq: lastSeq}
	if b.Repairing() {
		// The marked position keeps the coordinates, writer and sequence
		// number repair started from: it is no rollback of the relay's.
		m.Kind, m.Repair = Repairing, b.Repair
		return m
	}
	if b.Writer == writer && b.Seq < lastSeq {
		m.Kind = RolledBack
	}
	return m
}

// Err is the relay's error for the mismatch: outbox.ErrFenced (deleted or
// fenced: the relay stops), outbox.ErrRepairing (it stops too) or outbox.ErrPositionRolledBack (it re-reads from
// the stored position), with what the operator can do.
func (m Mismatch) Err() error {
	switch m.Kind {
	case Deleted:
		return outbox.WithHint(fmt.Errorf("%w: the position was deleted while the relay ran", outbox.ErrFenced),
			"someone ran `binlog-outbox position reset` or deleted the key, or Redis lost it (a failover to a replica that never received it, a restart without persistence); "+
				"with the relay stopped, `binlog-outbox repair` lists the committed rows no stream holds and `binlog-outbox repair --apply` appends them once and stores the position to go on from (docs/incidents.md, a lost position); "+
				"a restart alone refuses to guess where to start")
	case Repairing:
		return Binlog{Repair: m.Repair}.RepairError("")
	case RolledBack:
		return fmt.Errorf("%w: stored seq %d, last written %d", outbox.ErrPositionRolledBack, m.StoredSeq, m.LastSeq)
	case Fenced:
		who := m.By
		if who == "" {
			who = "another process"
		}
		return outbox.WithHint(fmt.Errorf("%w: it was written by %s", outbox.ErrFenced, who),
			"a relay that does not take the lease (--lease=false, or a version without it) or `binlog-outbox position set` wrote the position while this relay held it: run every relay of a position with --lease (the default), so that they take turns, or give each its own --position-key; this relay stops so that no event is appended twice")
	}
	return errors.New("position: no mismatch")
}

// FileAtOrPast reports whether file:pos is at or after endFile:endPos in
// one server's binlog. Binlog file names share a base and grow a numeric
// suffix (mysql-bin.000009, mysql-bin.000010, ... mysql-bin.1000000): longer
// is later, then lexicographic.
func FileAtOrPast(file string, pos uint32, endFile string, endPos uint32) bool {
	if file != endFile {
		if len(file) != len(endFile) {
			return len(file) > len(endFile)
		}
		return file > endFile
	}
	return pos >= endPos
}

// End is the end of one server's binlog at a moment: what a reader has to
// reach to have read every transaction committed before that moment.
type End struct {
	// ServerID and ServerUUID (MySQL only) identify the server File and
	// Pos belong to.
	ServerID   uint32
	ServerUUID string
	File       string
	Pos        uint32
	// GTIDSet, when not zero, holds every transaction up to the end; it
	// compares with a position of another server of the topology.
	GTIDSet GTIDSet
}

// String renders the end as positions are rendered.
func (e End) String() string { return format(e.File, e.Pos, e.GTIDSet.String(), false, 0) }

// Passed reports whether a relay at the stored position b has read, and
// appended, every transaction that ended at or before e. Binlog offsets
// compare only within one server; across servers (a failover the relay has
// not stored a position since) only GTID sets do, when b resumes by GTID
// and e carries the server's set. When neither can be compared the error
// says why: the caller must not take that as passed.
func (b Binlog) Passed(e End) (bool, error) {
	sameServer := b.ServerID == e.ServerID && (b.ServerUUID == "" || e.ServerUUID == "" || b.ServerUUID == e.ServerUUID)
	if sameServer && b.File != "" && e.File != "" {
		return FileAtOrPast(b.File, b.Pos, e.File, e.Pos), nil
	}
	if b.GTIDMode() && !e.GTIDSet.IsZero() {
		set, err := ParseGTIDSet(b.Flavor, b.GTIDSet)
		if err != nil {
			return false, fmt.Errorf("position: gtid_set %q: %w", logging.Truncate(b.GTIDSet, 100), err)
		}
		return set.Contains(e.GTIDSet), nil
	}
	if !sameServer {
		return false, fmt.Errorf("the stored position %s belongs to %s, not to the server at hand (%s), and binlog offsets are server-local",
			b, serverName(b.ServerID, b.ServerUUID), serverName(e.ServerID, e.ServerUUID))
	}
	return false, fmt.Errorf("the stored position %s has no binlog file to compare with %s", b, e)
}

func serverName(id uint32, uuid string) string {
	if uuid == "" {
		return "server_id " + strconv.FormatUint(uint64(id), 10)
	}
	return "server_id " + strconv.FormatUint(uint64(id), 10) + " (" + uuid + ")"
}

// Order compares two points of one binlog: -1, 0 or 1 as a is before, at or
// after b. Points of GTID mode compare by their sets, others by file and
// offset; within one transaction by TxRows. It fails for points that do not
// compare: GTID sets neither of which holds the other (two histories), or
// one point in GTID mode and the other not.
func Order(a, b Point) (int, error) {
	var c int
	switch {
	case !a.GTIDSet.IsZero() && !b.GTIDSet.IsZero():
		switch {
		case a.GTIDSet.Equal(b.GTIDSet):
		case a.GTIDSet.Contains(b.GTIDSet):
			c = 1
		case b.GTIDSet.Contains(a.GTIDSet):
			c = -1
		default:
			return 0, fmt.Errorf("position: GTID sets %s and %s do not compare: neither holds the other", a.GTIDSet, b.GTIDSet)
		}
	case a.GTIDSet.IsZero() != b.GTIDSet.IsZero():
		return 0, fmt.Errorf("position: %s and %s do not compare: one is a GTID position, the other a file position", a, b)
	case a.File != b.File || a.Pos != b.Pos:
		c = 1
		if !FileAtOrPast(a.File, a.Pos, b.File, b.Pos) {
			c = -1
		}
	}
	if c == 0 && a.TxRows != b.TxRows {
		c = 1
		if a.TxRows < b.TxRows {
			c = -1
		}
	}
	return c, nil
}
