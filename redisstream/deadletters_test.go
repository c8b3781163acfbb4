package redisstream

import (
	"context"
	"errors"
	"sync"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestSink_ReplayOnce: a dead letter carries the stream it was meant for;
// replaying it appends it to that stream (with the stream's groups) and
// deletes it in one step, once however many replays run, one after the
// other or at the same time; a row still invalid replaces its dead letter
// with one carrying the new reason.
func TestSink_ReplayOnce(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, c := newSink(t, r.NewDB(t), Config{Groups: []string{"billing"}})
	ctx := context.Background()
	bad := event(7, "order", "o-7")
	bad.Invalid = "payload is NULL"
	if err := s.Append(ctx, []outbox.Event{bad}, nil, []byte("p")); err != nil {
		t.Fatal(err)
	}
	dl := c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dl) != 1 {
		t.Fatalf("dead letters %v, want 1", dl)
	}
	d := dl[0]
	if v := d.Values; v[entry.FieldTargetStream] != "outbox:order" || v[entry.FieldOutboxID] != "7" || v[entry.FieldReason] != "payload is NULL" {
		t.Fatalf("dead letter %+v: want target_stream outbox:order, outbox id 7 and the reason", d)
	}

	still := event(7, "order", "o-7")
	still.Invalid = "payload is not valid JSON"
	outcome, requeued, err := s.Replay(ctx, &still, []string{d.ID})
	if err != nil || outcome != ReplayRequeued {
		t.Fatalf("Replay of a row still invalid = %v, %v; want ReplayRequeued", outcome, err)
	}
	dl = c.XRange(ctx, DefaultDeadLetterStream, "-", "+").Val()
	if len(dl) != 1 || dl[0].ID != requeued || dl[0].Values[entry.FieldReason] != "payload is not valid JSON" {
		t.Fatalf("dead letters %v: want the one entry %s with the new reason", dl, requeued)
	}

	var wg sync.WaitGroup
	outcomes := make([]ReplayOutcome, 8)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := event(7, "order", "o-7")
			o, _, err := s.Replay(ctx, &e, []string{requeued})
			if err != nil {
				t.Error(err)
			}
			outcomes[i] = o
		}()
	}
	wg.Wait()
	delivered := 0
	for _, o := range outcomes {
		if o == ReplayDelivered {
			delivered++
		}
	}
	if n := c.XLen(ctx, "outbox:order").Val(); n != 1 || delivered != 1 {
		t.Errorf("8 concurrent replays: outbox:order has %d entries, %d replays delivered; want 1 and 1", n, delivered)
	}
	if n := c.XLen(ctx, DefaultDeadLetterStream).Val(); n != 0 {
		t.Errorf("the dead-letter stream has %d entries after the replay, want 0", n)
	}
	if g := c.XInfoGroups(ctx, "outbox:order").Val(); len(g) != 1 || g[0].Name != "billing" {
		t.Errorf("groups of outbox:order = %v, want billing", g)
	}
	e := event(7, "order", "o-7")
	if o, _, err := s.Replay(ctx, &e, []string{requeued}); err != nil || o != ReplayGone || c.XLen(ctx, "outbox:order").Val() != 1 {
		t.Errorf("a replay after the replay = %v, %v; want ReplayGone and nothing appended", o, err)
	}
}

// TestSink_ReplayRefusesCrossSlot: on Redis Cluster a replay whose stream
// is in another slot than the dead-letter stream is refused before
// anything is sent.
func TestSink_ReplayRefusesCrossSlot(t *testing.T) {
	r := testsvc.SharedRedis(t)
	s, _ := newSink(t, r.NewDB(t), Config{Cluster: true, PositionKey: "pos"})
	e := event(1, "order", "o-1")
	_, _, err := s.Replay(context.Background(), &e, []string{"1-1"})
	if !errors.Is(err, ErrReplayCrossSlot) || !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
		t.Errorf("cross-slot replay: %v, want ErrReplayCrossSlot with a hint", err)
	}
	s, _ = newSink(t, r.NewDB(t), Config{Cluster: true, PositionKey: "pos", DeadLetterStream: "{outbox:order}:dead-letter"})
	if _, _, err := s.Replay(context.Background(), &e, []string{"1-1"}); err != nil {
		t.Errorf("replay within one slot: %v", err)
	}
}
