package lag

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// TestMonitor_Ready measures a position at the start of the server's
// binlog, far behind, and asks for readiness in each of the ways the relay
// can fail it.
func TestMonitor_Ready(t *testing.T) {
	m := testsvc.SharedMariaDB(t)
	ctx := context.Background()
	db := m.Open(t, "")
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	m.NewDatabase(t) // a transaction after the first file's start
	first, err := ReadServer(ctx, db, srv)
	if err != nil {
		t.Fatal(err)
	}
	up := func(context.Context) error { return nil }
	tests := []struct {
		name     string
		relay    Relay
		redis    func(context.Context) error
		maxStall time.Duration
		want     string
	}{
		{"ready", Relay{LastProgress: time.Now().Add(time.Hour)}, up, time.Hour, "ready"},
		{"redis down", Relay{}, func(context.Context) error { return errors.New("connection refused") }, time.Hour, "redis unreachable: connection refused"},
		{"retrying", Relay{Retrying: "append: OOM"}, up, time.Hour, "the relay is retrying after an error: append: OOM"},
		{"stuck", Relay{}, up, time.Nanosecond, "stuck: "},
		// Another relay holds the lease: this one waits, as it should,
		// and measures nothing of a position it does not advance.
		{"standby", Relay{Standby: true}, up, time.Nanosecond, "ready: standby"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.relay.File, tt.relay.Pos = first.Files[0].Name, 4
			mon, err := NewMonitor(MonitorConfig{
				MaxStall:  tt.maxStall,
				Relay:     func() Relay { return tt.relay },
				Binlog:    &Binlog{DB: db, Server: srv, Dumper: Dumper{Addr: m.Addr(), User: m.User(), Password: m.Password(), Flavor: position.FlavorMariaDB}},
				PingMySQL: db.PingContext,
				PingRedis: tt.redis,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := mon.Step(ctx); err != nil {
				t.Fatal(err)
			}
			if tt.relay.Standby {
				if s := mon.Latest(); !s.At.IsZero() {
					t.Errorf("a standby's sample %+v; want none, so that its metrics are absent", s)
				}
			} else if s := mon.Latest(); s.Binlog.BytesBehind == 0 || s.Binlog.Oldest.IsZero() {
				t.Fatalf("sample %+v; want bytes behind and the oldest transaction's time", s.Binlog)
			}
			time.Sleep(time.Millisecond)
			ok, why := mon.Ready(ctx)
			if ok != strings.HasPrefix(tt.want, "ready") || !strings.HasPrefix(why, tt.want) {
				t.Errorf("Ready = %v, %q; want %q", ok, why, tt.want)
			}
		})
	}
}
