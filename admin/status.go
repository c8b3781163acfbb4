package admin

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/binlog-outbox/binlog-outbox/lag"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisadmin"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// StatusOptions say what Status reads.
type StatusOptions struct {
	// DB reaches the server the relay reads.
	DB *sql.DB
	// Database and Table name the outbox table as the server does.
	Database, Table string
	// Redis holds the streams and the relay's keys; Cluster says it is a
	// Redis Cluster, whose per-slot positions Status sums up too.
	Redis   redis.UniversalClient
	Cluster bool
	Keys    redisstream.Keys
	Streams Streams
	// Dumper reaches the server for the short binlog dumps that date the
	// first transaction after the position (lag.Binlog); its Flavor is the
	// server's, as Status detects it.
	Dumper lag.Dumper
	// GroupIdleThreshold is how long a consumer may go without reading
	// before status calls it idle (--group-idle-threshold); 0 for
	// redisadmin.DefaultGroupIdleThreshold.
	GroupIdleThreshold time.Duration
}

// Status reads, and only reads: the mode and position keys, the lease, the
// server's binlog and expiry settings, the length and consumer groups of
// every stream, and what waits on Laravel's queues.
func Status(ctx context.Context, o StatusOptions) (StatusReport, error) {
	client, keys := o.Redis, o.Keys
	rep := StatusReport{Table: o.Database + "." + o.Table, ModeKey: keys.Mode, PositionKey: keys.Position, LeaseKey: keys.Lease}
	idle := cmp.Or(o.GroupIdleThreshold, redisadmin.DefaultGroupIdleThreshold)
	rep.GroupIdleThresholdSeconds = idle.Seconds()
	var err error
	if rep.Mode, err = redisstream.NewModeStore(client, keys.Mode).Load(ctx); err != nil {
		return rep, fmt.Errorf("status: read the mode: %w", err)
	}
	if info, ttl, ok, err := redisstream.ReadLease(ctx, client, keys.Lease); err != nil {
		return rep, fmt.Errorf("status: %w", err)
	} else if ok {
		rep.Lease = &LeaseStatus{Holder: info.Holder, TokenPrefix: info.TokenPrefix(), AcquiredAt: info.AcquiredAt, TTLSeconds: ttl.Seconds()}
	}
	lb, srv, err := readServer(ctx, o.DB, o.Dumper, &rep.Server)
	if err != nil {
		return rep, err
	}
	if err := readPosition(ctx, client, keys.Position, &rep, lb, srv); err != nil {
		return rep, err
	}
	if o.Cluster {
		cp, err := redisadmin.ReadClusterPositions(ctx, client, keys.Position)
		if err != nil {
			return rep, fmt.Errorf("status: %w", err)
		}
		rep.Slots, rep.Warnings = slotsStatus(cp, rep.Warnings)
	}
	streams, err := o.Streams.list(ctx, client)
	if err != nil {
		return rep, err
	}
	for _, key := range streams {
		s, err := readStream(ctx, client, key, idle)
		if err != nil {
			return rep, err
		}
		rep.Streams = append(rep.Streams, s)
		rep.Warnings = append(rep.Warnings, deadGroups(s, idle)...)
	}
	if o.Streams.Queues {
		if rep.Queues, err = readQueues(ctx, client, o.Streams.Glob); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// StatusReport is what Status shows; its JSON is `status --json`.
type StatusReport struct {
	Table   string `json:"table"`
	Mode    string `json:"mode"` // "" when no relay recorded one
	ModeKey string `json:"mode_key"`
	// Position is nil when none is stored.
	Position    *PositionStatus `json:"position"`
	PositionKey string          `json:"position_key"`
	Server      ServerStatus    `json:"server"`
	Streams     []StreamStatus  `json:"streams"`
	// Queues are Laravel's queues (--format laravel-queue or
	// laravel-stream); absent for the other formats.
	Queues   []QueueStatus `json:"queues,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
	// Lease is the binlog relay reading now; nil when none holds the
	// lease (none runs, or the relays run with --lease=false).
	Lease    *LeaseStatus `json:"lease"`
	LeaseKey string       `json:"lease_key"`
	// Slots are the per-slot positions of a Redis Cluster
	// (--redis-cluster); absent otherwise.
	Slots *SlotsStatus `json:"slot_positions,omitempty"`
	// GroupIdleThresholdSeconds is how long a consumer went without
	// reading to be listed in a group's IdleConsumers.
	GroupIdleThresholdSeconds float64 `json:"group_idle_threshold_seconds"`
}

// SlotsStatus sums up the per-slot positions of a Redis Cluster
// (redisadmin.SlotSummary).
type SlotsStatus struct {
	// Keys is the pattern of their keys.
	Keys    string     `json:"keys"`
	Count   int        `json:"count"`
	Lowest  *SlotPoint `json:"lowest"`
	Highest *SlotPoint `json:"highest"`
	// Ahead are the slots past the position key; Foreign those that hold
	// no position of this relay.
	Ahead   []int `json:"ahead"`
	Foreign []int `json:"foreign"`
}

// SlotPoint is one slot's position.
type SlotPoint struct {
	Slot     int    `json:"slot"`
	Key      string `json:"key"`
	Position string `json:"position"`
}

// PositionStatus is the stored position and how far behind the server it is.
type PositionStatus struct {
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
	// Repair is the repair that marked the position as its own
	// (position.Binlog.Repair); nil when none did.
	Repair *position.RepairHold `json:"repair,omitempty"`
}

// LeaseStatus is the binlog relay that holds the lease.
type LeaseStatus struct {
	// Holder is hostname/pid of the relay holding the lease.
	Holder      string    `json:"holder"`
	TokenPrefix string    `json:"token_prefix"`
	AcquiredAt  time.Time `json:"acquired_at"`
	// TTLSeconds is how long the lease lasts unless renewed.
	TTLSeconds float64 `json:"ttl_seconds"`
}

// ServerStatus is the server's binlog.
type ServerStatus struct {
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

// StreamStatus is a stream and its consumer groups.
type StreamStatus struct {
	Key    string        `json:"key"`
	Length int64         `json:"length"`
	Groups []GroupStatus `json:"groups"`
}

// GroupStatus is a consumer group of a stream (redisadmin.GroupHealth).
type GroupStatus struct {
	Name      string `json:"name"`
	Consumers int64  `json:"consumers"`
	Pending   int64  `json:"pending"`
	// Lag counts the entries not yet delivered to the group, from the
	// stream's ids (not XINFO GROUPS lag, wrong after trimming or XDEL).
	Lag int64 `json:"lag"`
	// LagEstimated says Lag is an estimate: more entries lie on both
	// sides of the group's last delivered id than status counts.
	LagEstimated    bool   `json:"lag_estimated"`
	LastDeliveredID string `json:"last_delivered_id"`
	// OldestPending is the pending entry of the lowest id; nil when none
	// is pending.
	OldestPending *PendingStatus `json:"oldest_pending"`
	// IdleConsumers have not read for longer than the threshold.
	IdleConsumers []IdleConsumer `json:"idle_consumers"`
	// HoldsBackTrim says --trim acked stops at this group: it keeps
	// TrimHeldID and the entries after it, the first of them
	// TrimHeldAgeSeconds old.
	HoldsBackTrim      bool    `json:"holds_back_trim"`
	TrimHeldID         string  `json:"trim_held_id,omitempty"`
	TrimHeldAgeSeconds float64 `json:"trim_held_age_seconds"`
}

// PendingStatus is an entry delivered to a group and not acknowledged.
type PendingStatus struct {
	ID       string `json:"id"`
	Consumer string `json:"consumer"`
	// Deliveries counts its deliveries, claims included: a consumer fails
	// on an entry delivered again and again (a poison entry).
	Deliveries int64 `json:"deliveries"`
	// AgeSeconds is how long ago it was appended (from its id),
	// IdleSeconds how long ago it was last delivered.
	AgeSeconds  float64 `json:"age_seconds"`
	IdleSeconds float64 `json:"idle_seconds"`
}

// IdleConsumer is a consumer that has not read for IdleSeconds.
type IdleConsumer struct {
	Name        string  `json:"name"`
	IdleSeconds float64 `json:"idle_seconds"`
}

// readServer fills out and returns the server's binlog, nil when the server
// has none (poll mode), which is reported, not an error.
func readServer(ctx context.Context, db *sql.DB, dumper lag.Dumper, out *ServerStatus) (*lag.Binlog, *lag.Server, error) {
	s, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	out.Version = s.String()
	dumper.Flavor = s.Flavor
	lb := &lag.Binlog{DB: db, Server: s, Dumper: dumper}
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
func readPosition(ctx context.Context, client redis.UniversalClient, key string, rep *StatusReport, lb *lag.Binlog, srv *lag.Server) error {
	raw, err := client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status: read position %s: %w", key, redisconn.Classify(err))
	}
	b, err := position.Decode(raw)
	if err != nil {
		return fmt.Errorf("status: stored position at %s: %w", key, err)
	}
	p := &PositionStatus{File: b.File, Pos: b.Pos, GTIDSet: b.GTIDSet, ServerID: b.ServerID, UpdatedAt: b.UpdatedAt,
		AgeSeconds: time.Since(b.UpdatedAt).Round(time.Millisecond).Seconds()}
	rep.Position = p
	if b.Repairing() {
		p.Repair = &b.Repair
		rep.Warnings = append(rep.Warnings, holdWarning(b))
	}
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
			rep.Warnings = append(rep.Warnings, "the server purged "+b.File+", which the position points into: the relay cannot resume by file and offset (see docs/incidents.md)")
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

// readStream reads the length and consumer groups of a stream, consumers
// idle past idle.
func readStream(ctx context.Context, client redis.UniversalClient, key string, idle time.Duration) (StreamStatus, error) {
	s := StreamStatus{Key: key, Groups: []GroupStatus{}}
	var err error
	if s.Length, err = client.XLen(ctx, key).Result(); err != nil {
		return s, fmt.Errorf("status: XLEN %s: %w", key, redisconn.Classify(err))
	}
	groups, err := redisadmin.ReadGroupHealth(ctx, client, key, idle)
	if err != nil {
		return s, fmt.Errorf("status: %w", err)
	}
	for _, g := range groups {
		gs := GroupStatus{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, Lag: g.Undelivered, LagEstimated: g.Estimated, LastDeliveredID: g.LastDeliveredID,
			IdleConsumers: []IdleConsumer{}, HoldsBackTrim: g.HoldsBackTrim, TrimHeldID: g.Held, TrimHeldAgeSeconds: seconds(g.HeldAge)}
		if p := g.Oldest; p != nil {
			gs.OldestPending = &PendingStatus{ID: p.ID, Consumer: p.Consumer, Deliveries: p.Deliveries, AgeSeconds: seconds(p.Age), IdleSeconds: seconds(p.Idle)}
		}
		for _, name := range slices.Sorted(maps.Keys(g.Idle)) {
			gs.IdleConsumers = append(gs.IdleConsumers, IdleConsumer{Name: name, IdleSeconds: seconds(g.Idle[name])})
		}
		s.Groups = append(s.Groups, gs)
	}
	return s, nil
}

// shortDuration writes d to the second, or to the millisecond below one.
func shortDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// seconds is d in seconds, to the millisecond.
func seconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}

// deadGroups warns of the groups of s that hold back --trim acked, with
// entries older than idle, while no consumer reads them: the stream grows
// for as long as they stay.
func deadGroups(s StreamStatus, idle time.Duration) []string {
	var out []string
	for _, g := range s.Groups {
		// Entries younger than the threshold may just not have been read
		// yet, by consumers about to start.
		if !g.HoldsBackTrim || int64(len(g.IdleConsumers)) < g.Consumers || g.TrimHeldAgeSeconds <= idle.Seconds() {
			continue
		}
		readers := "it has no consumer"
		if g.Consumers > 0 {
			readers = fmt.Sprintf("none of its %d consumers read for over %s", g.Consumers, idle)
		}
		out = append(out, fmt.Sprintf("group %s of %s holds back --trim acked from %s (%s old) and %s: the stream keeps every entry from there while it stays; "+
			"if nobody consumes it any more, XGROUP DESTROY %s %s", g.Name, s.Key, g.TrimHeldID, shortDuration(time.Duration(g.TrimHeldAgeSeconds*float64(time.Second))), readers, s.Key, g.Name))
	}
	return out
}

// slotsStatus sums up the per-slot positions for status, adding to warnings
// what stops the relay at its next start.
func slotsStatus(cp redisadmin.ClusterPositions, warnings []string) (*SlotsStatus, []string) {
	sum := cp.Summary()
	out := &SlotsStatus{Keys: cp.Key + ":{...}", Count: sum.Count, Ahead: sum.Ahead, Foreign: sum.Foreign}
	if out.Ahead == nil {
		out.Ahead = []int{}
	}
	if out.Foreign == nil {
		out.Foreign = []int{}
	}
	point := func(p *redisadmin.SlotPosition) *SlotPoint {
		if p == nil {
			return nil
		}
		return &SlotPoint{Slot: p.Slot, Key: p.Key, Position: p.Position.String()}
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
