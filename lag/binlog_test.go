package lag

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

func TestServer_Distance(t *testing.T) {
	srv := Server{File: "b.000003", Pos: 250, Files: []File{{"b.000001", 1000}, {"b.000002", 500}, {"b.000003", 300}}}
	tests := []struct {
		name   string
		file   string
		pos    uint32
		want   int64
		wantOK bool
	}{
		{"caught up", "b.000003", 250, 0, true},
		{"same file", "b.000003", 100, 150, true},
		{"two files back", "b.000001", 900, 100 + 500 + 250, true},
		{"purged", "b.000000", 4, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := srv.Behind(tt.file, tt.pos)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Behind(%s:%d) = %d, %v; want %d, %v", tt.file, tt.pos, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRetention_Headroom(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name   string
		r      Retention
		want   float64
		wantOK bool
	}{
		{"current", Retention{State: RetentionCurrent}, math.Inf(1), true},
		{"no expiry", Retention{State: RetentionNoExpiry}, math.Inf(1), true},
		{"expires", Retention{State: RetentionExpires, LastWrite: now.Add(-time.Hour), Expire: 3 * time.Hour}, 7200, true},
		{"expired", Retention{State: RetentionExpires, LastWrite: now.Add(-4 * time.Hour), Expire: 3 * time.Hour}, 0, true},
		{"purged", Retention{State: RetentionPurged}, 0, true},
		{"unknown", Retention{Reason: "x"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.r.Headroom(now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Headroom = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestBinlog_Measure follows one position through a private server's binlog:
// caught up, behind by a transaction, in a file the server rotated away
// from (headroom from the next file's start and the expiry), with the
// expiry off, and purged.
func TestBinlog_Measure(t *testing.T) {
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{Args: []string{"--binlog-expire-logs-seconds=3600"}})
	ctx := context.Background()
	db := m.Open(t, "")
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	b := &Binlog{DB: db, Server: srv, Dumper: Dumper{Addr: m.Addr(), User: m.User(), Password: m.Password(), Flavor: position.FlavorMariaDB}}
	file, pos, err := srv.BinlogPosition(ctx, db)
	if err != nil {
		t.Fatal(err)
	}

	s, err := b.Measure(ctx, file, pos)
	if err != nil {
		t.Fatal(err)
	}
	if secs, ok := s.SecondsBehind(time.Now()); !s.BehindKnown || s.BytesBehind != 0 || !ok || secs != 0 || s.Retention.State != RetentionCurrent {
		t.Errorf("caught up: %+v, seconds behind %v %v; want 0 bytes, 0 seconds, the current file", s, secs, ok)
	}

	before := time.Now().Add(-time.Second)
	m.Exec(t, "CREATE DATABASE lagtest", "CREATE TABLE lagtest.t (id INT PRIMARY KEY)", "INSERT INTO lagtest.t VALUES (1)")
	s, err = b.Measure(ctx, file, pos)
	if err != nil {
		t.Fatal(err)
	}
	if s.BytesBehind <= 0 || s.OldestErr != nil || s.Oldest.Before(before.Truncate(time.Second)) || s.Oldest.After(time.Now()) {
		t.Errorf("behind: %d bytes, oldest %v (%v); want bytes and a transaction started after %v", s.BytesBehind, s.Oldest, s.OldestErr, before)
	}
	if secs, ok := s.SecondsBehind(time.Now().Add(time.Minute)); !ok || secs < 59 || secs > 62 {
		t.Errorf("seconds behind a minute later = %v, %v; want about 60", secs, ok)
	}

	rotated := time.Now()
	m.Exec(t, "FLUSH BINARY LOGS")
	s, err = b.Measure(ctx, file, pos)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Retention
	headroom, ok := r.Headroom(time.Now())
	if r.State != RetentionExpires || !ok || headroom > 3601 || headroom < 3590 || r.LastWrite.Before(rotated.Add(-2*time.Second)) {
		t.Errorf("rotated: retention %+v, headroom %v; want about 3600s after the rotation at %v", r, headroom, rotated)
	}
	t.Logf("status text: %s", r.String(time.Now()))

	// Where a reader stands after the rotation: only the server's own
	// events follow, bytes but nothing to relay.
	idle, err := b.Measure(ctx, s.Server.File, 4)
	if secs, ok := idle.SecondsBehind(time.Now()); err != nil || idle.BytesBehind == 0 || idle.Pending() || !ok || secs != 0 {
		t.Errorf("after the rotation: %+v, %v; want bytes behind, nothing pending, 0 seconds", idle, err)
	}

	m.Exec(t, "SET GLOBAL binlog_expire_logs_seconds = 0")
	if s, err = b.Measure(ctx, file, pos); err != nil || s.Retention.State != RetentionNoExpiry {
		t.Errorf("expiry off: %+v, %v; want no expiry", s.Retention, err)
	}

	// MariaDB keeps a file until InnoDB's checkpoint passed its
	// transactions, whatever PURGE says: purge until it is gone.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cur, _, err := srv.BinlogPosition(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		m.Exec(t, "PURGE BINARY LOGS TO '"+cur+"'")
		if srv, err := ReadServer(ctx, db, srv); err != nil || srv.index(file) < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server keeps %s after PURGE BINARY LOGS for a minute", file)
		}
		time.Sleep(200 * time.Millisecond)
		m.Exec(t, "FLUSH BINARY LOGS")
	}
	s, err = b.Measure(ctx, file, pos)
	if err != nil || s.BehindKnown || s.Retention.State != RetentionPurged {
		t.Errorf("purged: %+v, %v; want the file purged, bytes behind unknown", s, err)
	}
	if h, ok := s.Retention.Headroom(time.Now()); !ok || h != 0 {
		t.Errorf("purged: headroom %v, %v; want 0", h, ok)
	}
}
