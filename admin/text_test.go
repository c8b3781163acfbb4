package admin

import (
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
)

func TestNewVerifyRange(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		since       time.Duration
		sinceGiven  bool
		fromID      uint64
		fromIDGiven bool
		want        VerifyRange
		err         string
	}{
		{name: "all rows"},
		{name: "since", since: time.Hour, sinceGiven: true, want: VerifyRange{Since: now.Add(-time.Hour)}},
		{name: "from id", fromID: 7, fromIDGiven: true, want: VerifyRange{FromID: 7}},
		{name: "both", since: time.Hour, sinceGiven: true, fromID: 7, fromIDGiven: true, err: "give --since or --from-id, not both"},
		{name: "since zero", sinceGiven: true, err: "--since 0s: want a positive duration, e.g. 24h"},
		{name: "since negative", since: -time.Minute, sinceGiven: true, err: "--since -1m0s: want a positive duration, e.g. 24h"},
	} {
		got, err := NewVerifyRange(now, tc.since, tc.sinceGiven, tc.fromID, tc.fromIDGiven)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || !errors.Is(err, outbox.ErrConfig) {
				t.Errorf("%s: error %v, want the configuration error %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestBackfillLive(t *testing.T) {
	if _, err := BackfillLive(true, "outbox:{aggregate_type}", 1, true); !errors.Is(err, ErrBackfillCluster) || !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
		t.Errorf("on Redis Cluster: %v, want ErrBackfillCluster with a hint", err)
	}
	l, err := BackfillLive(false, "outbox:{aggregate_type}", 1, true)
	if err != nil || l.String() != "outbox:{aggregate_type}" {
		t.Errorf("live template: %v, %v; want outbox:{aggregate_type}", l, err)
	}
	if _, err := BackfillLive(false, "outbox:{nope}", 1, true); err == nil || !strings.HasPrefix(err.Error(), "--live-stream: ") {
		t.Errorf("bad template: %v, want an error naming --live-stream", err)
	}
}

func TestReport_TextAndErr(t *testing.T) {
	id := uint64(3)
	for _, tc := range []struct {
		name string
		text string
		want string
	}{
		{"verify clean", (&VerifyReport{Table: "app.outbox", Mode: mode.Poll, Range: "all rows", Rows: 2, Entries: 2, Streams: 1, Matched: 2}).Text(),
			"app.outbox (poll mode), all rows: 2 rows, 2 entries in 1 streams\n  matched:         2\n  pending:         0 (unsent rows)\n  missing:         0\n  duplicated:      0\n  foreign:         0\nclean\n"},
		{"replay", (&ReplayReport{Rows: []ReplayRow{{OutboxID: 3, MessageID: "m", Outcome: ReplayGone}}, Gone: 1}).Text(),
			"outbox_id 3 message_id m: already gone from the dead-letter stream (replayed or purged meanwhile), nothing appended\n0 delivered, 0 stay, 1 gone\n"},
		{"dead letters", (&DeadLettersReport{Stream: "outbox:dead-letter", Entries: []DeadLetterInfo{{ID: "1-0", OutboxID: &id, MessageID: "m", Stream: "outbox:order", StreamFromTemplate: true, AgeSeconds: 61.4, Reason: "why"}}}).Text(),
			"outbox:dead-letter: 1 dead letters\n1-0  outbox_id 3  message_id m  for outbox:order (by the current --stream)  age 1m1s\n  reason: why\n"},
		{"cleanup dry run", (&CleanupReport{Table: "app.outbox", Mode: mode.Binlog, Cutoff: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), DryRun: true, Candidates: 4}).Text(),
			"app.outbox (binlog mode), rows whose occurred_at is before 2026-11-01T00:00:00Z: 4 would be deleted (dry run)\n"},
	} {
		if tc.text != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, tc.text, tc.want)
		}
	}
	if err := (&VerifyReport{Missing: 1, Foreign: 2}).Err(); err == nil || err.Error() != "verify: 1 missing, 0 duplicated, 2 foreign" {
		t.Errorf("verify Err: %v", err)
	}
	if err := (&VerifyReport{}).Err(); err != nil {
		t.Errorf("clean verify Err: %v, want nil", err)
	}
	if err := (&ReplayReport{Stay: 2}).Err(); err == nil || err.Error() != "dead-letters replay: 2 rows stay in the dead-letter stream" {
		t.Errorf("replay Err: %v", err)
	}
	if err := (&ReplayReport{Delivered: 1, Gone: 1}).Err(); err != nil {
		t.Errorf("replay Err with none staying: %v, want nil", err)
	}
}
