package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func statusCommand() *cli.Command {
	flags := append(streamFlags(), positionKeyFlag(),
		&cli.BoolFlag{
			Name:  "json",
			Usage: "print the status as JSON",
		})
	return &cli.Command{
		Name:  "status",
		Usage: "show the mode, the stored position, how far behind the server it is, binlog retention, and the streams with their consumer groups",
		Description: "Reads only: the mode and position keys, the server's binlog (SHOW BINARY LOGS, the binlog status)\n" +
			"and expiry settings, and XLEN and XINFO GROUPS of every stream the --stream template names and of the\n" +
			"dead-letter stream. With --redis-cluster, also the position of every hash slot, and the streams of every master.",
		Flags:  flags,
		Action: runStatus,
	}
}

// statusReport is what status shows.
type statusReport struct {
	Table   string `json:"table"`
	Mode    string `json:"mode"` // "" when no relay recorded one
	ModeKey string `json:"mode_key"`
	// Position is nil when none is stored.
	Position    *statusPosition `json:"position"`
	PositionKey string          `json:"position_key"`
	Server      statusServer    `json:"server"`
	Streams     []statusStream  `json:"streams"`
	Warnings    []string        `json:"warnings,omitempty"`
	// Lease is the binlog relay reading now; nil when none holds the
	// lease (none runs, or the relays run with --lease=false).
	Lease    *statusLease `json:"lease"`
	LeaseKey string       `json:"lease_key"`
	// Slots are the per-slot positions of a Redis Cluster
	// (--redis-cluster); absent otherwise.
	Slots *statusSlots `json:"slot_positions,omitempty"`
}

// statusSlots sums up the per-slot positions (redisstream.SlotSummary).
type statusSlots struct {
	// Keys is the pattern of their keys.
	Keys    string           `json:"keys"`
	Count   int              `json:"count"`
	Lowest  *statusSlotPoint `json:"lowest"`
	Highest *statusSlotPoint `json:"highest"`
	// Ahead are the slots past the position key; Foreign those that hold
	// no position of this relay.
	Ahead   []int `json:"ahead"`
	Foreign []int `json:"foreign"`
}

type statusSlotPoint struct {
	Slot     int    `json:"slot"`
	Key      string `json:"key"`
	Position string `json:"position"`
}

type statusPosition struct {
	File       string    `json:"file"`
	Pos        uint32    `json:"pos"`
	GTIDSet    string    `json:"gtid_set,omitempty"`
	ServerID   uint32    `json:"server_id"`
	UpdatedAt  time.Time `json:"updated_at"`
	AgeSeconds float64   `json:"age_seconds"`
	// BytesBehind is the binlog between the position and the server's
	// current end; nil when unknown, with BehindUnknown saying why.
	BytesBehind   *int64 `json:"bytes_behind"`
	BehindUnknown string `json:"bytes_behind_unknown,omitempty"`
	// SecondsBehind is how long ago the first transaction after the
	// position started (0 when caught up); nil when unknown, with
	// SecondsUnknown saying why.
	SecondsBehind  *float64 `json:"seconds_behind"`
	SecondsUnknown string   `json:"seconds_behind_unknown,omitempty"`
	// Retention says how long the server keeps the file the position
	// points into; RetentionSeconds is the headroom when the server will
	// purge it (0: any moment, or purged), nil when it will not or when
	// unknown.
	RetentionSeconds *int64 `json:"retention_headroom_seconds"`
	Retention        string `json:"retention"`
}

type statusLease struct {
	// Holder is hostname/pid of the relay holding the lease.
	Holder      string    `json:"holder"`
	TokenPrefix string    `json:"token_prefix"`
	AcquiredAt  time.Time `json:"acquired_at"`
	// TTLSeconds is how long the lease lasts unless renewed.
	TTLSeconds float64 `json:"ttl_seconds"`
}

type statusServer struct {
	Version string `json:"version"`
	// File and Pos are the end of the server's binlog; "" when it is off.
	File string `json:"binlog_file,omitempty"`
	Pos  uint32 `json:"binlog_pos,omitempty"`
	// BinlogFiles is how many binlog files the server keeps.
	BinlogFiles int `json:"binlog_files"`
	// ExpireSeconds is the binlog expiry (binlog_expire_logs_seconds, or
	// expire_logs_days in seconds); 0 when binlogs are never purged by age.
	ExpireSeconds int64  `json:"expire_seconds"`
	Unknown       string `json:"unknown,omitempty"`
}

type statusStream struct {
	Key    string        `json:"key"`
	Length int64         `json:"length"`
	Groups []statusGroup `json:"groups"`
}

type statusGroup struct {
	Name            string `json:"name"`
	Consumers       int64  `json:"consumers"`
	Pending         int64  `json:"pending"`
	Lag             int64  `json:"lag"` // -1 when Redis cannot tell
	LastDeliveredID string `json:"last_delivered_id"`
}

func runStatus(c *cli.Context) error {
	ctx := c.Context
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	db, _, err := openTable(ctx, &cfg, "status")
	if err != nil {
		return err
	}
	defer db.Close()
	tmpl, client, err := openStreams(c, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	keys := redisstream.KeysFor(cfg.Database, cfg.Table, c.String("position-key"))
	rep := &statusReport{Table: cfg.Database + "." + cfg.Table, ModeKey: keys.Mode, PositionKey: keys.Position, LeaseKey: keys.Lease}
	if rep.Mode, err = redisstream.NewModeStore(client, keys.Mode).Load(ctx); err != nil {
		return fmt.Errorf("status: read the mode: %w", err)
	}
	if info, ttl, ok, err := redisstream.ReadLease(ctx, client, keys.Lease); err != nil {
		return fmt.Errorf("status: %w", err)
	} else if ok {
		rep.Lease = &statusLease{Holder: info.Holder, TokenPrefix: info.TokenPrefix(), AcquiredAt: info.AcquiredAt, TTLSeconds: ttl.Seconds()}
	}
	lb, srv, err := readServer(ctx, cfg, db, &rep.Server)
	if err != nil {
		return err
	}
	if err := readPosition(ctx, client, keys.Position, rep, lb, srv); err != nil {
		return err
	}
	if cfg.RedisCluster != nil {
		cp, err := redisstream.ReadClusterPositions(ctx, client, keys.Position)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		rep.Slots, rep.Warnings = slotsStatus(cp, rep.Warnings)
	}
	streams, err := streamKeys(ctx, client, tmpl.Glob(), c.String("dead-letter-stream"))
	if err != nil {
		return err
	}
	for _, key := range streams {
		s, err := readStream(ctx, client, key)
		if err != nil {
			return err
		}
		rep.Streams = append(rep.Streams, s)
	}
	return printStatus(c.App.Writer, rep, c.Bool("json"))
}

// readServer fills out and returns the server's binlog, nil when the server
// has none (poll mode), which is reported, not an error.
func readServer(ctx context.Context, cfg config, db *sql.DB, out *statusServer) (*lag.Binlog, *lag.Server, error) {
	s, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	out.Version = s.String()
	lb := &lag.Binlog{DB: db, Server: s, Dumper: dumperFor(cfg, s.Flavor)}
	srv, err := lag.ReadServer(ctx, db, s)
	out.ExpireSeconds = int64(srv.Expire / time.Second)
	if err != nil {
		out.Unknown = "binlog: " + err.Error()
		return lb, nil, nil
	}
	out.File, out.Pos, out.BinlogFiles = srv.File, srv.Pos, len(srv.Files)
	return lb, &srv, nil
}

// readPosition fills rep.Position from the stored position, measured by lb
// against the server's binlog srv (nil: the server has none).
func readPosition(ctx context.Context, client redis.UniversalClient, key string, rep *statusReport, lb *lag.Binlog, srv *lag.Server) error {
	raw, err := client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status: read position %s: %w", key, redisstream.Classify(err))
	}
	b, err := position.Decode(raw)
	if err != nil {
		return fmt.Errorf("status: stored position at %s: %w", key, err)
	}
	p := &statusPosition{File: b.File, Pos: b.Pos, GTIDSet: b.GTIDSet, ServerID: b.ServerID, UpdatedAt: b.UpdatedAt,
		AgeSeconds: time.Since(b.UpdatedAt).Round(time.Millisecond).Seconds()}
	rep.Position = p
	unknown := func(why string) {
		p.BehindUnknown, p.SecondsUnknown, p.Retention = why, why, "unknown: "+why
	}
	switch {
	case srv == nil:
		unknown("the server reports no binlog position")
		return nil
	case b.File == "":
		unknown("the position has no binlog file")
		return nil
	}
	now := time.Now()
	m := lb.MeasureOn(ctx, *srv, b.File, b.Pos)
	p.Retention = m.Retention.String(now)
	if h, ok := m.Retention.Headroom(now); ok && !math.IsInf(h, 1) {
		secs := int64(h)
		p.RetentionSeconds = &secs
	}
	if !m.BehindKnown {
		p.BehindUnknown, p.SecondsUnknown = "the server no longer has "+b.File, "the server no longer has "+b.File
		if !b.GTIDMode() {
			rep.Warnings = append(rep.Warnings, "the server purged "+b.File+", which the position points into: the relay cannot resume by file and offset (see docs/operations.md)")
		}
		return nil
	}
	p.BytesBehind = &m.BytesBehind
	if secs, ok := m.SecondsBehind(now); ok {
		secs = math.Round(secs)
		p.SecondsBehind = &secs
	} else {
		p.SecondsUnknown = "reading the time of the first transaction after the position failed: " + m.OldestErr.Error()
	}
	return nil
}

// readStream reads the length and consumer groups of a stream.
func readStream(ctx context.Context, client redis.UniversalClient, key string) (statusStream, error) {
	s := statusStream{Key: key, Groups: []statusGroup{}}
	var err error
	if s.Length, err = client.XLen(ctx, key).Result(); err != nil {
		return s, fmt.Errorf("status: XLEN %s: %w", key, redisstream.Classify(err))
	}
	groups, err := client.XInfoGroups(ctx, key).Result()
	if err != nil {
		return s, fmt.Errorf("status: XINFO GROUPS %s: %w", key, redisstream.Classify(err))
	}
	for _, g := range groups {
		s.Groups = append(s.Groups, statusGroup{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, Lag: g.Lag, LastDeliveredID: g.LastDeliveredID})
	}
	return s, nil
}

// slotsStatus sums up the per-slot positions for status, adding to warnings
// what stops the relay at its next start.
func slotsStatus(cp redisstream.ClusterPositions, warnings []string) (*statusSlots, []string) {
	sum := cp.Summary()
	out := &statusSlots{Keys: cp.Key + ":{...}", Count: sum.Count, Ahead: sum.Ahead, Foreign: sum.Foreign}
	if out.Ahead == nil {
		out.Ahead = []int{}
	}
	if out.Foreign == nil {
		out.Foreign = []int{}
	}
	point := func(p *redisstream.SlotPosition) *statusSlotPoint {
		if p == nil {
			return nil
		}
		return &statusSlotPoint{Slot: p.Slot, Key: p.Key, Position: p.Position.String()}
	}
	out.Lowest, out.Highest = point(sum.Lowest), point(sum.Highest)
	if cp.Base == nil && sum.Count > 0 {
		warnings = append(warnings, fmt.Sprintf("%d hash slots hold positions but %s holds none: run refuses to start; `binlog-outbox position reset` deletes them (events appended since the old start may be appended again), `position set` stores a new position", sum.Count, cp.Key))
	}
	if len(sum.Foreign) > 0 {
		warnings = append(warnings, fmt.Sprintf("hash slots %s hold no position of this relay (%s): a relay is fenced at its first append there; `binlog-outbox position set` or `reset` deletes them", joinInts(sum.Foreign), redisstream.SlotPositionKey(cp.Key, sum.Foreign[0])))
	}
	return out, warnings
}

// joinInts writes ns as "1, 2, 3", with at most 20 of them.
func joinInts(ns []int) string {
	parts := make([]string, 0, min(len(ns), 21))
	for i, n := range ns {
		if i == 20 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-20))
			break
		}
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ", ")
}

// slotsText is the text of status and position show about the per-slot
// positions.
func slotsText(b *strings.Builder, s *statusSlots) {
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

func printStatus(w io.Writer, r *statusReport, asJSON bool) error {
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
			lag := strconv.FormatInt(g.Lag, 10)
			if g.Lag < 0 {
				lag = "unknown"
			}
			fmt.Fprintf(&b, "  group:   %s, %d consumers, pending %d, lag %s, last delivered %s\n", g.Name, g.Consumers, g.Pending, lag, g.LastDeliveredID)
		}
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
