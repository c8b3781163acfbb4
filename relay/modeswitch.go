package relay

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// PrepareSwitch records, for each table of cfg that ran in the other mode,
// that the preparing step of the documented switch to target was made
// (mode.PrepareSwitch): run --mode target then switches it, and refuses
// any switch not prepared so.
func PrepareSwitch(ctx context.Context, w io.Writer, client redis.UniversalClient, db *sql.DB, cfg settings.Config, target string) error {
	names := []schema.Name{{Database: cfg.Database, Table: cfg.Table}}
	if cfg.Several {
		matches, err := schema.ListMatching(ctx, db, schema.PatternsOf(cfg.Sources))
		if err != nil {
			return fmt.Errorf("list the tables of --table to record the switch to %s mode: %w", target, err)
		}
		names = names[:0]
		for _, m := range matches {
			names = append(names, m.Name)
		}
	}
	for _, n := range names {
		store := redisstream.NewModeStore(client, redisstream.KeysFor(n.Database, n.Table, "").Mode)
		prepared, err := mode.PrepareSwitch(ctx, store, target)
		if err != nil {
			return err
		}
		if prepared {
			fmt.Fprintf(w, "%s.%s: the switch to %s mode is prepared (%s:prepared); `run --mode %s` makes it\n", n.Database, n.Table, target, store.Key(), target)
		}
	}
	return nil
}

// CheckModeSwitch is run's refusal of a mode switch not prepared
// (mode.Switch): nil when requested may run on each of tables.
func CheckModeSwitch(ctx context.Context, client redis.UniversalClient, tables []schema.Name, requested string) error {
	for _, n := range tables {
		store := redisstream.NewModeStore(client, redisstream.KeysFor(n.Database, n.Table, "").Mode)
		stored, err := store.Load(ctx)
		if err != nil {
			return err
		}
		prepared := ""
		if stored != "" {
			if prepared, err = store.Prepared(ctx); err != nil {
				return err
			}
		}
		if err := mode.Switch(stored, prepared, requested, store.Key()); err != nil {
			return err
		}
	}
	return nil
}

// NameModeSwitch is check's line of the mode the tables ran in.
const NameModeSwitch = "mode switch"

// Check is the report of `check --mode requested`: the preflight of o, and
// a line for the mode switch run would refuse (CheckModeSwitch), so that
// check refuses first what run refuses at start.
func Check(ctx context.Context, o Options, requested string) preflight.Report {
	rep := runPreflight(ctx, o, &o.Format, PollOnSent(o, requested))
	if r, ok := modeSwitchResult(ctx, o.Config, rep, requested); ok {
		rep.Results = append(rep.Results, r)
	}
	return rep
}

// modeSwitchResult is check's line for run's refusal of a mode switch not
// prepared (mode.Switch), with --mode binlog or poll; ok false when there
// is nothing to say (auto mode, Redis or the table not reachable: their own
// lines say so).
func modeSwitchResult(ctx context.Context, cfg settings.Config, rep preflight.Report, requested string) (preflight.Result, bool) {
	if requested == mode.Auto || redisFailed(rep) {
		return preflight.Result{}, false
	}
	var names []schema.Name
	if cfg.Several {
		for _, t := range rep.Tables {
			names = append(names, t.Name)
		}
	} else {
		if err := ResolveTableName(ctx, &cfg); err != nil {
			return preflight.Result{}, false
		}
		names = []schema.Name{{Database: cfg.Database, Table: cfg.Table}}
	}
	client := cfg.RedisClient()
	defer client.Close()
	res := preflight.Result{Name: NameModeSwitch, Status: preflight.Pass, Modes: []preflight.Mode{preflight.Mode(requested)},
		Detail: "no table ran in the other mode, or its switch to " + requested + " mode was prepared"}
	if err := CheckModeSwitch(ctx, client, names, requested); err != nil {
		res.Status, res.Detail, res.Fix = preflight.Fail, err.Error(), outbox.HintOf(err)
	}
	return res, true
}

// redisFailed says the report's Redis line failed: the mode key cannot be
// read, and that line says why.
func redisFailed(rep preflight.Report) bool {
	for _, r := range rep.Results {
		if (r.Name == preflight.NameRedis || r.Name == preflight.NameRedisSentinel) && r.Status == preflight.Fail {
			return true
		}
	}
	return false
}
