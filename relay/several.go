package relay

import (
	"context"
	"database/sql"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/canal"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// runSeveral relays several tables (more than one --table, or a pattern) in
// one mode for all: binlog mode reads the binlog once, and one position,
// under --position-key, covers every table; poll mode polls each table
// (runPollSeveral).
func runSeveral(ctx context.Context, o Options, cfg settings.Config, rep preflight.Report, requested string, format entry.Format, db *sql.DB, client redis.UniversalClient) error {
	log := cfg.Logger
	stores := make([]mode.Store, len(rep.Tables))
	for i, t := range rep.Tables {
		stores[i] = redisstream.NewModeStore(client, redisstream.KeysFor(t.Database, t.Table, "").Mode)
	}
	relayMode, err := mode.ResolveSeveral(ctx, log, rep, requested, stores)
	if err != nil {
		return err
	}
	logWarnings(log, rep, relayMode)
	for _, t := range rep.Tables {
		if err := schema.ProblemsError(t.String(), t.Resolution.Problems); err != nil {
			return err
		}
		if len(t.Resolution.Absent) > 0 {
			log.Info("outbox table has no column for "+strings.Join(t.Resolution.Absent, ", "), "table", t.String(),
				"entries", schema.DescribeAbsent(t.Resolution.Absent))
		}
	}
	// The tables agree on the columns that shape every entry (the
	// preflight fails them otherwise): the first one's mapping says which
	// fields entries have. Without a table yet, the first --table's.
	if m := rep.Mapping(); m != nil {
		cfg.Mapping = m
	}
	names := make([]string, 0, 10)
	for i, t := range rep.Tables {
		if i == cap(names) {
			break
		}
		names = append(names, t.String())
	}
	if relayMode == mode.Poll {
		log.Info("relaying several outbox tables in poll mode, each with its own rounds", "table_values", cfg.TableString(), "tables", len(rep.Tables),
			"first", strings.Join(names, ","), "stream", StreamTemplate(cfg, o.Stream))
	} else {
		log.Info("relaying several outbox tables with one position", "table_values", cfg.TableString(), "tables", len(rep.Tables),
			"first", strings.Join(names, ","), "position_key", cfg.PositionKey(o.PositionKey), "stream", StreamTemplate(cfg, o.Stream))
	}
	return relayIn(ctx, o, cfg, client, relayMode, schema.FieldColumns(cfg.Mapping, cfg.Extra), format,
		func() error { return runPollSeveral(ctx, o, cfg, rep, requested, db, client) },
		func() error { return runBinlog(ctx, o, cfg, TableName{}, rep, db, client, nil, rep.Tables) })
}

// canalSources are the reader's sources: each --table value with its
// mapping, and the tables the preflight matched, with the mapping resolved
// against each.
func canalSources(cfg settings.Config, tables []preflight.TableMatch) []canal.Source {
	out := make([]canal.Source, len(cfg.Sources))
	for i, s := range cfg.Sources {
		out[i] = canal.Source{Pattern: s.Pattern, Mapping: s.Mapping}
	}
	for _, t := range tables {
		src := &out[t.Pattern]
		if src.Pattern.Exact() {
			// The server's name for it (schema.ListMatching resolved it).
			src.Pattern = schema.Pattern{Database: t.Database, Table: t.Table}
		}
		src.Tables = append(src.Tables, canal.Table{Name: t.Name, Mapping: t.Resolution.Mapping, Absent: t.Resolution.Absent})
	}
	return out
}
