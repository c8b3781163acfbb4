package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
)

// The text forms of the reports, as the commands print them without
// --json: one place says how each report reads, whatever prints it.

// Text is the report as `status` prints it.
func (r *StatusReport) Text() string {
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
		fmt.Fprintf(&b, ", written %s ago (%s)\n", durationOf(p.AgeSeconds).Round(time.Second), r.PositionKey)
		if p.Repair != nil {
			fmt.Fprintf(&b, "repair:    %s holds the position (see the warning)\n", p.Repair)
		}
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
		r.Slots.text(&b)
	}
	if l := r.Lease; l == nil {
		fmt.Fprintf(&b, "lease:     none held at %s (no binlog relay reads with --lease)\n", r.LeaseKey)
	} else {
		fmt.Fprintf(&b, "lease:     held by %s/%s since %s, %s left unless renewed (%s)\n", l.Holder, l.TokenPrefix,
			l.AcquiredAt.Format(time.RFC3339), durationOf(l.TTLSeconds).Round(100*time.Millisecond), r.LeaseKey)
	}
	if len(r.Streams) == 0 {
		b.WriteString("streams:   none\n")
	}
	for _, s := range r.Streams {
		fmt.Fprintf(&b, "stream:    %s, %d entries\n", s.Key, s.Length)
		for _, g := range s.Groups {
			g.text(&b, r.GroupIdleThresholdSeconds)
		}
	}
	for _, q := range r.Queues {
		fmt.Fprintf(&b, "queue:     %s (%s), %d waiting, %d delayed, %d reserved\n", q.Key, q.Type, q.Waiting, q.Delayed, q.Reserved)
	}
	warningsText(&b, r.Warnings)
	return b.String()
}

// text is the text of status and position show about the per-slot
// positions.
func (s *SlotsStatus) text(b *strings.Builder) {
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
		fmt.Fprintf(b, "  ahead:   slots %s are past the position key (a relay stopped between the scripts of a batch; they skip what they hold at the next start)\n", joinInts(s.Ahead))
	}
	if len(s.Foreign) > 0 {
		fmt.Fprintf(b, "  foreign: slots %s hold no position of this relay\n", joinInts(s.Foreign))
	}
}

// text is the text of status about a consumer group: a line, and one more
// for each of its oldest pending entry, idle consumers and the trimming it
// holds back.
func (g GroupStatus) text(b *strings.Builder, idleThreshold float64) {
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

// durationOf is a number of seconds of a report as a duration.
func durationOf(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// secs is a number of seconds as a short duration: to the second, or to
// the millisecond below one.
func secs(s float64) string { return shortDuration(durationOf(s)) }

// warningsText is the warnings of a report, a line each.
func warningsText(b *strings.Builder, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(b, "warning: %s\n", w)
	}
}

// Text is the report as `position show` prints it.
func (r *PositionReport) Text() string {
	var b strings.Builder
	if r.Raw == nil {
		fmt.Fprintf(&b, "no position stored at %s: the next run starts at --start-from\n", r.Key)
	} else {
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, r.Raw, "", "  ")
		fmt.Fprintf(&b, "%s: %s (written %s ago)\n%s\n", r.Key, r.Position, time.Since(r.Position.UpdatedAt).Round(time.Second), pretty.String())
	}
	if r.Slots != nil {
		r.Slots.text(&b)
	}
	warningsText(&b, r.Warnings)
	return b.String()
}

// Text is the report as `verify` prints it.
func (r *VerifyReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s mode), %s: %d rows, %d entries in %d streams\n", r.Table, r.Mode, r.Range, r.Rows, r.Entries, r.Streams)
	fmt.Fprintf(&b, "  matched:         %d\n", r.Matched)
	if r.Mode == mode.Poll {
		fmt.Fprintf(&b, "  pending:         %d (unsent rows)\n", r.Pending)
	} else {
		fmt.Fprintf(&b, "  not yet relayed: %d\n", r.NotYetRelayed)
	}
	fmt.Fprintf(&b, "  missing:         %d\n", r.Missing)
	for _, e := range r.Examples.Missing {
		fmt.Fprintf(&b, "    row id=%d message_id=%s has no entry\n", e.OutboxID, e.MessageID)
	}
	fmt.Fprintf(&b, "  duplicated:      %d\n", r.Duplicated)
	for _, e := range r.Examples.Duplicated {
		fmt.Fprintf(&b, "    row id=%d message_id=%s has %d entries: %s\n", e.OutboxID, e.MessageID, len(e.Entries), strings.Join(e.Entries, ", "))
	}
	fmt.Fprintf(&b, "  foreign:         %d\n", r.Foreign)
	for _, e := range r.Examples.Foreign {
		fmt.Fprintf(&b, "    entry %s (outbox_id=%d message_id=%s) names no row\n", strings.Join(e.Entries, ", "), e.OutboxID, e.MessageID)
	}
	if r.SharedIDs > 0 {
		fmt.Fprintf(&b, "  shared ids:      %d message ids held by more than one row (consumers that deduplicate by message_id drop all but the first)\n", r.SharedIDs)
		for _, s := range r.Examples.SharedIDs {
			fmt.Fprintf(&b, "    message_id=%s: %d rows, ids %d to %d\n", s.MessageID, s.Rows, s.FirstID, s.LastID)
		}
	}
	if r.Later+r.Deleted > 0 {
		fmt.Fprintf(&b, "  not compared:    %d entries of rows committed after the snapshot, %d of rows deleted since\n", r.Later, r.Deleted)
	}
	warningsText(&b, r.Warnings)
	if r.Clean() {
		b.WriteString("clean\n")
	}
	return b.String()
}

// Err is verify's verdict: nil when the report is Clean, else what it
// found, with which the command exits 1.
func (r *VerifyReport) Err() error {
	if r.Clean() {
		return nil
	}
	err := fmt.Errorf("verify: %d missing, %d duplicated, %d foreign", r.Missing, r.Duplicated, r.Foreign)
	var hints []string
	if r.Missing > 0 {
		hints = append(hints, "`binlog-outbox repair` lists the missing rows and `repair --apply` appends them once (docs/incidents.md)")
	}
	if r.Duplicated+r.Foreign > 0 {
		hints = append(hints, "docs/verify.md says what duplicated and foreign entries mean and what to do")
	}
	if r.SharedIDs > 0 {
		err = fmt.Errorf("%w, %d message ids held by more than one row", err, r.SharedIDs)
		hints = append(hints, "the table has no unique key on message_id: give each producer's row an id of its own (a ULID), then ALTER TABLE ... ADD UNIQUE KEY (message_id) once no id repeats")
	}
	return outbox.WithHint(err, "%s", strings.Join(hints, "; "))
}

// Text is the report as `cleanup` prints it.
func (r *CleanupReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s mode), rows whose occurred_at is before %s: ", r.Table, r.Mode, r.Cutoff.Format(time.RFC3339))
	switch {
	case r.Note != "":
		b.WriteString(r.Note)
	case r.DryRun:
		fmt.Fprintf(&b, "%d would be deleted (dry run)", r.Candidates)
	default:
		fmt.Fprintf(&b, "deleted %d in %d batches, %.1fs (%.0f rows/s)", r.Deleted, r.Batches, r.Seconds, r.RowsPerSecond)
	}
	if r.KeptUnsent > 0 {
		fmt.Fprintf(&b, "; %d as old are not sent yet and stay", r.KeptUnsent)
	}
	b.WriteString("\n")
	return b.String()
}

// Text is the report as `dead-letters list` prints it.
func (r *DeadLettersReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d dead letters\n", r.Stream, len(r.Entries))
	for _, e := range r.Entries {
		id := "none"
		if e.OutboxID != nil {
			id = fmt.Sprint(*e.OutboxID)
		}
		stream := e.Stream
		if e.StreamFromTemplate {
			stream += " (by the current --stream)"
		}
		fmt.Fprintf(&b, "%s  outbox_id %s  message_id %s  for %s  age %s\n  reason: %s\n", e.ID, id, e.MessageID, stream,
			durationOf(e.AgeSeconds).Round(time.Second), e.Reason)
	}
	return b.String()
}

// Text is the report as `dead-letters replay` prints it.
func (r *ReplayReport) Text() string {
	var b strings.Builder
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "outbox_id %d message_id %s: ", row.OutboxID, row.MessageID)
		switch row.Outcome {
		case ReplayDelivered:
			fmt.Fprintf(&b, "delivered to %s as %s\n", row.Stream, row.EntryID)
		case ReplayGone:
			b.WriteString("already gone from the dead-letter stream (replayed or purged meanwhile), nothing appended\n")
		default:
			fmt.Fprintf(&b, "stays: %s\n", row.Reason)
		}
	}
	for _, id := range r.Unmatched {
		fmt.Fprintf(&b, "--id %s: no dead letter has it (replayed or purged already?)\n", id)
	}
	fmt.Fprintf(&b, "%d delivered, %d stay, %d gone", r.Delivered, r.Stay, r.Gone)
	if r.Delivered > 0 {
		b.WriteString("; replayed events land after the events relayed meanwhile, later ones of their aggregates too (consumers deduplicate by message_id, order by outbox_id)")
	}
	b.WriteString("\n")
	return b.String()
}

// Err is replay's verdict: nil when every row it took was delivered (or
// gone) and every --id named a dead letter, else what stays and which ids
// matched none, with which the command exits 1: a mistyped id is no
// success.
func (r *ReplayReport) Err() error {
	switch {
	case r.Stay == 0 && len(r.Unmatched) == 0:
		return nil
	case len(r.Unmatched) > 0:
		return outbox.WithHint(fmt.Errorf("dead-letters replay: %d rows stay in the dead-letter stream; no dead letter has --id %s", r.Stay, strings.Join(r.Unmatched, ", ")),
			"an --id is a dead letter's entry id, outbox_id or message_id as `binlog-outbox dead-letters list` prints them; one replayed or purged before is gone from the stream")
	}
	return outbox.WithHint(fmt.Errorf("dead-letters replay: %d rows stay in the dead-letter stream", r.Stay),
		"each row's reason says what to fix in the outbox table (UPDATE the row); then run the replay again (docs/dead-letters.md)")
}

// Text is the report as `backfill` prints it at its end.
func (r *BackfillReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backfill %s: %d entries appended this run, done up to id %d (progress %s)", r.Stream, r.Appended, r.LastID, r.ProgressKey)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&b, "; %d rows left out, which run would dead-letter (ids %v)", len(r.Skipped), r.Skipped[:min(10, len(r.Skipped))])
	}
	b.WriteString("\n")
	return b.String()
}
