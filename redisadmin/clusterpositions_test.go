package redisadmin

import (
	"fmt"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func TestClusterPositions_Summary(t *testing.T) {
	at := func(pos uint32) []byte {
		return position.Binlog{Flavor: position.FlavorMariaDB, ServerID: 1, File: "b.000001", Pos: pos}.Encode()
	}
	gtid := position.Binlog{Flavor: position.FlavorMariaDB, ServerID: 1, File: "b.000001", Pos: 9, GTIDSet: "0-1-5"}.Encode()
	for _, tt := range []struct {
		name                   string
		base                   []byte
		slots                  map[int][]byte
		count, lowest, highest int // -1: none
		ahead, foreign         []int
	}{
		{"none", at(100), nil, 0, -1, -1, nil, nil},
		{"behind and at", at(100), map[int][]byte{7: at(50), 3: at(100)}, 2, 7, 3, nil, nil},
		{"ahead", at(100), map[int][]byte{7: at(50), 9: at(150), 2: at(120)}, 3, 7, 9, []int{2, 9}, nil},
		{"foreign", at(100), map[int][]byte{1: []byte("junk"), 4: gtid, 5: at(90)}, 3, 5, 5, nil, []int{1, 4}},
		{"no position key", nil, map[int][]byte{8: at(10), 6: at(20)}, 2, 8, 6, []int{6, 8}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := ClusterPositions{Key: "k", Base: tt.base, Slots: tt.slots}.Summary()
			slot := func(p *SlotPosition) int {
				if p == nil {
					return -1
				}
				return p.Slot
			}
			if s.Count != tt.count || slot(s.Lowest) != tt.lowest || slot(s.Highest) != tt.highest ||
				fmt.Sprint(s.Ahead) != fmt.Sprint(tt.ahead) || fmt.Sprint(s.Foreign) != fmt.Sprint(tt.foreign) {
				t.Errorf("Summary() = count %d, lowest %d, highest %d, ahead %v, foreign %v; want %d, %d, %d, %v, %v",
					s.Count, slot(s.Lowest), slot(s.Highest), s.Ahead, s.Foreign, tt.count, tt.lowest, tt.highest, tt.ahead, tt.foreign)
			}
			if s.Lowest != nil && s.Lowest.Key != redisstream.SlotPositionKey("k", s.Lowest.Slot) {
				t.Errorf("lowest key %s, want %s", s.Lowest.Key, redisstream.SlotPositionKey("k", s.Lowest.Slot))
			}
		})
	}
}
