package main

import (
	"context"
	"database/sql"
	"github.com/binlog-outbox/binlog-outbox/relay"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// NameModeSwitch is check's line of the mode the tables ran in.
const NameModeSwitch = "mode switch"

// modeSwitchResult is check's line for run's refusal of a mode switch not
// prepared (mode.Switch), with --mode binlog or poll; ok false when there
// is nothing to say (auto mode, Redis or the table not reachable: their own
// lines say so).
func modeSwitchResult(ctx context.Context, cfg config, rep preflight.Report, requested string) (preflight.Result, bool) {
	if requested == mode.Auto || redisFailed(rep) {
		return preflight.Result{}, false
	}
	var names []schema.Name
	if cfg.Several {
		for _, t := range rep.Tables {
			names = append(names, t.Name)
		}
	} else {
		db, err := sql.Open("mysql", cfg.DSN())
		if err != nil {
			return preflight.Result{}, false
		}
		err = relay.ResolveTable(ctx, &cfg, db)
		db.Close()
		if err != nil {
			return preflight.Result{}, false
		}
		names = []schema.Name{{Database: cfg.Database, Table: cfg.Table}}
	}
	client := cfg.RedisClient()
	defer client.Close()
	res := preflight.Result{Name: NameModeSwitch, Status: preflight.Pass, Modes: []preflight.Mode{preflight.Mode(requested)},
		Detail: "no table ran in the other mode, or its switch to " + requested + " mode was prepared"}
	if err := relay.CheckModeSwitch(ctx, client, names, requested); err != nil {
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
