package canal

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
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

// The sink on Redis Cluster tells the reader where batches end.
var _ Cuts = (*redisstream.Sink)(nil)

// pointsAt is a Cuts that names fixed points.
type pointsAt []position.Point

func (p pointsAt) CutPoints() []position.Point { return p }

func TestReader_SessionCuts(t *testing.T) {
	at := func(pos uint32) position.Point { return position.Point{File: "b.000001", Pos: pos} }
	tests := []struct {
		name string
		cuts Cuts
		want []position.Point
	}{
		{"no sink cuts", nil, nil},
		{"none ahead", pointsAt{}, nil},
		{"sorted, past start only", pointsAt{at(400), at(100), at(200), at(300)}, []position.Point{at(300), at(400)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reader{cfg: Config{Cuts: tt.cuts}, log: slog.New(slog.DiscardHandler)}
			got := r.sessionCuts(at(200))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("sessionCuts(200) = %v, want %v", got, tt.want)
			}
		})
	}
}
