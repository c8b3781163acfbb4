package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/relay"
)

func repairCommand() *cli.Command {
	flags := append(append(append(streamFlags(), positionKeyFlag(),
		&cli.BoolFlag{
			Name:  "apply",
			Usage: "append the missing rows and store the position run resumes from (without it repair writes nothing)",
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
			"writes nothing and exits 1 when rows are missing, 0 when none are. With --apply (binlog mode, the relay\n" +
			"stopped) it appends the missing rows in id order with run's format flags, then stores as the position\n" +
			"the binlog end as of the snapshot: run with the usual command line then goes on, every row committed\n" +
			"before, during or after the repair once. It refuses, writing nothing, while a relay holds the lease or\n" +
			"moves the position, when entries name rows the table lacks, and when a stream was trimmed below the\n" +
			"table's rows. --apply needs MariaDB (the exact binlog position of a snapshot) and is not on Redis Cluster.\n" +
			"See docs/incidents.md.",
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
	chunk, page, err := walkSizes(c)
	if err != nil {
		return err
	}
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	format, err := entryFormat(c, cfg)
	if err != nil {
		return err
	}
	apply := c.Bool("apply")
	if apply && cfg.RedisCluster != nil {
		return usageError{errors.New("repair --apply does not support Redis Cluster yet: its positions are per slot")}
	}
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
	sc := relay.EntrySinkConfig(relay.Options{
		Config: cfg, Stream: givenStream(c), Partitions: c.Int("partitions"),
		DeadLetterStream: c.String("dead-letter-stream"), Format: format,
	})
	sc.PositionKey = keys.Position
	sink, err := redisstream.New(client, sc)
	if err != nil {
		return err
	}
	r, err := admin.Repair(c.Context, admin.RepairOptions{
		DB: db, Table: outboxTable(cfg, res), Extra: cfg.Extra, Redis: client, Keys: keys, Streams: streams,
		Sink: sink, Chunk: chunk, Page: page, Apply: apply,
	})
	if err != nil {
		return err
	}
	if err := printRepair(c.App.Writer, &r, c.Bool("json")); err != nil {
		return err
	}
	if !apply && r.Missing > 0 {
		return errRepairMissing{r.Missing}
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
		fmt.Fprintf(&b, "  foreign:    %d entries name rows the table lacks\n", r.Foreign)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if r.Applied {
		fmt.Fprintf(&b, "appended %d entries; stored the position %s: start run as usual\n", r.Appended, r.Position)
	} else if r.Missing > 0 {
		b.WriteString("dry run: nothing written; repair --apply appends them\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
