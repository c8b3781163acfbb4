package canal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// storedBinlog returns the position the reader's sink holds.
func storedBinlog(t *testing.T, r *Reader) position.Binlog {
	t.Helper()
	raw, err := r.sink.Position(context.Background())
	if err != nil || raw == nil {
		t.Fatalf("stored position: %q, %v", raw, err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReader_FirstStartStoresGTIDPosition: on MariaDB, whose transactions
// all have GTIDs, a first start with --start-from now or earliest stores a
// GTID position (the set of the transactions before the start, as
// BINLOG_GTID_POS gives it at the file position stored beside), so that a
// failover needs no manual step; the relay then delivers exactly once.
func TestReader_FirstStartStoresGTIDPosition(t *testing.T) {
	for _, tt := range []struct {
		name  string
		start position.Start
	}{
		{"now", position.Start{Kind: position.StartNow}},
		{"earliest", position.Start{Kind: position.StartEarliest}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
			ctx := context.Background()
			r, _, stop := startedReader(t, env, func(c *Config) { c.Start = tt.start })
			b := storedBinlog(t, r)
			if !b.GTIDMode() {
				t.Fatalf("--start-from %s stored %s, a file position; want a GTID position", tt.name, b)
			}
			var want string
			if err := env.DB.QueryRow("SELECT BINLOG_GTID_POS(?, ?)", b.File, b.Pos).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if b.GTIDSet != want {
				t.Errorf("--start-from %s stored gtid_set %q at %s:%d, where the server's GTID position is %q", tt.name, b.GTIDSet, b.File, b.Pos, want)
			}
			if tt.start.Kind == position.StartEarliest && b.Pos != 4 {
				t.Errorf("--start-from earliest stored %s, want the first file's start", b)
			}
			rec := relaytest.NewProduced()
			produceDelivered(ctx, t, env, rec, 20)
			stopChecked(ctx, t, env, rec, stop)
			if b := storedBinlog(t, r); b.GTIDSet == "" || !strings.Contains(b.GTIDSet, "-") {
				t.Errorf("after the events the stored position is %s, want a GTID set", b)
			}
		})
	}
}

// TestReader_StoredFilePositionConvertsToGTID: a file position stored by an
// earlier version (or --start-from <file>:<offset> before GTID positions
// were the default) converts at start, with a line saying so, into the GTID
// position at the same place; the relay stores it at once and continues
// exactly once from there.
func TestReader_StoredFilePositionConvertsToGTID(t *testing.T) {
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	ctx := context.Background()
	rec := relaytest.NewProduced()
	r1, sink, stop := startedReader(t, env, nil)
	produceDelivered(ctx, t, env, rec, 10)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b := storedBinlog(t, r1)
	gtidBefore := b.GTIDSet
	b.GTIDSet, b.EmptyGTIDSet, b.LastGTID = "", false, ""
	if err := sink.SetPosition(ctx, b.Encode()); err != nil {
		t.Fatal(err)
	}
	relaytest.Produce(ctx, t, env.DB, env.Table, relaytest.ProduceOptions{Producers: 2, Transactions: 10}, rec)

	logs := &relaytest.Logs{}
	r2, _ := newReaderLogging(t, env, nil, logs.Logger())
	stop2 := startReader(r2)
	relaytest.WaitDelivered(t, env, rec, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	stopChecked(ctx, t, env, rec, stop2)
	if !strings.Contains(logs.String(), "converted the stored file position to a GTID position") || !strings.Contains(logs.String(), gtidBefore) {
		t.Errorf("no line says the file position was converted (to %s):\n%s", gtidBefore, logs.String())
	}
	if got := storedBinlog(t, r2); !got.GTIDMode() {
		t.Errorf("stored position after the start is %s, want a GTID position", got)
	}
}
