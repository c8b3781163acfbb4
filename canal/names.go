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
// It is not safe for concurrent use: each goroutine has its own.
type nameCache[V any] struct {
	m map[uint64]nameEntry[V]
}

type nameEntry[V any] struct {
	database, table string
	v               V
}

// maxCachedNames bounds a nameCache.
const maxCachedNames = 4096

// get returns the value put for the table tm names.
func (c *nameCache[V]) get(tm *replication.TableMapEvent) (V, bool) {
	e, ok := c.m[tm.TableID]
	if !ok || e.database != string(tm.Schema) || e.table != string(tm.Table) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put remembers v for the table tm names.
func (c *nameCache[V]) put(tm *replication.TableMapEvent, v V) {
	if c.m == nil || len(c.m) >= maxCachedNames {
		c.m = map[uint64]nameEntry[V]{}
	}
	c.m[tm.TableID] = nameEntry[V]{database: string(tm.Schema), table: string(tm.Table), v: v}
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
