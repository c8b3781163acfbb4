package admin

import (
	"context"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/position"
)

func TestPosition_ShowSetReset(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := context.Background()
	reader, sink := newReader(t, env)
	o := PositionOptions{Redis: env.RDB, Sink: sink}
	r, err := PositionShow(ctx, o)
	if err != nil || r.Raw != nil || r.Key != keys(env).Position {
		t.Fatalf("show without position: %+v, %v; want none at %s", r, err, keys(env).Position)
	}
	set, err := PositionSet(ctx, PositionSetOptions{PositionOptions: o, Reader: reader, Start: position.Start{Kind: position.StartEarliest}})
	if err != nil || set.Stored.Pos != 4 || set.Stored.File == "" || set.SlotsDeleted != -1 {
		t.Fatalf("set earliest: %+v, %v; want offset 4 of the first binlog", set, err)
	}
	raw := env.RDB.Get(ctx, keys(env).Position).Val()
	if b, err := position.Decode([]byte(raw)); err != nil || b.File != set.Stored.File || b.Pos != 4 {
		t.Fatalf("stored position %q (%v), want %s", raw, err, set.Stored)
	}
	r, err = PositionShow(ctx, o)
	if err != nil || string(r.Raw) != raw || r.Position.File != set.Stored.File || r.Position.Pos != 4 || r.Slots != nil {
		t.Fatalf("show: %+v, %v; want the position set", r, err)
	}
	reset, err := PositionReset(ctx, o)
	if err != nil || string(reset.Previous) != raw || env.RDB.Exists(ctx, keys(env).Position).Val() != 0 {
		t.Fatalf("reset: %+v, %v; want the position deleted", reset, err)
	}
	if reset, err = PositionReset(ctx, o); err != nil || reset.Previous != nil {
		t.Fatalf("reset without position: %+v, %v", reset, err)
	}
}
