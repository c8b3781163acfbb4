package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/poller"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func verifyCommand() *cli.Command {
	flags := append(streamFlags(), positionKeyFlag(), onSentFlag(),
		&cli.DurationFlag{Name: "since", Usage: "verify the rows whose occurred_at is within this duration, e.g. 24h (and the entries whose occurred_at is)"},
		&cli.Uint64Flag{Name: "from-id", Usage: "verify the rows with id >= N (and the entries whose outbox_id is)"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		&cli.DurationFlag{Name: "wait", Usage: "binlog mode: how long to wait for the relay's position to pass verify's snapshot", Value: admin.DefaultVerifyWait})
	flags = append(flags, walkFlags()...)
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the outbox rows in the table with the stream entries: missing, duplicated and foreign entries",
		Description: "Reads the rows in the range (--since or --from-id; all rows without either) in one consistent snapshot\n" +
			"and every entry of the streams the --stream template names and of the dead-letter stream, and matches\n" +
			"them by outbox_id and message_id. Missing: a committed row the relay should have appended has no entry.\n" +
			"Duplicated: a row has more than one entry. Foreign: an entry in the range names no row (e.g. a rolled-\n" +
			"back transaction's). Poll mode's unsent rows are pending; binlog mode's rows after the stored position\n" +
			"are not yet relayed. Exits 0 when clean, 1 when not. The entries are indexed in a temporary Redis\n" +
			"sorted set (about 100 bytes per entry, deleted at the end, expiring after an hour): see docs/verify.md.",
		Flags:  flags,
		Action: runVerify,
	}
}

func runVerify(c *cli.Context) error {
	ctx := c.Context
	rng, err := admin.NewVerifyRange(time.Now(), c.Duration("since"), c.IsSet("since"), c.Uint64("from-id"), c.IsSet("from-id"))
	if err != nil {
		return err
	}
	chunk, page, onSent := walkArgs(c)
	t, err := openTableCommand(ctx, c, "verify", true, true)
	if err != nil {
		return err
	}
	defer t.close()
	cfg := t.cfg
	r, err := admin.Verify(ctx, admin.VerifyOptions{
		DB: t.db, Table: t.table, Redis: t.redis, Streams: t.streams,
		Keys:  redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key")),
		Range: rng, Chunk: chunk, Page: page, Wait: c.Duration("wait"),
		DeleteRows: onSent == poller.OnSentDelete,
	})
	if err != nil {
		return err
	}
	if err := printResult(c.App.Writer, &r, c.Bool("json")); err != nil {
		return err
	}
	return r.Err()
}

// onSentOf reads --on-sent: mark or delete (its range is checked as the
// flag is read, relay.Ranges).
func onSentOf(c *cli.Context) string { return strings.ToLower(c.String("on-sent")) }

// walkFlags are the sizes of verify's walk over rows and entries, which
// repair walks too.
func walkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "chunk-rows", Usage: "rows read per SELECT, and entries read per index query", Value: admin.DefaultVerifyChunk},
		&cli.IntFlag{Name: "page-entries", Usage: "stream entries read per XRANGE (each carries its payload)", Value: admin.DefaultVerifyPage},
	}
}

// walkArgs reads walkFlags and --on-sent, which says whether the walk finds
// the relayed rows deleted: what verify and repair read alike.
func walkArgs(c *cli.Context) (chunk, page int, onSent string) {
	return c.Int("chunk-rows"), c.Int("page-entries"), onSentOf(c)
}
