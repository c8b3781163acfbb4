package schema

import (
	"errors"
	"maps"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParseMapping(t *testing.T) {
	tests := []struct {
		name    string
		flags   []string
		want    map[string]string // changes against DefaultMapping
		wantErr string            // substring of the error; "" for success
	}{
		{name: "none", flags: nil},
		{name: "rename", flags: []string{"payload=body", " event_type = type "}, want: map[string]string{ColPayload: "body", ColEventType: "type"}},
		{name: "absent with dash", flags: []string{"message_id=-"}, want: map[string]string{ColMessageID: ""}},
		{name: "absent with empty", flags: []string{"headers="}, want: map[string]string{ColHeaders: ""}},
		{name: "later flag wins", flags: []string{"payload=a", "payload=b"}, want: map[string]string{ColPayload: "b"}},
		{name: "swap", flags: []string{"payload=headers", "headers=payload"}, want: map[string]string{ColPayload: "headers", ColHeaders: "payload"}},
		{name: "unicode name", flags: []string{"payload=données"}, want: map[string]string{ColPayload: "données"}},
		{name: "no equals", flags: []string{"payload"}, wantErr: "is not logical=physical"},
		{name: "empty logical", flags: []string{"=body"}, wantErr: "is not logical=physical"},
		{name: "unknown logical", flags: []string{"body=payload"}, wantErr: `unknown logical column "body"`},
		{name: "required absent", flags: []string{"payload=-"}, wantErr: "column payload is required"},
		{name: "backtick", flags: []string{"payload=a`b"}, wantErr: "is not a valid column name"},
		{name: "control char", flags: []string{"payload=a\nb"}, wantErr: "is not a valid column name"},
		{name: "too long", flags: []string{"payload=" + strings.Repeat("x", 65)}, wantErr: "is not a valid column name"},
		{name: "outside BMP", flags: []string{"payload=a😀"}, wantErr: "is not a valid column name"},
		{name: "invalid utf8", flags: []string{"payload=a\xffb"}, wantErr: "is not a valid column name"},
		{name: "duplicate", flags: []string{"payload=data", "headers=DATA"}, wantErr: `both map to column "DATA"`},
		{name: "duplicate with default", flags: []string{"payload=event_type"}, wantErr: "event_type and payload both map"},
		{name: "routing columns shared", flags: []string{"aggregate_type=queue_name", "aggregate_id=queue_name", "event_type=Queue_Name"},
			want: map[string]string{ColAggregateType: "queue_name", ColAggregateID: "queue_name", ColEventType: "Queue_Name"}},
		{name: "routing and payload", flags: []string{"aggregate_id=q", "payload=q"}, wantErr: "aggregate_id and payload both map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMapping(tt.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMapping(%q) error = %v, want one containing %q", tt.flags, err, tt.wantErr)
				}
				if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
					t.Errorf("ParseMapping(%q) error = %v, want ErrConfig with a hint", tt.flags, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMapping(%q) error = %v, want nil", tt.flags, err)
			}
			want := DefaultMapping()
			maps.Copy(want, tt.want)
			if !maps.Equal(got, want) {
				t.Errorf("ParseMapping(%q) = %v, want %v", tt.flags, got, want)
			}
		})
	}
}

func TestMapping_String(t *testing.T) {
	tests := []struct {
		flags []string
		want  string
	}{
		{nil, ""},
		{[]string{"payload=body", "message_id=-", "event_type=type"}, "event_type=type,message_id=-,payload=body"},
		{[]string{"payload=payload"}, ""},
	}
	for _, tt := range tests {
		m, err := ParseMapping(tt.flags)
		if err != nil {
			t.Fatalf("ParseMapping(%q): %v", tt.flags, err)
		}
		if got := m.String(); got != tt.want {
			t.Errorf("ParseMapping(%q).String() = %q, want %q", tt.flags, got, tt.want)
		}
	}
}

func TestMapping_Validate(t *testing.T) {
	tests := []struct {
		name    string
		m       Mapping
		wantErr string
	}{
		{"default", DefaultMapping(), ""},
		{"sparse hand-built", Mapping{ColID: "id", ColAggregateID: "a", ColEventType: "e", ColPayload: "p", ColOccurredAt: "o"}, ""},
		{"missing required", Mapping{ColID: "id"}, "column aggregate_id is required"},
		{"unknown key", Mapping{"body": "x"}, `unknown logical column "body"`},
		{"bad name", Mapping{ColID: " id", ColAggregateID: "a", ColEventType: "e", ColPayload: "p", ColOccurredAt: "o"}, "not a valid column name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzParseMapping feeds newline-separated --column flags to ParseMapping:
// it must not panic, must fail only with ErrConfig and a hint, and a mapping
// it accepts must survive Flags and, without commas in names, String.
func FuzzParseMapping(f *testing.F) {
	for _, s := range []string{
		"", "payload=body", "message_id=-\nevent_type=type", "headers=", "=x", "payload",
		"payload=a,b", "payload=a=b", "payload= -", "payload=headers\nheaders=payload",
		"payload=Payload", "occurred_at=created_at\nmessage_id=-", "id=\u00a0x\u00a0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		flags := strings.Split(s, "\n")
		m, err := ParseMapping(flags)
		if err != nil {
			if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
				t.Fatalf("ParseMapping(%q) error = %v, want ErrConfig with a hint", flags, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseMapping(%q) = %v, which fails Validate: %v", flags, m, err)
		}
		for _, l := range LogicalColumns {
			if !Optional(l) && !m.Has(l) {
				t.Fatalf("ParseMapping(%q) lost required column %s: %v", flags, l, m)
			}
		}
		again, err := ParseMapping(m.Flags())
		if err != nil || !maps.Equal(again, m) {
			t.Fatalf("ParseMapping(%q).Flags() = %q parses to %v, %v; want %v", flags, m.Flags(), again, err, m)
		}
		if str := m.String(); str != "" && !strings.Contains(strings.Join(m.Flags(), ""), ",") {
			again, err := ParseMapping(strings.Split(str, ","))
			if err != nil || !maps.Equal(again, m) {
				t.Fatalf("ParseMapping(%q).String() = %q parses to %v, %v; want %v", flags, str, again, err, m)
			}
		}
	})
}
