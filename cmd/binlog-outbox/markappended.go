package main

import (
	"fmt"

	"github.com/binlog-outbox/binlog-outbox/relay"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/poller"
)

func markAppendedCommand() *cli.Command {
	flags := append(streamFlags(), onSentFlag(),
		&cli.BoolFlag{Name: "allow-trimmed", Usage: "go on although a stream lost entries (XTRIM, MAXLEN, XDEL); poll mode appends their rows again"})
	return &cli.Command{
		Name:  "mark-appended",
		Usage: "mark sent (or delete) every unsent outbox row whose event is in a stream: the switch from binlog to poll mode",
		Description: "Binlog mode marks no row. Before poll mode takes over a table, the rows binlog mode appended must be\n" +
			"marked, or poll mode appends them again. This reads every entry of the streams the --stream template\n" +
			"names and of the dead-letter stream, and marks (--on-sent mark) or deletes (--on-sent delete) each\n" +
			"unsent row whose outbox_id and message_id the entry carries; rows of other tables are left alone.\n" +
			"It needs no assumption about the order of ids: binlog mode appends in commit order, which is not\n" +
			"id order. Run it after the binlog relay stopped, or while it runs with --dedupe-window\n" +
			"(docs/switching-modes.md).",
		Flags:  flags,
		Action: markAppended,
	}
}

func markAppended(c *cli.Context) error {
	onSent := onSentOf(c)
	ctx := c.Context
	t, err := openTableCommand(ctx, c, "mark-appended", true, true)
	if err != nil {
		return err
	}
	defer t.close()
	cfg := t.cfg
	r, err := admin.MarkAppended(ctx, admin.MarkOptions{
		DB: t.db, Table: t.table, Redis: t.redis, Streams: t.streams,
		DeleteRows: onSent == poller.OnSentDelete, AllowTrimmed: c.Bool("allow-trimmed"),
	})
	for _, w := range r.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
	}
	if err != nil {
		return err
	}
	if _, err = fmt.Fprintf(c.App.Writer, "%d streams, %d entries: %d rows %s; %d were sent already; %d entries name no unsent row of %s.%s (other tables, or rows gone)\n",
		r.Streams, r.Entries, r.Marked, map[string]string{poller.OnSentMark: "marked sent", poller.OnSentDelete: "deleted"}[onSent],
		r.AlreadySent, r.Foreign, cfg.Database, cfg.Table); err != nil {
		return err
	}
	return relay.PrepareSwitch(ctx, c.App.Writer, t.redis, t.db, cfg, mode.Poll)
}
