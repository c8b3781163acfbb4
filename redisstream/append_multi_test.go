package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// beforeExec runs fn before each pipeline that ends a transaction (round 2
// of the MULTI path), with how many came before: the moment between the
// checks and EXEC, where another client's write must abort the transaction.
type beforeExec struct {
	n  atomic.Int32
	fn func(ctx context.Context, n int)
}

func (h *beforeExec) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeExec) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforeExec) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[len(cmds)-1].Name() == "exec" {
			h.fn(ctx, int(h.n.Add(1))-1)
		}
		return next(ctx, cmds)
	}
}

// rawEntries returns each entry's field/value list of a stream in order,
// without the ids, which differ between runs.
func rawEntries(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	res, err := c.Do(context.Background(), "XRANGE", key, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	var out []string
	for _, e := range res {
		out = append(out, fmt.Sprintf("%q", e.([]any)[1]))
	}
	return out
}

// TestSink_MultiWritesWhatTheScriptWrites appends the same batches with the
// script and with MULTI/EXEC, into two databases: the streams, their groups
// and the position must be the same, field by field and in order.
func TestSink_MultiWritesWhatTheScriptWrites(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	batches := func() [][]outbox.Event {
		b := [][]outbox.Event{
			{event(1, "order", "o-1"), event(2, "invoice", "i-1"), event(3, "order", "o-1"), event(4, "payment", "p-1")},
			{event(5, "order", "o-2"), event(6, "invoice", "i-1")},
		}
		b[0][1].Headers = nil
		b[0][2].Fields = []outbox.Field{{Name: "schema_version", Value: "3"}, {Name: "tenant", Value: ""}}
		b[1][1].Invalid = "payload is not JSON"
		return b
	}
	var dbs []*redis.Client
	for _, multiMin := range []int{-1, 1} {
		s, c := newSink(t, r.NewDB(t), Config{Groups: []string{"g1", "g2"}, MultiMin: multiMin})
		// A stream that exists without the groups gets them before its
		// next entry.
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:payment", Values: []string{entry.FieldMessageID, "before"}}).Err(); err != nil {
			t.Fatal(err)
		}
		var prev []byte
		for i, b := range batches() {
			next := []byte(fmt.Sprintf("p%d", i+1))
			if err := s.Append(ctx, b, prev, next); err != nil {
				t.Fatalf("MultiMin %d: append batch %d: %v", multiMin, i+1, err)
			}
			prev = next
		}
		dbs = append(dbs, c)
	}
	script, multi := dbs[0], dbs[1]
	for _, key := range []string{"outbox:order", "outbox:invoice", "outbox:payment", DefaultDeadLetterStream} {
		got, want := rawEntries(t, multi, key), rawEntries(t, script, key)
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
			t.Errorf("%s written by MULTI:\n%s\nby the script:\n%s", key, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if key == DefaultDeadLetterStream {
			continue
		}
		if got, want := fmt.Sprint(groupNames(t, multi, key)), fmt.Sprint(groupNames(t, script, key)); got != want || want != "[g1 g2]" {
			t.Errorf("%s groups by MULTI %s, by the script %s, want [g1 g2]", key, got, want)
		}
	}
	if got, want := multi.Get(ctx, "binlog-outbox:test:position").Val(), script.Get(ctx, "binlog-outbox:test:position").Val(); got != want || want != "p2" {
		t.Errorf("position by MULTI %q, by the script %q, want p2", got, want)
	}
}

// TestSink_MultiExecAborted: a watched key written between the checks and
// EXEC aborts the transaction; the retry sees the write and appends the
// batch exactly once, or refuses it.
func TestSink_MultiExecAborted(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	batch := func() []outbox.Event { return []outbox.Event{event(1, "order", "o-1"), event(2, "invoice", "i-1")} }

	t.Run("position written by another relay", func(t *testing.T) {
		url := r.NewDB(t)
		s, c := newSink(t, url, Config{MultiMin: 1})
		other := r.Client(t, url)
		c.AddHook(&beforeExec{fn: func(ctx context.Context, n int) {
			if n == 0 {
				other.Set(ctx, "binlog-outbox:test:position", "theirs", 0)
			}
		}})
		err := s.Append(ctx, batch(), nil, []byte("mine"))
		var mm *outbox.PositionMismatchError
		if !errors.As(err, &mm) || string(mm.Stored) != "theirs" {
			t.Fatalf("append: %v, want PositionMismatchError{theirs}", err)
		}
		if n := c.Exists(ctx, "outbox:order", "outbox:invoice").Val(); n != 0 {
			t.Errorf("the aborted transaction created %d streams, want none", n)
		}
	})

	t.Run("lease taken by another relay", func(t *testing.T) {
		url := r.NewDB(t)
		_, c := newSink(t, url, Config{MultiMin: 1})
		a := newLease(t, c, "host-a/1", 5*time.Second)
		s, sc := newSink(t, url, Config{Lease: a, MultiMin: 1})
		if held, _, err := a.TryAcquire(ctx); !held || err != nil {
			t.Fatalf("TryAcquire = %v, %v", held, err)
		}
		sc.AddHook(&beforeExec{fn: func(ctx context.Context, n int) {
			if n == 0 {
				c.Set(ctx, testLeaseKey, `{"holder":"host-b/2","token":"t"}`, 5*time.Second)
			}
		}})
		err := s.Append(ctx, batch(), nil, []byte("p1"))
		if !errors.Is(err, outbox.ErrLeaseLost) || !strings.Contains(err.Error(), "host-b/2") {
			t.Fatalf("append: %v, want ErrLeaseLost naming host-b/2", err)
		}
		if a.Value() != "" {
			t.Errorf("a.Value() = %q after the lease was lost, want none", a.Value())
		}
		if n := c.Exists(ctx, "outbox:order", "outbox:invoice", "binlog-outbox:test:position").Val(); n != 0 {
			t.Errorf("the aborted transaction wrote %d keys, want none", n)
		}
	})

	t.Run("lease renewed", func(t *testing.T) {
		// The holder's renewal PEXPIREs the watched lease key, which would
		// abort EXEC and send the batch again: it waits for EXEC instead.
		url := r.NewDB(t)
		_, c := newSink(t, url, Config{MultiMin: 1})
		a := newLease(t, c, "host-a/1", 5*time.Second)
		s, sc := newSink(t, url, Config{Lease: a, MultiMin: 1})
		if held, _, err := a.TryAcquire(ctx); !held || err != nil {
			t.Fatalf("TryAcquire = %v, %v", held, err)
		}
		renewed := make(chan error, 1)
		h := &beforeExec{fn: func(ctx context.Context, n int) {
			if n == 0 {
				go func() {
					held, err := a.Renew(ctx)
					if !held && err == nil {
						err = errors.New("lease lost")
					}
					renewed <- err
				}()
				time.Sleep(50 * time.Millisecond) // time enough to land before EXEC, were it not waiting
			}
		}}
		sc.AddHook(h)
		if err := s.Append(ctx, batch(), nil, []byte("p1")); err != nil {
			t.Fatalf("append with a renewal in its midst: %v", err)
		}
		if err := <-renewed; err != nil {
			t.Errorf("the renewal that waited for EXEC: %v", err)
		}
		if n := h.n.Load(); n != 1 {
			t.Errorf("%d EXECs, want 1 (the renewal waits for it)", n)
		}
		if n := c.XLen(ctx, "outbox:order").Val() + c.XLen(ctx, "outbox:invoice").Val(); n != 2 {
			t.Errorf("%d entries, want 2 (each once)", n)
		}
		if pos := c.Get(ctx, "binlog-outbox:test:position").Val(); pos != "p1" {
			t.Errorf("position %q, want p1", pos)
		}
	})

	t.Run("a stream written without end", func(t *testing.T) {
		url := r.NewDB(t)
		s, c := newSink(t, url, Config{MultiMin: 1})
		other := r.Client(t, url)
		c.AddHook(&beforeExec{fn: func(ctx context.Context, _ int) {
			other.XAdd(ctx, &redis.XAddArgs{Stream: "outbox:order", Values: []string{"k", "v"}})
		}})
		err := s.Append(ctx, batch(), nil, []byte("p1"))
		if err == nil || !strings.Contains(err.Error(), "aborted 5 times") || !strings.Contains(err.Error(), "outbox:order") || outbox.HintOf(err) == "" {
			t.Fatalf("append: %v, want an error naming the keys, with a hint", err)
		}
		if n := c.XLen(ctx, "outbox:order").Val(); n != maxExecAborts {
			t.Errorf("outbox:order has %d entries, want only the other client's %d", n, maxExecAborts)
		}
		if c.Exists(ctx, "outbox:invoice", "binlog-outbox:test:position").Val() != 0 {
			t.Errorf("the aborted transactions wrote something")
		}
	})
}

// TestSink_MultiLostExecReply: the connection breaks around EXEC. Whether
// Redis ran the transaction (its reply lost) or not (cut before it), the
// stored position tells, and the batch ends up appended exactly once.
func TestSink_MultiLostExecReply(t *testing.T) {
	r := testsvc.SharedRedis(t)
	ctx := context.Background()
	p := testsvc.StartProxy(t, r.Addr())
	url := r.NewDB(t)
	s, c := newSink(t, strings.Replace(url, r.Addr(), p.Addr(), 1), Config{MultiMin: 1})
	admin := r.Client(t, url)
	var fault func()
	c.AddHook(&beforeExec{fn: func(context.Context, int) {
		if fault != nil {
			fault()
			fault = nil
		}
	}})

	fault = p.DropNextReply
	if err := s.Append(ctx, []outbox.Event{event(1, "order", "o-1"), event(2, "order", "o-2")}, nil, []byte("p1")); err != nil {
		t.Fatalf("append whose EXEC reply was lost: %v, want it found applied", err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", p.Dropped())
	}

	fault = p.Cut
	batch := []outbox.Event{event(3, "order", "o-1")}
	err := s.Append(ctx, batch, []byte("p1"), []byte("p2"))
	if err == nil || outbox.HintOf(err) == "" {
		t.Fatalf("append cut before EXEC: %v, want an error with a hint", err)
	}
	if pos := admin.Get(ctx, "binlog-outbox:test:position").Val(); pos != "p1" {
		t.Fatalf("position %q after the cut, want p1 (not applied)", pos)
	}
	if err := s.Append(ctx, batch, []byte("p1"), []byte("p2")); err != nil {
		t.Fatalf("append again after the cut: %v", err)
	}
	var ids []string
	for _, e := range admin.XRange(ctx, "outbox:order", "-", "+").Val() {
		ids = append(ids, e.Values[entry.FieldOutboxID].(string))
	}
	if fmt.Sprint(ids) != "[1 2 3]" {
		t.Errorf("outbox:order holds outbox ids %v, want [1 2 3], each once", ids)
	}
	if pos := admin.Get(ctx, "binlog-outbox:test:position").Val(); pos != "p2" {
		t.Errorf("position %q, want p2", pos)
	}
}

// TestSink_MultiRefusedCommandWritesNothing: a user whose ACL lacks a
// command of the MULTI path gets one final error naming the command and its
// key, with the rules as the hint, and nothing is written: Redis refuses a
// command while queueing it and discards the whole transaction, and a
// refused MULTI is seen before anything is sent that writes.
func TestSink_MultiRefusedCommandWritesNothing(t *testing.T) {
	r := testsvc.StartRedis(t, testsvc.RedisOptions{})
	admin := r.Client(t, r.URL(0))
	ctx := context.Background()
	tests := []struct {
		drop string
		want []string
	}{
		{"+xadd", []string{"XADD outbox:order", "'xadd'"}},
		{"+set", []string{"SET binlog-outbox:test:position", "'set'"}},
		{"+xgroup|create", []string{"XGROUP CREATE outbox:order", "'xgroup|create'"}},
		{"+multi", []string{"MULTI", "'multi'"}},
		{"+exec", []string{"EXEC", "'exec'"}},
		{"+watch", []string{"WATCH", "'watch'"}},
		// Redis names the refused key in words that changed with Redis 8.
		{"~outbox:*", []string{"outbox:order", "lacks a permission: NOPERM"}},
	}
	t.Run("with the relay's rules", func(t *testing.T) {
		r.SetUser(t, "relay", "pw", redisconn.ACLRules)
		url := "redis://relay:pw@" + r.Addr() + "/0"
		_, c := newSink(t, url, Config{})
		l := newLease(t, c, "host-a/1", 5*time.Second)
		if held, _, err := l.TryAcquire(ctx); !held || err != nil {
			t.Fatalf("TryAcquire = %v, %v", held, err)
		}
		s, _ := newSink(t, url, Config{Groups: []string{"g"}, Lease: l, MultiMin: 1})
		// The second batch finds the stream and its group: TYPE and XINFO
		// GROUPS of an existing stream, then only XADD.
		for i, pos := range []string{"p1", "p2"} {
			prev := []byte(nil)
			if i > 0 {
				prev = []byte("p1")
			}
			if err := s.Append(ctx, []outbox.Event{event(uint64(i+1), "order", "o-1")}, prev, []byte(pos)); err != nil {
				t.Fatalf("append %s: %v", pos, err)
			}
		}
		if n := admin.XLen(ctx, "outbox:order").Val(); n != 2 || fmt.Sprint(groupNames(t, admin, "outbox:order")) != "[g]" {
			t.Errorf("outbox:order has %d entries and groups %v, want 2 and [g]", n, groupNames(t, admin, "outbox:order"))
		}
	})
	t.Run("without +discard", func(t *testing.T) {
		// A refused batch must not leave its connection inside MULTI for
		// the next command of the client.
		r.SetUser(t, "nodiscard", "pw", redisconn.ACLRules, "+discard")
		admin.FlushDB(ctx)
		admin.Set(ctx, "binlog-outbox:test:position", "theirs", 0)
		s, _ := newSink(t, "redis://nodiscard:pw@"+r.Addr()+"/0", Config{MultiMin: 1})
		var mm *outbox.PositionMismatchError
		for range 3 {
			if err := s.Append(ctx, []outbox.Event{event(1, "order", "o-1")}, nil, []byte("p1")); !errors.As(err, &mm) || string(mm.Stored) != "theirs" {
				t.Fatalf("append: %v, want PositionMismatchError{theirs}", err)
			}
			if pos, err := s.Position(ctx); err != nil || string(pos) != "theirs" {
				t.Fatalf("position read after the refused batch: %q, %v, want theirs", pos, err)
			}
		}
		if n := admin.Exists(ctx, "outbox:order").Val(); n != 0 {
			t.Errorf("the refused batch created outbox:order")
		}
	})
	for i, tt := range tests {
		t.Run("without "+tt.drop, func(t *testing.T) {
			user := "u" + string(rune('a'+i))
			r.SetUser(t, user, "pw", redisconn.ACLRules, tt.drop)
			admin.FlushDB(ctx)
			if tt.drop == "~outbox:*" {
				// TYPE is refused first otherwise.
				r.SetUser(t, user, "pw", redisconn.ACLRules+" %R~outbox:*", tt.drop)
			}
			s, _ := newSink(t, "redis://"+user+":pw@"+r.Addr()+"/0", Config{Groups: []string{"g"}, MultiMin: 1})
			err := s.Append(ctx, []outbox.Event{event(1, "order", "o-1")}, nil, []byte("p1"))
			if !errors.Is(err, redisconn.ErrPermission) || !errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("error %v, want a final redisconn.ErrPermission", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if hint := outbox.HintOf(err); !strings.Contains(hint, redisconn.ACLRules) {
				t.Errorf("hint %q, want the rules", hint)
			}
			if keys := admin.Keys(ctx, "*").Val(); len(keys) != 0 {
				t.Errorf("the refused transaction wrote %v, want nothing", keys)
			}
		})
	}
}

// TestSink_checkExec: EXEC that ran some commands and refused others (the
// ACL changed between queueing and EXEC) is a final error that says whether
// the position was stored.
func TestSink_checkExec(t *testing.T) {
	ctx := context.Background()
	cmds := []redis.Cmder{
		redis.NewCmd(ctx, "XADD", "outbox:order", "*", "k", "v"),
		redis.NewCmd(ctx, "XADD", "outbox:invoice", "*", "k", "v"),
		redis.NewStatusCmd(ctx, "set", "binlog-outbox:test:position", "p2"),
	}
	refused := replyError("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call")
	tests := []struct {
		name    string
		replies []any
		want    []string // in the error and hint; nil: no error
	}{
		{"all ran", []any{"1-0", "1-1", "OK"}, nil},
		{"an XADD refused", []any{"1-0", refused, "OK"}, []string{"1 of 3 commands refused (XADD outbox:invoice)", "was stored", `"p1"`}},
		{"the position refused", []any{"1-0", "1-1", refused}, []string{"SET binlog-outbox:test:position", "was not stored"}},
	}
	s := &multiAppend{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec := redis.NewCmd(ctx, "EXEC")
			exec.SetVal(tt.replies)
			err := s.checkExec(exec, cmds, 2, []byte("p1"))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("checkExec = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrPartialTransaction) || !errors.Is(err, outbox.ErrConfig) {
				t.Fatalf("checkExec = %v, want a final ErrPartialTransaction", err)
			}
			text := err.Error() + " " + outbox.HintOf(err)
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}
