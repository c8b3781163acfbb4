package canal

// nameCache remembers something per table as the binlog spells its name,
// so that the table map of every transaction does not decide it again: the
// lookup converts no names to strings (Go compiles m[string(b)] without
// one), and the decision itself (matching --table patterns) costs more
// than the lookup. A server with more tables than maxCachedNames starts it
// over. It is not safe for concurrent use: each goroutine has its own.
type nameCache[V any] struct {
	m map[string]map[string]V
	n int
}

// maxCachedNames bounds a nameCache.
const maxCachedNames = 4096

// get returns the value put for database.table.
func (c *nameCache[V]) get(database, table []byte) (V, bool) {
	v, ok := c.m[string(database)][string(table)]
	return v, ok
}

// put remembers v for database.table.
func (c *nameCache[V]) put(database, table []byte, v V) {
	if c.m == nil || c.n >= maxCachedNames {
		c.m, c.n = map[string]map[string]V{}, 0
	}
	t := c.m[string(database)]
	if t == nil {
		t = map[string]V{}
		c.m[string(database)] = t
	}
	t[string(table)] = v
	c.n++
}
