package mode

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/preflight"
)

// report returns a preflight report in which the named modes fail.
func report(failing ...preflight.Mode) preflight.Report {
	var rep preflight.Report
	for _, m := range failing {
		rep.Results = append(rep.Results, preflight.Result{
			Name: "req-" + string(m), Status: preflight.Fail, Detail: "missing", Fix: "fix " + string(m),
			Modes: []preflight.Mode{m},
		})
	}
	return rep
}

func TestChoose(t *testing.T) {
	binlogDown := report(preflight.ModeBinlog)
	pollDown := report(preflight.ModePoll)
	bothDown := report(preflight.ModeBinlog, preflight.ModePoll)
	tests := []struct {
		name              string
		rep               preflight.Report
		requested, stored string
		prepared          string
		want              string
		wantErr           error
	}{
		{"auto, first start, binlog usable", report(), Auto, "", "", Binlog, nil},
		{"auto, first start, binlog unusable falls back to poll", binlogDown, Auto, "", "", Poll, nil},
		{"auto, first start, neither", bothDown, Auto, "", "", "", preflight.ErrRequirements},
		{"auto sticks to binlog", pollDown, Auto, Binlog, "", Binlog, nil},
		{"auto sticks to binlog, poll prepared", report(), Auto, Binlog, Poll, Binlog, nil},
		{"auto never falls back once binlog ran", binlogDown, Auto, Binlog, "", "", preflight.ErrRequirements},
		{"auto sticks to poll even when binlog is usable", report(), Auto, Poll, "", Poll, nil},
		{"auto sticks to poll, poll unusable", pollDown, Auto, Poll, "", "", preflight.ErrRequirements},
		{"explicit binlog over a stored poll, unprepared", report(), Binlog, Poll, "", "", outbox.ErrConfig},
		{"explicit poll over a stored binlog, unprepared", report(), Poll, Binlog, "", "", outbox.ErrConfig},
		{"explicit binlog over a stored poll, prepared", report(), Binlog, Poll, Binlog, Binlog, nil},
		{"explicit poll over a stored binlog, prepared", report(), Poll, Binlog, Poll, Poll, nil},
		{"explicit poll, the switch prepared for the other mode", report(), Poll, Binlog, Binlog, "", outbox.ErrConfig},
		{"explicit binlog, stored binlog, poll prepared", report(), Binlog, Binlog, Poll, Binlog, nil},
		{"explicit binlog, unusable", binlogDown, Binlog, "", "", "", preflight.ErrRequirements},
		{"explicit poll, unusable", pollDown, Poll, "", "", "", preflight.ErrRequirements},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Choose(slog.New(slog.DiscardHandler), tt.rep, tt.requested, tt.stored, tt.prepared, "binlog-outbox:mode:app.outbox")
			if (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Choose() error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, tt.wantErr) || outbox.HintOf(err) == "" {
					t.Errorf("Choose() error = %v, want %v with a hint", err, tt.wantErr)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Choose() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"auto": Auto, "BINLOG": Binlog, "Poll": Poll} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Parse("tail"); !errors.Is(err, outbox.ErrConfig) {
		t.Errorf("Parse(tail) error = %v, want a configuration error", err)
	}
}

// memStore is a Store in memory.
type memStore struct {
	mode, prepared string
	saves          int
	err            error
}

func (s *memStore) Load(context.Context) (string, error) { return s.mode, s.err }
func (s *memStore) Save(_ context.Context, m string) error {
	s.mode, s.prepared = m, ""
	s.saves++
	return nil
}
func (s *memStore) Prepared(context.Context) (string, error) { return s.prepared, s.err }
func (s *memStore) Prepare(_ context.Context, m string) error {
	s.prepared = m
	return nil
}
func (s *memStore) Key() string { return "k" }

func TestResolve(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	s := &memStore{}
	// A first start chooses and records; later starts keep it, even when
	// the choice would now be another one.
	if got, err := Resolve(ctx, log, report(preflight.ModeBinlog), Auto, s); err != nil || got != Poll || s.mode != Poll || s.saves != 1 {
		t.Fatalf("first Resolve() = %q, %v (stored %q, %d saves); want poll, stored once", got, err, s.mode, s.saves)
	}
	if got, err := Resolve(ctx, log, report(), Auto, s); err != nil || got != Poll || s.saves != 1 {
		t.Fatalf("second Resolve() = %q, %v (%d saves); want poll without another save", got, err, s.saves)
	}
	if _, err := Resolve(ctx, log, report(), Binlog, s); !errors.Is(err, outbox.ErrConfig) || s.mode != Poll {
		t.Fatalf("explicit Resolve() unprepared = %v (stored %q); want a refusal, poll kept", err, s.mode)
	}
	if ok, err := PrepareSwitch(ctx, s, Binlog); !ok || err != nil || s.prepared != Binlog {
		t.Fatalf("PrepareSwitch() = %v, %v (prepared %q); want binlog prepared", ok, err, s.prepared)
	}
	if got, err := Resolve(ctx, log, report(), Binlog, s); err != nil || got != Binlog || s.mode != Binlog || s.prepared != "" {
		t.Fatalf("explicit Resolve() prepared = %q, %v (stored %q, prepared %q); want binlog, stored, the preparation used up", got, err, s.mode, s.prepared)
	}
	if ok, err := PrepareSwitch(ctx, s, Binlog); ok || err != nil || s.prepared != "" {
		t.Fatalf("PrepareSwitch() of the mode the table runs in = %v, %v (prepared %q); want nothing recorded", ok, err, s.prepared)
	}
	s.err = errors.New("redis down")
	if _, err := Resolve(ctx, log, report(), Auto, s); err == nil {
		t.Fatal("Resolve() with an unreadable store succeeded")
	}
}

func TestResolveSeveral(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	stores := func(modes ...string) []Store {
		out := make([]Store, len(modes))
		for i, m := range modes {
			// "binlog>poll": ran in binlog mode, the switch to poll prepared.
			from, to, _ := strings.Cut(m, ">")
			out[i] = &memStore{mode: from, prepared: to}
		}
		return out
	}
	binlogDown := report(preflight.ModeBinlog)
	tests := []struct {
		name      string
		rep       preflight.Report
		requested string
		stored    []string
		want      string // "" for an error
	}{
		{"auto, first start", report(), Auto, []string{"", ""}, Binlog},
		{"auto, first start, binlog unusable: poll for all", binlogDown, Auto, []string{"", ""}, Poll},
		{"auto, first start, neither mode", report(preflight.ModeBinlog, preflight.ModePoll), Auto, []string{"", ""}, ""},
		{"auto, one table ran in binlog mode", report(), Auto, []string{Binlog, ""}, Binlog},
		{"auto keeps to poll mode, a new table joins", report(), Auto, []string{"", Poll}, Poll},
		{"auto never falls back once a table ran in binlog mode", binlogDown, Auto, []string{Binlog, ""}, ""},
		{"auto refuses tables of both modes", report(), Auto, []string{Binlog, Poll}, ""},
		{"binlog over a table polled before, unprepared", report(), Binlog, []string{"", Poll}, ""},
		{"poll over a table relayed in binlog mode, unprepared", report(), Poll, []string{Binlog, ""}, ""},
		{"binlog over a table polled before, prepared", report(), Binlog, []string{"", Poll + ">" + Binlog}, Binlog},
		{"poll over tables relayed in binlog mode, one unprepared", report(), Poll, []string{Binlog + ">" + Poll, Binlog}, ""},
		{"poll, first start", binlogDown, Poll, []string{"", ""}, Poll},
		{"poll, unusable", report(preflight.ModePoll), Poll, []string{"", ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ss := stores(tt.stored...)
			got, err := ResolveSeveral(ctx, log, tt.rep, tt.requested, ss)
			if (err != nil) != (tt.want == "") || got != tt.want {
				t.Fatalf("ResolveSeveral() = %q, %v; want %q", got, err, tt.want)
			}
			for i, s := range ss {
				m := s.(*memStore)
				switch {
				case err == nil && m.mode != got:
					t.Errorf("store %d holds %q after %q, want %q", i, m.mode, got, got)
				case err != nil && m.saves > 0:
					t.Errorf("store %d saved %q although ResolveSeveral failed", i, m.mode)
				}
			}
			if err != nil && outbox.HintOf(err) == "" {
				t.Errorf("error %v has no hint", err)
			}
		})
	}
}

func TestResolveAdded(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name              string
		requested, stored string
		wantErr           bool
	}{
		{"a new table", Auto, "", false},
		{"a table polled before", Auto, Poll, false},
		{"auto refuses a table relayed in binlog mode", Auto, Binlog, true},
		{"--mode poll refuses it unprepared", Poll, Binlog, true},
		{"--mode poll switches it prepared", Poll, Binlog + ">" + Poll, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to, _ := strings.Cut(tt.stored, ">")
			s := &memStore{mode: from, prepared: to}
			err := ResolveAdded(ctx, log, tt.requested, Poll, s)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ResolveAdded() = %v, want error %v", err, tt.wantErr)
			}
			switch {
			case err != nil && (s.saves > 0 || !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == ""):
				t.Errorf("ResolveAdded() = %v after %d saves; want a configuration error with a hint, nothing saved", err, s.saves)
			case err == nil && s.mode != Poll:
				t.Errorf("stored %q, want poll", s.mode)
			}
		})
	}
}
