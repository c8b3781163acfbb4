package canal

import "github.com/go-mysql-org/go-mysql/replication"

// nameCache remembers something per table as the binlog names it, so that
// the table map of every transaction does not decide it again: the
// decision itself (matching --table patterns) costs more than the lookup.
// It is keyed by table id, one map whatever the number of tables (a map per
// database cost a thousand tenants a thousand maps, marked by every garbage
// collection), and an entry counts only while the table map's names are
// the ones it was put with: the server gives an id to another table once
// the first leaves its table cache. The lookup converts no names to
// strings. A server with more tables than maxCachedNames starts it over.
//
// Nothing in it is a pointer: the names lie back to back in one byte
// slice, and V is a number or a flag. The collector then marks neither
// its entries nor their names, which it did in every cycle when each entry
// held two strings: with a thousand tenants the three caches of a session
// were 6,000 objects, a sixth of the relay's live heap, and the
// collections that marked them made a catch-up over the tenants cost more
// CPU per event than one over a single table.
// It is not safe for concurrent use: each goroutine has its own.
type nameCache[V bool | int32] struct {
	m     map[uint64]nameEntry[V]
	names []byte
}

// nameEntry is a table's value and where its names are in nameCache.names:
// the database's from at, the table's right after it.
type nameEntry[V bool | int32] struct {
	at, database, table uint32
	v                   V
}

// maxCachedNames bounds a nameCache's entries, and maxCachedNameBytes its
// names, which an id given to another table again and again adds to.
const (
	maxCachedNames     = 4096
	maxCachedNameBytes = 1 << 20
)

// get returns the value put for the table tm names.
func (c *nameCache[V]) get(tm *replication.TableMapEvent) (V, bool) {
	e, ok := c.m[tm.TableID]
	if !ok || string(c.names[e.at:e.at+e.database]) != string(tm.Schema) ||
		string(c.names[e.at+e.database:e.at+e.database+e.table]) != string(tm.Table) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put remembers v for the table tm names.
func (c *nameCache[V]) put(tm *replication.TableMapEvent, v V) {
	if c.m == nil || len(c.m) >= maxCachedNames || len(c.names) >= maxCachedNameBytes {
		c.m, c.names = map[uint64]nameEntry[V]{}, c.names[:0]
	}
	e := nameEntry[V]{at: uint32(len(c.names)), database: uint32(len(tm.Schema)), table: uint32(len(tm.Table)), v: v}
	c.names = append(append(c.names, tm.Schema...), tm.Table...)
	c.m[tm.TableID] = e
}

// tableMatcher returns match asked of the table a table map names, with its
// answer remembered per table: go-mysql's parsing goroutine asks it for
// every rows event (binlogrow.DecodeConfig), and the machine's guard for
// every table map (tableSet.matches). Each goroutine needs its own.
func tableMatcher(match func(database, table string) bool) func(*replication.TableMapEvent) bool {
	var matched nameCache[bool]
	return func(tm *replication.TableMapEvent) bool {
		ok, known := matched.get(tm)
		if !known {
			ok = match(string(tm.Schema), string(tm.Table))
			matched.put(tm, ok)
		}
		return ok
	}
}
