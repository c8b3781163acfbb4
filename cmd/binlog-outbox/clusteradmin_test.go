package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestRedisCluster_StatusPositionVerifyMark runs the commands beside the
// relay against a real cluster, one after the other on the same streams:
// status (text and JSON) sees the position key, the slot positions and the
// streams of every master; verify is clean, then finds an entry deleted on
// one master; mark-appended refuses the stream that lost it, then marks the
// others; status and position show report a slot ahead and a foreign one;
// position set deletes every slot position and a restarted relay resumes
// from it, and one running is fenced by it; position reset deletes
// everything; with a master down, the streams are not listed.
func TestRedisCluster_StatusPositionVerifyMark(t *testing.T) {
	srv := testsvc.SharedMariaDB(t)
	if !srv.External() {
		// Servers of its own, so that it can run beside other tests: the
		// fenced relay must append the event it is given before its next
		// position store, which other tests' transactions in a shared
		// binlog would bring forward.
		t.Parallel()
		srv = testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	}
	rc := testsvc.StartRedisCluster(t)
	env := relaytest.NewClusterEnv(t, srv, rc)
	ctx := context.Background()
	key := posKey(env)
	began := time.Now()

	rec := relaytest.NewProduced()
	p := startRelay(t, env, clusterArgs...)
	waitStoredPosition(t, env, key)
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 20}, rec)
	relaytest.WaitDelivered(t, env, rec, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	stopRelay(t, p)
	t.Logf("relay ran %s", time.Since(began).Round(time.Millisecond))

	entries := relaytest.ReadAll(ctx, t, env.Cluster, "outbox:")
	if len(entries) != len(rec.Committed) {
		t.Fatalf("%d entries for %d committed events", len(entries), len(rec.Committed))
	}
	streams := map[string]int{}
	slots := map[int]bool{}
	masters := map[int]bool{}
	for _, e := range entries {
		streams[e.Stream]++
		slot := redisstream.Slot(e.Stream)
		if !slots[slot] {
			slots[slot] = true
			m, err := rc.MasterOf(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			masters[m] = true
		}
	}
	if len(masters) < 2 {
		t.Fatalf("the streams lie on %d masters, want them on several", len(masters))
	}
	grouped := entries[0].Stream
	if err := env.Cluster.XGroupCreate(ctx, grouped, "billing", "0").Err(); err != nil {
		t.Fatal(err)
	}
	base, err := env.Cluster.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := position.Decode(base)
	if err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL, "--redis-cluster"}
	streamArgs := []string{"--stream", "outbox:{aggregate_type}:{partition}", "--partitions", fmt.Sprint(clusterPartitions)}
	cmd := func(args ...string) []string {
		out := append([]string{}, global...)
		out = append(out, args...)
		if args[0] != "position" {
			out = append(out, streamArgs...)
		}
		return out
	}

	// status: the position key, the slots, every master's streams.
	out, errOut, code := run(t, cmd("status")...)
	t.Logf("status:\n%s", out)
	wants := []string{"mode:      binlog", "position:  " + fmt.Sprintf("%s:%d", stored.File, stored.Pos),
		fmt.Sprintf("slots:     %d hash slots hold a position (%s:{...}), ", len(slots), key),
		"lease:     none held", fmt.Sprintf("stream:    %s, %d entries\n  group:   billing, 0 consumers, pending 0, lag %d", grouped, streams[grouped], streams[grouped])}
	for s, n := range streams {
		wants = append(wants, fmt.Sprintf("stream:    %s, %d entries\n", s, n))
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	if code != 0 || strings.Contains(out, "ahead:") || strings.Contains(out, "warning") {
		t.Errorf("status: exit %d, want 0 with no slot ahead and no warning\n%s%s", code, out, errOut)
	}
	r := clusterStatusJSON(t, cmd("status", "--json"))
	if r.Position == nil || r.Position.File != stored.File || r.Position.Pos != stored.Pos || r.Slots == nil ||
		r.Slots.Count != len(slots) || r.Slots.Lowest == nil || r.Slots.Highest == nil || len(r.Slots.Ahead) != 0 || len(r.Slots.Foreign) != 0 {
		t.Errorf("status --json: position %+v, slots %+v; want %s and %d slots, none ahead or foreign", r.Position, r.Slots, stored, len(slots))
	}
	if len(r.Streams) != len(streams) {
		t.Errorf("status --json lists %d streams, want %d (on %d masters)", len(r.Streams), len(streams), len(masters))
	}
	for _, s := range r.Streams {
		if int64(streams[s.Key]) != s.Length {
			t.Errorf("status --json: stream %s has %d entries, want %d", s.Key, s.Length, streams[s.Key])
		}
	}
	// position show.
	out, errOut, code = run(t, cmd("position", "show")...)
	if code != 0 || !strings.Contains(out, key+": "+stored.String()) || !strings.Contains(out, fmt.Sprintf("slots:     %d hash slots hold a position", len(slots))) {
		t.Errorf("position show: exit %d, want the position key (%s) and %d slots\n%s%s", code, stored, len(slots), out, errOut)
	}

	// verify: clean, then one entry deleted on its master is missing.
	out, errOut, code = run(t, cmd("verify")...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d rows, %d entries in %d streams", len(rec.Committed), len(entries), len(streams))) ||
		!strings.Contains(out, "not yet relayed: 0") || !strings.Contains(out, "missing:         0") || !strings.Contains(out, "clean") || strings.Contains(out, "warning") {
		t.Fatalf("verify: exit %d, want clean over %d rows and %d streams\n%s%s", code, len(rec.Committed), len(streams), out, errOut)
	}
	lost := entries[len(entries)-1]
	if err := env.Cluster.XDel(ctx, lost.Stream, lost.ID).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, cmd("verify")...)
	if code != exitFailure || !strings.Contains(out, "missing:         1") || !strings.Contains(out, "duplicated:      0") ||
		!strings.Contains(out, "row id="+field(lost, "outbox_id")+" message_id="+field(lost, "message_id")+" has no entry") {
		t.Errorf("verify after XDEL on %s: exit %d, want 1 with row %s missing\n%s%s", lost.Stream, code, field(lost, "outbox_id"), out, errOut)
	}

	// mark-appended: the stream that lost an entry is refused, then the
	// rows of every other entry are marked.
	out, errOut, code = run(t, cmd("mark-appended")...)
	if code == 0 || !strings.Contains(errOut, "stream "+lost.Stream+" lost 1 of the") {
		t.Errorf("mark-appended: exit %d, want a refusal naming %s\n%s%s", code, lost.Stream, out, errOut)
	}
	out, errOut, code = run(t, cmd("mark-appended", "--allow-trimmed")...)
	want := fmt.Sprintf("%d streams, %d entries: %d rows marked sent; 0 were sent already", len(streams), len(entries)-1, len(entries)-1)
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("mark-appended --allow-trimmed: exit %d, want %q\n%s%s", code, want, out, errOut)
	}
	var unsent int
	if err := env.DB.QueryRow("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").Scan(&unsent); err != nil || unsent != 1 {
		t.Errorf("%d unsent rows (%v), want 1: the row of the deleted entry", unsent, err)
	}

	// A slot ahead of the position key and one that holds no position of
	// this relay, in slots no stream uses.
	var aheadSlot, foreignSlot int
	for s := 0; ; s++ {
		if !slots[s] && !slots[s+1] {
			aheadSlot, foreignSlot = s, s+1
			break
		}
	}
	later := stored
	later.TxRows++
	if err := env.Cluster.Set(ctx, redisstream.SlotPositionKey(key, aheadSlot), later.Encode(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.Set(ctx, redisstream.SlotPositionKey(key, foreignSlot), "not a position", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r = clusterStatusJSON(t, cmd("status", "--json"))
	if r.Slots == nil || r.Slots.Count != len(slots)+2 || fmt.Sprint(r.Slots.Ahead) != fmt.Sprint([]int{aheadSlot}) ||
		fmt.Sprint(r.Slots.Foreign) != fmt.Sprint([]int{foreignSlot}) || r.Slots.Highest == nil || r.Slots.Highest.Slot != aheadSlot ||
		len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], fmt.Sprintf("hash slots %d hold no position of this relay", foreignSlot)) {
		t.Errorf("status --json with slot %d ahead and %d foreign: slots %+v, warnings %q", aheadSlot, foreignSlot, r.Slots, r.Warnings)
	}
	out, errOut, code = run(t, cmd("position", "show")...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("  ahead:   slots %d are past the position key", aheadSlot)) ||
		!strings.Contains(out, fmt.Sprintf("  foreign: slots %d hold no position of this relay", foreignSlot)) {
		t.Errorf("position show: exit %d, want slot %d ahead and %d foreign\n%s%s", code, aheadSlot, foreignSlot, out, errOut)
	}

	// position set now, with events committed while the relay is stopped:
	// every slot position goes, the relay resumes from the new position
	// (skipping those events) and appends the later ones.
	skipped := relaytest.NewProduced()
	for i := range 3 {
		insertEvent(t, env.DB, skipped, "skipped", i)
	}
	out, errOut, code = run(t, cmd("position", "set", "--start-from", "now")...)
	want = fmt.Sprintf("deleted %d hash slot positions (%s:{...}) on every master", len(slots)+2, key)
	if code != 0 || !strings.Contains(out, "stored ") || !strings.Contains(out, want) {
		t.Fatalf("position set: exit %d, want %q\n%s%s", code, want, out, errOut)
	}
	cp, err := redisadmin.ReadClusterPositions(ctx, env.Cluster, key)
	if err != nil || cp.Base == nil || len(cp.Slots) != 0 {
		t.Fatalf("after position set: %d slot positions, position key %s (%v); want the key and no slot", len(cp.Slots), cp.Base, err)
	}
	p = startRelay(t, env, clusterArgs...)
	waitLog(t, p, "reading binlog")
	resumed := relaytest.NewProduced()
	for i := range 3 {
		insertEvent(t, env.DB, resumed, "resumed", i)
	}
	relaytest.WaitFor(t, 60*time.Second, "the events after position set", func() bool {
		return relaytest.CountEntries(ctx, env.Cluster, "outbox:") >= len(entries)-1+len(resumed.Committed)
	})
	time.Sleep(300 * time.Millisecond)
	stopRelay(t, p)
	if strings.Contains(p.Out.String(), "ahead of the stored position") {
		t.Errorf("the relay restarted after position set found slots ahead:\n%s", relaytest.TailLines(p.Out.String(), 20))
	}
	count := map[string]int{}
	for _, e := range relaytest.ReadAll(ctx, t, env.Cluster, "outbox:") {
		count[field(e, "message_id")]++
	}
	for id := range skipped.Committed {
		if count[id] != 0 {
			t.Errorf("event %s committed before position set now was appended %d times, want 0", id, count[id])
		}
	}
	for id := range resumed.Committed {
		if count[id] != 1 {
			t.Errorf("event %s committed after the restart was appended %d times, want 1", id, count[id])
		}
	}
	if len(count) != len(entries)-1+len(resumed.Committed) {
		t.Errorf("%d distinct events in the streams, want %d", len(count), len(entries)-1+len(resumed.Committed))
	}

	// position set refuses under a running relay, naming it. Another
	// writer of the position key (an earlier version's position set) fences
	// the relay: its next store of the position key, or its next script in
	// a slot it holds, is refused.
	p = startRelay(t, env, clusterArgs...)
	waitLog(t, p, "reading binlog")
	if out, errOut, code := run(t, cmd("position", "set", "--start-from", "now")...); code != exitUsage || !strings.Contains(errOut, "reads "+key) {
		t.Fatalf("position set under the relay: exit %d, want %d naming the relay\n%s%s", code, exitUsage, out, errOut)
	}
	raw, err := env.Cluster.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	other, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	other.Writer, other.Seq = "another writer", 1
	if err := env.Cluster.Set(ctx, key, other.Encode(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	// As position set does after the key.
	if _, err := redisstream.DeleteSlotPositions(ctx, env.Cluster, key); err != nil {
		t.Fatal(err)
	}
	fenceID := insertEvent(t, env.DB, relaytest.NewProduced(), "fence", 0)
	if code := p.Wait(t, 30*time.Second); code == 0 || !strings.Contains(p.Out.String(), "error: stored position was advanced by another relay") {
		t.Errorf("relay after position set under it: exit %d, want it fenced\n%s", code, relaytest.TailLines(p.Out.String(), 10))
	}
	// Fenced before any script of the batch (a slot beyond the intent,
	// which position set deleted, is added only while the position key is
	// the batch's start): the event lies after the position set, and the
	// next relay appends it once.
	appended := func() int {
		n := 0
		for _, e := range relaytest.ReadAll(ctx, t, env.Cluster, "outbox:") {
			if field(e, "message_id") == fenceID {
				n++
			}
		}
		return n
	}
	if n := appended(); n != 0 {
		t.Errorf("the fenced relay appended the event %d times, want 0", n)
	}
	p = startRelay(t, env, clusterArgs...)
	relaytest.WaitFor(t, 30*time.Second, "the event after position set", func() bool { return appended() > 0 })
	stopRelay(t, p)
	if n := appended(); n != 1 {
		t.Errorf("the event after position set appended %d times, want 1", n)
	}

	// position reset: the slot positions, then the key.
	n := len(slotsOfStreams(t, ctx, env, key))
	out, errOut, code = run(t, cmd("position", "reset")...)
	if code != 0 || n == 0 || !strings.Contains(out, fmt.Sprintf("deleted %d hash slot positions", n)) || !strings.Contains(out, "deleted the position at "+key+"; it was: ") {
		t.Errorf("position reset: exit %d, want %d slot positions and the key deleted\n%s%s", code, n, out, errOut)
	}
	out, errOut, code = run(t, cmd("status")...)
	if code != 0 || !strings.Contains(out, "position:  none stored at "+key) || !strings.Contains(out, "slots:     no hash slot holds a position") {
		t.Errorf("status after position reset: exit %d\n%s%s", code, out, errOut)
	}

	// A master down: the streams cannot all be listed, and mark-appended
	// (which lists them first) says so rather than mark part of them.
	m, err := rc.MasterOf(ctx, redisstream.Slot(grouped))
	if err != nil {
		t.Fatal(err)
	}
	rc.Nodes[m].Kill()
	// The relay's binary, at once: an in-process run could wait for appMu
	// until the cluster has failed over.
	out, errOut, code, _ = runUntil(t, 60*time.Second, cmd("mark-appended", "--allow-trimmed")...)
	// (Or the relays' records, read first, lie on that master.)
	if code == 0 || out != "" || !(strings.Contains(errOut, "SCAN for streams outbox:*:* on master "+rc.Addrs()[m]) && strings.Contains(errOut, "hint: the master is unreachable") ||
		strings.Contains(errOut, "CLUSTER SLOTS") || strings.Contains(errOut, "read the relays' records") && strings.Contains(errOut, "is unreachable")) {
		t.Errorf("mark-appended with master %s down: exit %d, want the listing refused\n%s%s", rc.Addrs()[m], code, out, errOut)
	}
	t.Logf("mark-appended with a master down: %s", strings.TrimSpace(errOut))
	t.Logf("test took %s", time.Since(began).Round(time.Millisecond))
}

// slotsOfStreams returns the slots that hold a position of key.
func slotsOfStreams(t *testing.T, ctx context.Context, env *relaytest.Env, key string) map[int][]byte {
	t.Helper()
	cp, err := redisadmin.ReadClusterPositions(ctx, env.Cluster, key)
	if err != nil {
		t.Fatal(err)
	}
	return cp.Slots
}

func clusterStatusJSON(t *testing.T, args []string) admin.StatusReport {
	t.Helper()
	out, errOut, code := run(t, args...)
	var r admin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	return r
}
