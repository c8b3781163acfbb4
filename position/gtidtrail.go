package position

import (
	"fmt"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// With returns the set after the transaction g: s with g added, as the
// server's own set grows with each GTID event. It does not copy s. The result
// is worked out the first time it is used (String, Equal, GoMySQL, ...), from
// the nearest set before it that was, so a reader that meets a GTID in every
// transaction copies the set once per position it stores, not once per
// transaction: copying it at every GTID cost a catch-up of single-row
// transactions CPU in proportion to the set's size.
//
// The zero set stays zero (a relay reading by file and offset keeps no
// set), as does s when g is no GTID. A GTID of the other flavor, or a MySQL
// GTID whose source is not 16 bytes, is an error: the set could not hold it.
func (s GTIDSet) With(g GTID) (GTIDSet, error) {
	if s.IsZero() || g.IsZero() {
		return s, nil
	}
	st := &gtidStep{gtid: g, depth: 1}
	if s.step != nil {
		st.mariadb = s.step.mariadb
		st.prev.Store(s.step)
		if s.step.done.Load() == nil {
			st.depth = s.step.depth + 1
		}
	} else {
		switch s.set.(type) {
		case *mysql.MariadbGTIDSet:
			st.mariadb = true
		case *mysql.MysqlGTIDSet:
		default:
			return s, fmt.Errorf("add GTID %s to %s: a GTID set of an unknown kind (%T)", g, s, s.set)
		}
		st.base = s.set
	}
	mariadbGTID := g.sid == nil
	if mariadbGTID != st.mariadb {
		return s, fmt.Errorf("add GTID %s to the GTID set %s: the GTID is of the other server flavor", g, s)
	}
	if !mariadbGTID {
		u, err := uuid.FromBytes(g.sid)
		if err != nil {
			return s, fmt.Errorf("add a GTID to the GTID set %s: its source uuid is %d bytes, not 16", s, len(g.sid))
		}
		st.uuid = u
	}
	if st.depth >= maxTrail {
		// Nobody used the sets of the last maxTrail steps (a relay reading
		// only other tables' transactions stores a position once a
		// second): work this one out, so that the steps before it go.
		st.resolve()
	}
	return GTIDSet{step: st}, nil
}

// maxTrail is the most steps With keeps before it works a set out itself.
const maxTrail = 1024

// gtidStep is a set that With grew by one GTID: its predecessor's set (prev,
// or base for the first step) with gtid added. resolve works it out once and
// keeps it in done; it then cuts prev, so that a long stream keeps no more
// steps than those since the last set worked out, at most maxTrail.
//
// Steps are shared between goroutines (a stored position is the reader's
// and its flusher's): prev and done are atomic, and two goroutines working
// out the same step at once compute the same set.
type gtidStep struct {
	prev    atomic.Pointer[gtidStep]
	base    mysql.GTIDSet // the first step's predecessor; never modified
	gtid    GTID
	depth   int       // steps since the last set worked out when it was made
	uuid    uuid.UUID // of a MySQL GTID
	mariadb bool
	done    atomic.Pointer[resolvedSet]
}

type resolvedSet struct{ set mysql.GTIDSet }

// resolve returns the step's set, working it out on first use. The set
// returned must not be modified: every user of the step shares it.
func (st *gtidStep) resolve() mysql.GTIDSet {
	if r := st.done.Load(); r != nil {
		return r.set
	}
	var chain []*gtidStep // the steps to apply, newest first
	var from mysql.GTIDSet
	for s := st; ; {
		if r := s.done.Load(); r != nil {
			from = r.set
			break
		}
		chain = append(chain, s)
		p := s.prev.Load()
		if p == nil {
			// The first step, or one whose set was worked out (done is
			// stored before prev is cut) since it was loaded above.
			if r := s.done.Load(); r != nil {
				chain = chain[:len(chain)-1]
				from = r.set
			} else {
				from = s.base
			}
			break
		}
		s = p
	}
	set := from.Clone()
	for i := len(chain) - 1; i >= 0; i-- {
		chain[i].addTo(set)
	}
	st.done.Store(&resolvedSet{set: set})
	st.prev.Store(nil)
	return set
}

// addTo adds the step's GTID to set, a copy of its predecessor's set, as
// go-mysql's BinlogSyncer adds each GTID event's to its own.
func (st *gtidStep) addTo(set mysql.GTIDSet) {
	if st.mariadb {
		g := st.gtid.mariadb
		// AddSet fails only for a GTID whose domain differs from the one
		// it is filed under, which cannot happen here.
		_ = set.(*mysql.MariadbGTIDSet).AddSet(&g)
		return
	}
	set.(*mysql.MysqlGTIDSet).AddGTIDWithTag(st.uuid, st.gtid.tag, st.gtid.gno)
}
