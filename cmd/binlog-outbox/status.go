package main

import (
	"encoding/json"
	"fmt"
	"github.com/binlog-outbox/binlog-outbox/relay"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/admin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func statusCommand() *cli.Command {
	flags := append(streamFlags(), positionKeyFlag(), groupIdleThresholdFlag(),
		&cli.BoolFlag{
			Name:  "json",
			Usage: "print the status as JSON",
		})
	return &cli.Command{
		Name:  "status",
		Usage: "show the mode, the stored position, how far behind the server it is, binlog retention, and the streams with their consumer groups",
		Description: "Reads only: the mode and position keys, the server's binlog (SHOW BINARY LOGS, the binlog status)\n" +
			"and expiry settings, and of every stream the --stream template names and of the dead-letter stream its length\n" +
			"and consumer groups (XINFO STREAM, GROUPS and CONSUMERS, XPENDING, and a count of the undelivered entries).\n" +
			"With --redis-cluster, also the position of every hash slot, and the streams of every master.",
		Flags:  flags,
		Action: runStatus,
	}
}

func runStatus(c *cli.Context) error {
	ctx := c.Context
	t, err := openTableCommand(ctx, c, "status", false, true)
	if err != nil {
		return err
	}
	defer t.close()
	cfg := t.cfg
	r, err := admin.Status(ctx, admin.StatusOptions{
		DB: t.db, Database: cfg.Database, Table: cfg.Table, Redis: t.redis, Cluster: cfg.RedisCluster != nil,
		Keys: redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key")), Streams: t.streams,
		Dumper: relay.DumperFor(cfg, ""), GroupIdleThreshold: c.Duration("group-idle-threshold"),
	})
	if err != nil {
		return err
	}
	return printStatus(c.App.Writer, &r, c.Bool("json"))
}

// slotsText is the text of status and position show about the per-slot
// positions.
func slotsText(b *strings.Builder, s *admin.SlotsStatus) {
	if s.Count == 0 {
		fmt.Fprintf(b, "slots:     no hash slot holds a position (%s)\n", s.Keys)
		return
	}
	fmt.Fprintf(b, "slots:     %d hash slots hold a position (%s)", s.Count, s.Keys)
	switch {
	case s.Lowest == nil:
	case s.Lowest.Position == s.Highest.Position:
		fmt.Fprintf(b, ", all at %s", s.Lowest.Position)
	default:
		fmt.Fprintf(b, ", lowest %s (slot %d), highest %s (slot %d)", s.Lowest.Position, s.Lowest.Slot, s.Highest.Position, s.Highest.Slot)
	}
	b.WriteString("\n")
	if len(s.Ahead) > 0 {
		fmt.Fprintf(b, "  ahead:   slots %s are past the position key (a relay stopped between the scripts of a batch; they skip what they hold at the next start)\n", admin.JoinInts(s.Ahead))
	}
	if len(s.Foreign) > 0 {
		fmt.Fprintf(b, "  foreign: slots %s hold no position of this relay\n", admin.JoinInts(s.Foreign))
	}
}

func printStatus(w io.Writer, r *admin.StatusReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	m := r.Mode
	if m == "" {
		m = "none recorded"
	}
	fmt.Fprintf(&b, "table:     %s\nmode:      %s (%s)\n", r.Table, m, r.ModeKey)
	fmt.Fprintf(&b, "server:    %s", r.Server.Version)
	if r.Server.File != "" {
		fmt.Fprintf(&b, ", binlog at %s:%d in %d files", r.Server.File, r.Server.Pos, r.Server.BinlogFiles)
	}
	if r.Server.Unknown != "" {
		fmt.Fprintf(&b, " (%s)", r.Server.Unknown)
	}
	b.WriteString("\n")
	if p := r.Position; p == nil {
		fmt.Fprintf(&b, "position:  none stored at %s\n", r.PositionKey)
	} else {
		fmt.Fprintf(&b, "position:  %s:%d", p.File, p.Pos)
		if p.GTIDSet != "" {
			fmt.Fprintf(&b, " gtid_set=%s", p.GTIDSet)
		}
		fmt.Fprintf(&b, ", written %s ago (%s)\n", (time.Duration(p.AgeSeconds * float64(time.Second))).Round(time.Second), r.PositionKey)
		switch {
		case p.BytesBehind != nil && p.SecondsBehind != nil:
			fmt.Fprintf(&b, "behind:    %d bytes of binlog, %s (the oldest transaction not relayed started that long ago)\n", *p.BytesBehind, time.Duration(*p.SecondsBehind)*time.Second)
		case p.BytesBehind != nil:
			fmt.Fprintf(&b, "behind:    %d bytes of binlog, seconds unknown: %s\n", *p.BytesBehind, p.SecondsUnknown)
		default:
			fmt.Fprintf(&b, "behind:    unknown: %s\n", p.BehindUnknown)
		}
		fmt.Fprintf(&b, "retention: %s\n", p.Retention)
	}
	if r.Slots != nil {
		slotsText(&b, r.Slots)
	}
	if l := r.Lease; l == nil {
		fmt.Fprintf(&b, "lease:     none held at %s (no binlog relay reads with --lease)\n", r.LeaseKey)
	} else {
		fmt.Fprintf(&b, "lease:     held by %s/%s since %s, %s left unless renewed (%s)\n", l.Holder, l.TokenPrefix,
			l.AcquiredAt.Format(time.RFC3339), (time.Duration(l.TTLSeconds * float64(time.Second))).Round(100*time.Millisecond), r.LeaseKey)
	}
	if len(r.Streams) == 0 {
		b.WriteString("streams:   none\n")
	}
	for _, s := range r.Streams {
		fmt.Fprintf(&b, "stream:    %s, %d entries\n", s.Key, s.Length)
		for _, g := range s.Groups {
			groupText(&b, g, r.GroupIdleThresholdSeconds)
		}
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// groupText is the text of status about a consumer group: a line, and one
// more for each of its oldest pending entry, idle consumers and the
// trimming it holds back.
func groupText(b *strings.Builder, g admin.GroupStatus, idleThreshold float64) {
	lag := strconv.FormatInt(g.Lag, 10)
	if g.LagEstimated {
		lag = "about " + lag
	}
	fmt.Fprintf(b, "  group:   %s, %d consumers, pending %d, lag %s, last delivered %s\n", g.Name, g.Consumers, g.Pending, lag, g.LastDeliveredID)
	if p := g.OldestPending; p != nil {
		fmt.Fprintf(b, "    oldest pending: %s, %d deliveries, appended %s ago, last delivered to %s %s ago\n", p.ID, p.Deliveries, secs(p.AgeSeconds), p.Consumer, secs(p.IdleSeconds))
	}
	if len(g.IdleConsumers) > 0 {
		idle := make([]string, 0, len(g.IdleConsumers))
		for _, c := range g.IdleConsumers {
			idle = append(idle, c.Name+" "+secs(c.IdleSeconds))
		}
		fmt.Fprintf(b, "    idle consumers (over %s): %s\n", secs(idleThreshold), strings.Join(idle, ", "))
	}
	if g.HoldsBackTrim {
		fmt.Fprintf(b, "    holds back --trim acked: keeps %s and later, %s old\n", g.TrimHeldID, secs(g.TrimHeldAgeSeconds))
	}
}

// secs is a number of seconds as a duration: to the second, or to the
// millisecond below one.
func secs(s float64) string {
	return admin.ShortDuration(time.Duration(s * float64(time.Second)))
}
