package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

func repairCommand() *cli.Command {
	flags := append(append(append(streamFlags(), positionKeyFlag(), onSentFlag(),
		&cli.BoolFlag{Name: "apply", Usage: "append the missing rows and, in binlog mode, store the position run resumes from (without it repair writes nothing)"},
		&cli.IntFlag{Name: "accept-foreign", Usage: "--apply despite exactly this many foreign entries (rows the table lacks) that a dry run listed"},
		&cli.StringFlag{
			Name:  "snapshot",
			Usage: "binlog mode, --apply: how the snapshot's position is found: auto, status (MariaDB, no lock) or lock (needs RELOAD)",
			Value: admin.SnapshotAuto,
		},
		&cli.StringFlag{
			Name:  "mode",
			Usage: "binlog or poll, only for a Redis that lost its data (no mode, position or relay record)",
		},
		&cli.BoolFlag{
			Name:  "json",
			Usage: "print the result as JSON",
		}), walkFlags()...), formatFlags()...)
	return &cli.Command{
		Name:  "repair",
		Usage: "find the committed rows no stream holds (a purged binlog, a failover gap) and, with --apply, append them once",
		Description: "Reads every row in one consistent snapshot and every entry of the streams the --stream template names\n" +
			"and of the dead-letter stream, as verify does, and counts the rows no entry holds. Without --apply it\n" +
			"writes nothing and exits 1 when rows are missing, 0 when none are. With --apply in binlog mode (the relay\n" +
			"stopped) it holds the position's lease and marks the position as its own (relays refuse to start on it,\n" +
			"and stop at their next append, until it ends), appends the missing rows in id order with run's format\n" +
			"flags, then stores as the position the binlog end as of the snapshot (--snapshot): run with the usual command\n" +
			"line then goes on, every row committed before, during or after the repair once; an interrupted --apply\n" +
			"leaves the mark, and the next --apply finishes from it. In poll mode it appends\n" +
			"the rows marked sent that no stream holds, beside running pollers. It refuses, writing nothing, while a\n" +
			"relay holds the lease or moves the position, when entries name rows the table lacks, and when a stream\n" +
			"was trimmed below the table's rows. See docs/incidents.md.",
		Flags:  flags,
		Action: runRepair,
	}
}

// errRepairMissing is a dry run's result when rows are missing: the
// command exits 1.
type errRepairMissing struct{ missing int }

func (e errRepairMissing) Error() string {
	return fmt.Sprintf("repair: %d committed rows no stream holds; repair --apply appends them", e.missing)
}

func runRepair(c *cli.Context) error {
	chunk, page, onSent := walkArgs(c)
	snapshot := strings.ToLower(c.String("snapshot"))
	repairMode := strings.ToLower(c.String("mode"))
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	apply := c.Bool("apply")
	db, res, err := openUsableTable(c.Context, &cfg, "repair")
	if err != nil {
		return err
	}
	defer db.Close()
	streams, client, err := openStreams(c, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	keys := redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key"))
	f, err := recordedEntries(c, cfg, client, "repair")
	if err != nil {
		return err
	}
	sc := relay.EntrySinkConfig(relay.Options{
		Config: cfg, Stream: f.Stream, Partitions: f.Partitions,
		DeadLetterStream: f.DeadLetterStream, Format: *f.Format, EnsureGroups: f.Groups,
	})
	sc.PositionKey = keys.Position
	r, err := admin.Repair(c.Context, admin.RepairOptions{
		DB: db, Table: outboxTable(cfg, res), Extra: cfg.Extra, Redis: client, Keys: keys, Streams: streams,
		SinkConfig: sc, Chunk: chunk, Page: page, Apply: apply, Snapshot: snapshot, AcceptForeign: c.Int("accept-foreign"), Mode: repairMode,
		DeleteRows: onSent == poller.OnSentDelete || !cfg.Mapping.Has(schema.ColSentAt),
	})
	if err != nil {
		return err
	}
	if err := printRepair(c.App.Writer, &r, c.Bool("json")); err != nil {
		return err
	}
	if !apply && r.Missing > 0 {
		return outbox.WithHint(errRepairMissing{r.Missing}, "with every relay of the position stopped, run repair --apply with run's flags, then start run again (docs/incidents.md)")
	}
	return nil
}

func printRepair(w io.Writer, r *admin.RepairReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s mode): %d rows, %d entries in %d streams\n", r.Table, r.Mode, r.Rows, r.Entries, r.Streams)
	fmt.Fprintf(&b, "  missing:    %d (committed rows no stream holds)\n", r.Missing)
	for _, e := range r.Examples {
		fmt.Fprintf(&b, "    row id=%d message_id=%s\n", e.OutboxID, e.MessageID)
	}
	if r.Duplicated > 0 {
		fmt.Fprintf(&b, "  duplicated: %d (see binlog-outbox verify)\n", r.Duplicated)
	}
	if r.Foreign > 0 {
		fmt.Fprintf(&b, "  foreign:    %d entries name rows the table lacks (never deleted; see docs/incidents.md)\n", r.Foreign)
	}
	for _, e := range r.Foreigns {
		fmt.Fprintf(&b, "    entry %s outbox_id=%d message_id=%s\n", strings.Join(e.Entries, " "), e.OutboxID, e.MessageID)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if r.Applied && r.Position == "" {
		fmt.Fprintf(&b, "appended %d entries\n", r.Appended)
	} else if r.Applied {
		fmt.Fprintf(&b, "appended %d entries; stored the position %s (snapshot: %s): start run as usual\n", r.Appended, r.Position, r.Snapshot)
	} else if r.Missing > 0 {
		b.WriteString("dry run: nothing written; repair --apply appends them\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
