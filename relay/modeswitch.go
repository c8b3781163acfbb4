package relay

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// PrepareSwitch records, for each table of cfg that ran in the other mode,
// that the preparing step of the documented switch to target was made
// (mode.PrepareSwitch): run --mode target then switches it, and refuses
// any switch not prepared so.
func PrepareSwitch(ctx context.Context, w io.Writer, client redis.UniversalClient, db *sql.DB, cfg Config, target string) error {
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
