package canal

import (
	"strconv"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// The caches are keyed by table id, but an id the server gave another
// table since (the first left its table cache) must not answer for it: the
// entry counts only under the names it was put with.
func TestNameCache_TableIDReusedForAnotherTable(t *testing.T) {
	var c nameCache[bool]
	a := &replication.TableMapEvent{TableID: 7, Schema: []byte("tenant_01"), Table: []byte("outbox")}
	c.put(a, true)
	if v, ok := c.get(&replication.TableMapEvent{TableID: 7, Schema: []byte("tenant_01"), Table: []byte("outbox")}); !ok || !v {
		t.Fatalf("get of the same table = %v, %v; want true, true", v, ok)
	}
	for _, other := range []*replication.TableMapEvent{
		{TableID: 7, Schema: []byte("tenant_01"), Table: []byte("audit")},
		{TableID: 7, Schema: []byte("tenant_02"), Table: []byte("outbox")},
		{TableID: 8, Schema: []byte("tenant_01"), Table: []byte("outbox")},
	} {
		if _, ok := c.get(other); ok {
			t.Errorf("id %d names %s.%s: answered from the entry of tenant_01.outbox", other.TableID, other.Schema, other.Table)
		}
	}
	c.put(&replication.TableMapEvent{TableID: 7, Schema: []byte("tenant_01"), Table: []byte("audit")}, false)
	if _, ok := c.get(a); ok {
		t.Error("tenant_01.outbox still answers after its id went to tenant_01.audit")
	}
	for i := range maxCachedNames + 1 {
		c.put(&replication.TableMapEvent{TableID: uint64(100 + i), Schema: []byte("d"), Table: []byte("t")}, true)
	}
	if len(c.m) > maxCachedNames {
		t.Errorf("%d entries, want at most %d", len(c.m), maxCachedNames)
	}
	// One id given to table after table adds their names, not entries.
	long := []byte(strings.Repeat("n", 64))
	for i := range 2 * maxCachedNameBytes / 128 {
		c.put(&replication.TableMapEvent{TableID: 1, Schema: long, Table: []byte(strconv.Itoa(i))}, true)
	}
	if len(c.names) > maxCachedNameBytes+128 {
		t.Errorf("%d bytes of names, want at most %d", len(c.names), maxCachedNameBytes+128)
	}
	if v, ok := c.get(&replication.TableMapEvent{TableID: 1, Schema: long, Table: []byte(strconv.Itoa(2*maxCachedNameBytes/128 - 1))}); !ok || !v {
		t.Errorf("the last table put = %v, %v; want true, true", v, ok)
	}
}
