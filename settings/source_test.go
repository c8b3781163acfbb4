package settings

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
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
		{"the default", outboxCfg, FormatFlags{Name: entry.FormatFlat, Unmapped: entry.UnmappedDeadLetter}, entry.FormatFlat, ""},
		{"the source's format", doctrine, FormatFlags{Name: entry.FormatFlat, Unmapped: entry.UnmappedDeadLetter}, entry.FormatDoctrine, ""},
		{"another --format beside the source", doctrine, FormatFlags{Name: entry.FormatFlat, NameGiven: true, Unmapped: entry.UnmappedDeadLetter}, "",
			"invalid configuration: --format flat does not go with --source symfony-doctrine"},
		{"a bad --messenger-class", outboxCfg, FormatFlags{Name: entry.FormatFlat, Classes: []string{"no-equals-sign"}, Unmapped: entry.UnmappedDeadLetter}, "", "--messenger-class"},
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

// TestConfig_LaravelJobs: --source laravel-jobs reads jobs through the
// preset's mapping, takes --format laravel-queue (its default) or
// laravel-stream and no other, and names Laravel's queue keys with the
// application's Redis prefix, which it refuses to guess.
func TestConfig_LaravelJobs(t *testing.T) {
	cfg := resolveSource(t, SourceLaravelJobs)
	if cfg.Table != LaravelJobsTable || cfg.Mapping["occurred_at"] != "available_at" || cfg.Mapping["aggregate_type"] != "queue" || cfg.Mapping.Has("message_id") {
		t.Errorf("table %q, mapping %v", cfg.Table, cfg.Mapping)
	}
	for _, tc := range []struct {
		f    FormatFlags
		want string
	}{
		{FormatFlags{Name: entry.FormatFlat}, entry.FormatLaravelQueue},
		{FormatFlags{Name: entry.FormatLaravelStream, NameGiven: true}, entry.FormatLaravelStream},
		{FormatFlags{Name: entry.FormatLaravelQueue, NameGiven: true}, entry.FormatLaravelQueue},
		{FormatFlags{Name: entry.FormatFlat, NameGiven: true}, ""},
		{FormatFlags{Name: entry.FormatDoctrine, NameGiven: true}, ""},
	} {
		got, err := cfg.EntryFormat(tc.f)
		if tc.want == "" {
			if !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), "laravel-queue or laravel-stream") {
				t.Errorf("--format %s: %v (hint %q), want a refusal naming the two", tc.f.Name, err, outbox.HintOf(err))
			}
			continue
		}
		if err != nil || got.Name != tc.want {
			t.Errorf("--format %s (given %v): %q, %v; want %q", tc.f.Name, tc.f.NameGiven, got.Name, err, tc.want)
		}
	}
	if _, err := cfg.SourceStream(entry.FormatLaravelQueue); !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), "--laravel-redis-prefix") {
		t.Errorf("laravel-queue without a prefix: %v, want a refusal", err)
	}
	if s, err := cfg.SourceStream(entry.FormatLaravelStream); err != nil || s != "outbox:jobs:{aggregate_type}" {
		t.Errorf("laravel-stream: %q, %v", s, err)
	}
	if err := cfg.OwnTable(); !errors.Is(err, outbox.ErrConfig) || !strings.Contains(outbox.HintOf(err), "queue:table") {
		t.Errorf("OwnTable: %v", err)
	}

	given, err := Resolve(Input{CommandLine: map[string][]string{"source": {SourceLaravelJobs}, "laravel-redis-prefix": {""}}, Command: "run", NoMySQL: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := given.SourceStream(entry.FormatLaravelQueue); err != nil || s != "queues:{aggregate_type}" {
		t.Errorf("--laravel-redis-prefix '': %q, %v; want queues:{aggregate_type}", s, err)
	}
}

// TestLaravelEnv_RedisPrefix derives the prefix as config/database.php does:
// REDIS_PREFIX as set (empty too), else Str::slug(APP_NAME, '_') and
// _database_.
func TestLaravelEnv_RedisPrefix(t *testing.T) {
	for _, tc := range []struct {
		env, want string
		ok        bool
	}{
		{"", "laravel_database_", true},
		{"APP_NAME=Laravel", "laravel_database_", true},
		{`APP_NAME="My Shop-2 @ Home!"`, "my_shop_2_at_home_database_", true},
		{"APP_NAME=My.App__x", "myapp_x_database_", true},
		{"APP_NAME=shop\nREDIS_PREFIX=app:", "app:", true},
		{"APP_NAME=shop\nREDIS_PREFIX=", "", true},
		{"APP_NAME=Café", "", false},
	} {
		env := &laravelEnv{path: ".env", vars: map[string]string{}}
		for _, line := range strings.Split(tc.env, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env.vars[k] = v
			}
		}
		got, err := env.redisPrefix()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %q, %v; want %q (ok %v)", tc.env, got, err, tc.want, tc.ok)
		}
	}
}
