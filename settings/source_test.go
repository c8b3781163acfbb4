package settings

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// resolveSource resolves the settings of a command that needs no MySQL
// with --source src.
func resolveSource(t *testing.T, src string) Config {
	t.Helper()
	cfg, err := Resolve(Input{CommandLine: map[string][]string{"source": {src}}, Command: "schema print", NoMySQL: true, OneTable: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfig_EntryFormat(t *testing.T) {
	outboxCfg, doctrine := resolveSource(t, SourceOutbox), resolveSource(t, SourceSymfonyDoctrine)
	for _, tc := range []struct {
		name string
		cfg  Config
		f    FormatFlags
		want string
		err  string
	}{
		{"the default", outboxCfg, FormatFlags{Name: redisstream.FormatFlat, Unmapped: redisstream.UnmappedDeadLetter}, redisstream.FormatFlat, ""},
		{"the source's format", doctrine, FormatFlags{Name: redisstream.FormatFlat, Unmapped: redisstream.UnmappedDeadLetter}, redisstream.FormatDoctrine, ""},
		{"another --format beside the source", doctrine, FormatFlags{Name: redisstream.FormatFlat, NameGiven: true, Unmapped: redisstream.UnmappedDeadLetter}, "",
			"invalid configuration: --format flat does not go with --source symfony-doctrine"},
		{"a bad --messenger-class", outboxCfg, FormatFlags{Name: redisstream.FormatFlat, Classes: []string{"no-equals-sign"}, Unmapped: redisstream.UnmappedDeadLetter}, "", "--messenger-class"},
	} {
		got, err := tc.cfg.EntryFormat(tc.f)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.Name != tc.want {
			t.Errorf("%s: format %q, %v; want %q", tc.name, got.Name, err, tc.want)
		}
	}
}

func TestConfig_OwnTable(t *testing.T) {
	if err := resolveSource(t, SourceOutbox).OwnTable(); err != nil {
		t.Errorf("--source outbox: %v, want nil", err)
	}
	err := resolveSource(t, SourceSymfonyDoctrine).OwnTable()
	if !errors.Is(err, outbox.ErrConfig) || outbox.HintOf(err) == "" {
		t.Errorf("--source symfony-doctrine: %v, want a configuration error with a hint", err)
	}
}

func TestKnowsCluster(t *testing.T) {
	for cmd, want := range map[string]bool{"run": true, "position show": true, "dead-letters purge": true, "backfill": false, "repair": true, "schema apply": false} {
		if got := KnowsCluster(cmd); got != want {
			t.Errorf("KnowsCluster(%q) = %v, want %v", cmd, got, want)
		}
	}
}
