package canal

import (
	"testing"

	"github.com/binlog-outbox/binlog-outbox/position"
)

func TestMachine_AtCut(t *testing.T) {
	at := func(pos uint32) position.Point { return position.Point{File: "b.000001", Pos: pos} }
	m := &machine{pending: &batch{}, cuts: []position.Point{at(200), at(300)}}
	steps := []struct {
		pos     uint32
		cut     bool
		wantErr bool
	}{
		{100, false, false},
		{200, true, false},  // ends the batch, drops the cut
		{200, false, false}, // asked again at the same point: the next cut is later
		{250, false, false},
		{310, false, true}, // went past 300 without a boundary there
	}
	for _, s := range steps {
		m.pending.at = at(s.pos)
		cut, err := m.atCut()
		if cut != s.cut || (err != nil) != s.wantErr {
			t.Errorf("at %d: atCut() = %v, %v; want %v, error %v", s.pos, cut, err, s.cut, s.wantErr)
		}
	}
}
