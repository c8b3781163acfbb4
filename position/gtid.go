package position

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// GTIDSet is a parsed GTID set of a MySQL or MariaDB server: the transactions
// a relay has read, which it resumes after by GTID. The zero GTIDSet is no
// set: the relay resumes by file and offset. A set that With grew is worked
// out on first use (gtidtrail.go); GTIDSet values are safe to share between
// goroutines either way.
type GTIDSet struct {
	set  mysql.GTIDSet
	step *gtidStep // non-nil: the set is step's, set is unused
}

// get returns the set itself, working it out if With grew it.
func (s GTIDSet) get() mysql.GTIDSet {
	if s.step != nil {
		return s.step.resolve()
	}
	return s.set
}

// ParseGTIDSet parses s as a GTID set of flavor (FlavorMySQL or FlavorMariaDB).
func ParseGTIDSet(flavor, s string) (GTIDSet, error) {
	set, err := mysql.ParseGTIDSet(flavor, s)
	if err != nil {
		return GTIDSet{}, fmt.Errorf("not a %s GTID set: %w", flavor, err)
	}
	return GTIDSet{set: set}, nil
}

// GTIDSetOf wraps a set go-mysql decoded (an XID or query event's GSet); nil
// gives the zero GTIDSet. The set is kept, not copied: go-mysql hands out a
// new one with every event.
func GTIDSetOf(set mysql.GTIDSet) GTIDSet { return GTIDSet{set: set} }

// IsZero reports whether s is no set (file position mode).
func (s GTIDSet) IsZero() bool { return s.set == nil && s.step == nil }

// String formats the set as the server does; "" for the zero set.
func (s GTIDSet) String() string {
	if s.IsZero() {
		return ""
	}
	return s.get().String()
}

// Equal reports whether s and o hold the same transactions.
func (s GTIDSet) Equal(o GTIDSet) bool {
	if s.IsZero() || o.IsZero() {
		return s.IsZero() && o.IsZero()
	}
	return s.get().Equal(o.get())
}

// GoMySQL returns the set as go-mysql takes it (BinlogSyncer.StartSyncGTID);
// nil for the zero set. The caller must not modify it: values share it.
func (s GTIDSet) GoMySQL() mysql.GTIDSet {
	if s.IsZero() {
		return nil
	}
	return s.get()
}

// GTID is the GTID of one transaction, kept as the binlog event gave it: the
// reader meets one per transaction and formatting each would cost more than
// the rest of its bookkeeping, so it is formatted only when a position is
// stored or shown. The zero GTID is none (an anonymous transaction).
type GTID struct {
	mariadb mysql.MariadbGTID
	sid     []byte
	tag     mysql.Tag // MySQL 8.4+ tagged GTIDs
	gno     int64
	set     bool
}

// MariaDBGTID refers to the GTID of a MariaDB GTID event.
func MariaDBGTID(g mysql.MariadbGTID) GTID { return GTID{mariadb: g, set: true} }

// MySQLGTID refers to the GTID of a MySQL GTID event: the source uuid as its
// 16 bytes, the tag (empty when untagged) and the transaction number.
func MySQLGTID(sid []byte, tag mysql.Tag, gno int64) GTID {
	return GTID{sid: sid, tag: tag, gno: gno, set: true}
}

// IsZero reports whether g is no GTID.
func (g GTID) IsZero() bool { return !g.set }

// String formats g as the server does (uuid[:tag]:gno, domain-server-seq);
// "" for none, or for a uuid that is not 16 bytes.
func (g GTID) String() string {
	switch {
	case !g.set:
		return ""
	case g.sid == nil:
		return strconv.FormatUint(uint64(g.mariadb.DomainID), 10) + "-" +
			strconv.FormatUint(uint64(g.mariadb.ServerID), 10) + "-" +
			strconv.FormatUint(g.mariadb.SequenceNumber, 10)
	default:
		u, err := uuid.FromBytes(g.sid)
		if err != nil {
			return ""
		}
		if tag := g.tag.String(); tag != "" {
			// The tag is part of the GTID: uuid:gno names another transaction.
			return u.String() + ":" + tag + ":" + strconv.FormatInt(g.gno, 10)
		}
		return u.String() + ":" + strconv.FormatInt(g.gno, 10)
	}
}

// HeldBy reports whether a server has every transaction of s in its binlog:
// whether a relay can resume from s there, after a failover too. state is
// what the server says it holds: @@gtid_executed on MySQL, and on MariaDB
// @@gtid_binlog_state, the last GTID of every domain and server id. (Not
// @@gtid_binlog_pos: with one GTID per domain it cannot tell a promoted
// replica's own transactions from those of the old primary it never
// received, which carry the same sequence numbers.)
func (s GTIDSet) HeldBy(flavor, state string) (bool, error) {
	if s.IsZero() {
		return false, errors.New("no GTID set")
	}
	set := s.get()
	if flavor == FlavorMySQL {
		server, err := mysql.ParseMysqlGTIDSet(state)
		if err != nil {
			return false, fmt.Errorf("the server's gtid_executed %q: %w", state, err)
		}
		return server.Contain(set), nil
	}
	ours, ok := set.(*mysql.MariadbGTIDSet)
	if !ok {
		return false, fmt.Errorf("not a %s GTID set: %s", FlavorMariaDB, s)
	}
	type origin struct{ domain, server uint32 }
	last := map[origin]uint64{}
	for _, part := range strings.Split(state, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return false, fmt.Errorf("the server's gtid_binlog_state %q: %w", state, err)
		}
		o := origin{g.DomainID, g.ServerID}
		last[o] = max(last[o], g.SequenceNumber)
	}
	for _, g := range ours.Sets {
		// Sequence numbers of one origin only grow: holding a later one
		// means holding this one (unless purged, which the server tells).
		if n, ok := last[origin{g.DomainID, g.ServerID}]; !ok || n < g.SequenceNumber {
			return false, nil
		}
	}
	return true, nil
}

// Contains reports whether s holds every transaction of o. A zero set holds
// nothing, and sets of different flavors hold nothing of each other.
func (s GTIDSet) Contains(o GTIDSet) bool {
	if s.IsZero() || o.IsZero() {
		return false
	}
	return s.get().Contain(o.get())
}

// NeedsPurged says which transactions a dump from s would need that the
// server purged, "" when none: the server refuses such a dump (ERROR
// 1236) or, worse, serves what it still has. purged is, on MySQL,
// @@gtid_purged, and on MariaDB the GTID position at the start of the
// oldest binlog file (BINLOG_GTID_POS(<oldest file>, 4), its Gtid_list):
// a domain there that s lacks, or holds an earlier sequence number of,
// needs transactions from before that file. A zero s (no transaction read
// yet) needs them all.
func (s GTIDSet) NeedsPurged(flavor, purged string) (string, error) {
	purged = strings.TrimSpace(purged)
	if purged == "" {
		return "", nil
	}
	p, err := ParseGTIDSet(flavor, purged)
	if err != nil {
		return "", fmt.Errorf("the server's purged GTIDs %q: %w", purged, err)
	}
	if s.IsZero() {
		return purged, nil
	}
	if flavor == FlavorMySQL {
		if s.get().Contain(p.get()) {
			return "", nil
		}
		return purged, nil
	}
	ours, ok := s.get().(*mysql.MariadbGTIDSet)
	if !ok {
		return "", fmt.Errorf("not a %s GTID set: %s", FlavorMariaDB, s)
	}
	var need []string
	for d, first := range p.get().(*mysql.MariadbGTIDSet).Sets {
		if g, ok := ours.Sets[d]; !ok || g.SequenceNumber < first.SequenceNumber {
			need = append(need, first.String())
		}
	}
	slices.Sort(need)
	return strings.Join(need, ","), nil
}

// MissingDomains returns the MariaDB replication domains of state (the
// server's @@gtid_binlog_state) that s has no GTID of, in order. A dump
// from s reads every transaction of such a domain from the oldest binlog
// on: a set given by hand (--start-from, position set) that leaves one out
// would re-read it whole. Nil for MySQL sets.
func (s GTIDSet) MissingDomains(state string) ([]uint32, error) {
	ours, ok := s.get().(*mysql.MariadbGTIDSet)
	if !ok {
		return nil, nil
	}
	var missing []uint32
	for _, part := range strings.Split(state, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, fmt.Errorf("the server's gtid_binlog_state %q: %w", state, err)
		}
		if _, ok := ours.Sets[g.DomainID]; !ok && !slices.Contains(missing, g.DomainID) {
			missing = append(missing, g.DomainID)
		}
	}
	slices.Sort(missing)
	return missing, nil
}
