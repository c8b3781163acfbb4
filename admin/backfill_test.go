package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/outboxsql"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

// backfillT0 is when the rows of backfillRows begin: row i occurred i
// minutes later.
var backfillT0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

var backfillAggs = []string{"order", "user", "invoice"}

// backfillRows inserts n rows over the aggregate types of backfillAggs,
// row i occurring i minutes after backfillT0, and returns each row's
// aggregate type by id.
func backfillRows(t *testing.T, env *relaytest.Env, n int) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	for i := 0; i < n; i++ {
		agg := backfillAggs[i%len(backfillAggs)]
		res, err := env.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at) VALUES (?, ?, ?, 'x.changed', ?, '{}', ?)",
			fmt.Sprintf("m-%d", i), agg, fmt.Sprintf("a-%d", i%7), fmt.Sprintf(`{"i":%d}`, i), backfillT0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		out[uint64(id)] = agg
	}
	return out
}

// backfillOptions backfills env's table to 'rebuild:{aggregate_type}'.
func backfillOptions(t *testing.T, env *relaytest.Env, tbl outboxsql.Table) BackfillOptions {
	t.Helper()
	sink, err := redisstream.New(env.RDB, redisstream.Config{Stream: "rebuild:{aggregate_type}"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := entry.ParseTemplate(entry.DefaultStream, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	return BackfillOptions{Redis: env.RDB, DB: env.DB, Sink: sink, Live: live, Table: tbl, Database: env.Database}
}

// backfilled reads the outbox ids of the entries of each rebuild stream,
// in stream order, checking each entry's fields against its row.
func backfilled(t *testing.T, env *relaytest.Env) map[string][]uint64 {
	t.Helper()
	out := map[string][]uint64{}
	for _, agg := range backfillAggs {
		stream := "rebuild:" + agg
		for _, m := range env.RDB.XRange(context.Background(), stream, "-", "+").Val() {
			id, _ := strconv.ParseUint(m.Values[entry.FieldOutboxID].(string), 10, 64)
			i := int(id) - 1
			want := map[string]string{entry.FieldAggregateType: agg, entry.FieldEventType: "x.changed", entry.FieldMessageID: fmt.Sprintf("m-%d", i),
				entry.FieldPayload: fmt.Sprintf(`{"i":%d}`, i), entry.FieldAggregateID: fmt.Sprintf("a-%d", i%7),
				entry.FieldOccurredAt: backfillT0.Add(time.Duration(i) * time.Minute).Format(entry.OccurredAtLayout)}
			for f, v := range want {
				if got := m.Values[f]; got != v {
					t.Errorf("%s entry of row %d: %s = %v, want %q", stream, id, f, got, v)
				}
			}
			out[stream] = append(out[stream], id)
		}
	}
	return out
}

// wantBackfilled is what the rebuild streams hold after a backfill of the
// rows with ids from..to.
func wantBackfilled(rows map[uint64]string, from, to uint64) map[string][]uint64 {
	out := map[string][]uint64{}
	ids := make([]uint64, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if id >= from && id <= to {
			out["rebuild:"+rows[id]] = append(out["rebuild:"+rows[id]], id)
		}
	}
	return out
}

func checkBackfilled(t *testing.T, env *relaytest.Env, want map[string][]uint64) {
	t.Helper()
	got := backfilled(t, env)
	for _, agg := range backfillAggs {
		s := "rebuild:" + agg
		if fmt.Sprint(got[s]) != fmt.Sprint(want[s]) {
			t.Errorf("%s holds rows %v, want %v (each once, in id order)", s, got[s], want[s])
		}
	}
}

// TestBackfill_WindowOnceInIDOrder: the rows of the window [--since,
// --until) are appended to the backfill's streams, each once, in id order
// per stream, encoded as run encodes them; a run after the end appends
// nothing; the live stream, the dead-letter stream and the position stay
// as they were, and the backfill writes no other key than its progress.
func TestBackfill_WindowOnceInIDOrder(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	rows := backfillRows(t, env, 60)
	live := "outbox:order"
	if err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: live, Values: []any{"f", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	pos := keys(env).Position
	env.RDB.Set(ctx, pos, "some-position", 0)
	o := backfillOptions(t, env, table(t, env))
	// Rows 10..49 (ids 11..50) occurred in the window.
	o.Since, o.Until = backfillT0.Add(10*time.Minute), backfillT0.Add(50*time.Minute)
	r, err := Backfill(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Appended != 40 || r.LastID != 50 || r.UpTo != 60 {
		t.Errorf("report %+v, want 40 appended, last id 50, up to 60", r)
	}
	checkBackfilled(t, env, wantBackfilled(rows, 11, 50))
	again, err := Backfill(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Appended != 0 || again.ProgressKey != r.ProgressKey {
		t.Errorf("a run after the end: %+v, want nothing appended under %s", again, r.ProgressKey)
	}
	checkBackfilled(t, env, wantBackfilled(rows, 11, 50))
	if n := env.RDB.XLen(ctx, live).Val(); n != 1 {
		t.Errorf("live stream %s has %d entries, want the 1 it had", live, n)
	}
	if got := env.RDB.Get(ctx, pos).Val(); got != "some-position" {
		t.Errorf("position %s = %q, want it untouched", pos, got)
	}
	all := env.RDB.Keys(ctx, "*").Val()
	sort.Strings(all)
	want := []string{r.ProgressKey, pos, live, "rebuild:invoice", "rebuild:order", "rebuild:user"}
	sort.Strings(want)
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Errorf("keys %v, want %v", all, want)
	}
}

// TestBackfill_InterruptedResumesOnce: a backfill cancelled after its
// first step, and one whose progress another run moved, resume from the
// stored progress: each row once.
func TestBackfill_InterruptedResumesOnce(t *testing.T) {
	env := newEnv(t)
	rows := backfillRows(t, env, 250)
	o := backfillOptions(t, env, table(t, env))
	ctx, cancel := context.WithCancel(context.Background())
	steps := 0
	o.Progress = func(BackfillReport) {
		if steps++; steps == 1 {
			cancel()
		}
	}
	r, err := Backfill(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled backfill: %v (report %+v), want context.Canceled", err, r)
	}
	if r.Appended != backfillBatch {
		t.Errorf("cancelled after its first step: %d appended, want %d", r.Appended, backfillBatch)
	}
	checkBackfilled(t, env, wantBackfilled(rows, 1, backfillBatch))
	// A batch read after id 100, then the progress moved by another run:
	// nothing is written.
	sink := o.Sink
	if err := sink.Backfill(context.Background(), r.ProgressKey, nil, 90, 95); !errors.Is(err, redisstream.ErrBackfillMoved) {
		t.Errorf("append after a stale progress: %v, want ErrBackfillMoved", err)
	}
	o.Progress = nil
	r, err = Backfill(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Appended != 150 || r.LastID != 250 {
		t.Errorf("resumed: %+v, want 150 appended up to 250", r)
	}
	checkBackfilled(t, env, wantBackfilled(rows, 1, 250))
}

// TestBackfill_RateBoundsAppends: at --rate 200, the third batch of 100
// waits until 200 entries have had their second: the run takes a second
// at least, and the pacer accounts for the wait.
func TestBackfill_RateBoundsAppends(t *testing.T) {
	env := newEnv(t)
	rows := backfillRows(t, env, 250)
	o := backfillOptions(t, env, table(t, env))
	o.Rate = 200
	start := time.Now()
	r, err := Backfill(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("250 entries at --rate 200 took %s, want at least 1s", el)
	}
	if r.Paced <= 0 || r.Appended != 250 {
		t.Errorf("report %+v, want 250 appended and a paced wait", r)
	}
	checkBackfilled(t, env, wantBackfilled(rows, 1, 250))
}

// TestPacer_Wait: by any instant t after the first batch, at most rate*t
// entries and one batch were let through.
func TestPacer_Wait(t *testing.T) {
	now := time.Unix(0, 0)
	p := newPacer(50)
	p.now = func() time.Time { return now }
	p.sleep = func(_ context.Context, d time.Duration) error { now = now.Add(d); return nil }
	sent := 0
	for i := 0; i < 20; i++ {
		batch := 1 + i%50
		if err := p.wait(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		sent += batch
		el := now.Sub(time.Unix(0, 0)).Seconds()
		if limit := 50*el + float64(batch); float64(sent) > limit+1e-9 {
			t.Fatalf("after %d batches: %d entries by %.3fs, want at most %.1f", i+1, sent, el, limit)
		}
		now = now.Add(time.Millisecond)
	}
	if p.waited <= 0 {
		t.Errorf("waited %s, want the pacer to account for its waits", p.waited)
	}
}

// TestCheckBackfillTarget: a backfill template that can render a name of
// the live template, the dead-letter stream or a relay key is refused.
func TestCheckBackfillTarget(t *testing.T) {
	for _, tc := range []struct {
		backfill, live string
		refused        bool
	}{
		{"rebuild:{aggregate_type}", "outbox:{aggregate_type}", false},
		{"outbox:{aggregate_type}", "outbox:{aggregate_type}", true},
		{"outbox:rebuild:{aggregate_type}", "outbox:{aggregate_type}", true},
		{"{aggregate_type}:rebuild", "outbox:{aggregate_type}", true},
		{"rebuild-{partition}", "rebuild-{aggregate_type}x", false},
		{"o{partition}", "o1{aggregate_type}", true},
		{"rebuild:{event_type}", "outbox:{aggregate_type}:{partition}", false},
		{"outbox:dead-letter", "outbox:{event_type}x", true},
		{"outbox:dead-{event_type}", "outbox:x{aggregate_type}", true},
		{"binlog-outbox:{table}", "outbox:{aggregate_type}", true},
	} {
		b, err := entry.ParseTemplate(tc.backfill, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		l, err := entry.ParseTemplate(tc.live, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckBackfillTarget(b, l, redisstream.DefaultDeadLetterStream)
		if got := errors.Is(err, ErrLiveStream); got != tc.refused {
			t.Errorf("backfill %q beside live %q: %v, want refused %v", tc.backfill, tc.live, err, tc.refused)
		}
	}
}
