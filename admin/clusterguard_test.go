package admin

import (
	"strings"
	"testing"
)

func TestReplication_Behind(t *testing.T) {
	const synced = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7004,state=online,offset=900,lag=0\r\nmaster_repl_offset:900\r\n"
	tests := []struct {
		name   string
		info   string
		target int64
		want   int
		ok     bool
	}{
		{"synced", synced, 900, 1, true},
		{"behind the target", synced, 901, 1, false},
		{"no replica expected", "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:5\r\n", 5, 0, true},
		{"replica missing", "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:5\r\n", 5, 1, false},
		{"replica syncing", "role:master\r\nslave0:ip=127.0.0.1,port=7004,state=wait_bgsave,offset=0,lag=0\r\nmaster_repl_offset:5\r\n", 0, 1, false},
		{"one of two synced", synced + "slave1:ip=127.0.0.1,port=7005,state=online,offset=10,lag=3\r\n", 900, 2, false},
	}
	for _, tt := range tests {
		r := parseReplication(tt.info)
		if got := r.behind(tt.target, tt.want); (got == "") != tt.ok {
			t.Errorf("%s: behind(%d, %d) = %q; want in sync %v", tt.name, tt.target, tt.want, got, tt.ok)
		}
	}
	if r := parseReplication(synced); r.role != "master" || r.offset != 900 || r.replicas["127.0.0.1:7004"] != 900 {
		t.Errorf("parseReplication = %+v; want role master, offset 900 and the replica at 900", r)
	}
}

func TestParseClusterNodes(t *testing.T) {
	const nodes = `07c3 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
292f 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383
e7d1 127.0.0.1:7004@17004 slave 07c3 0 1 1 connected
6ec2 127.0.0.1:7005@17005 slave 67ed 0 1 2 connected
824f 127.0.0.1:7006@17006 slave,fail 292f 0 1 3 disconnected
`
	desc, replicas, err := parseClusterNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if replicas["127.0.0.1:7001"] != 1 || replicas["127.0.0.1:7002"] != 1 || replicas["127.0.0.1:7003"] != 0 || len(replicas) != 3 {
		t.Errorf("replicas = %v; want 1, 1 and 0 (the failed replica does not count)", replicas)
	}
	// 7004 took over 0-5460 with a new epoch, then handed it back: the
	// same master, another epoch.
	back := strings.Replace(nodes, "myself,master - 0 0 1 connected", "myself,master - 0 0 7 connected", 1)
	if d, _, _ := parseClusterNodes(back); d == desc {
		t.Errorf("a failback reads as no change: %s", d)
	}
	if d, _, _ := parseClusterNodes(strings.Replace(nodes, "0 1 2 connected 5461", "0 2 2 connected 5461", 1)); d != desc {
		t.Errorf("a pong time reads as a change:\n%s\n%s", d, desc)
	}
}
