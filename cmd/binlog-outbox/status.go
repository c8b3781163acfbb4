package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

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
			"dead-letter stream.",
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
	// Retention says how long the server keeps the file the position
	// points into: RetentionSeconds when known, or why not.
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

// binlogFile is one row of SHOW BINARY LOGS.
type binlogFile struct {
	name string
	size int64
}

func runStatus(c *cli.Context) error {
	ctx := c.Context
	cfg, err := loadConfig(c)
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
	files, err := readServer(ctx, db, &rep.Server)
	if err != nil {
		return err
	}
	if err := readPosition(ctx, client, keys.Position, rep, files); err != nil {
		return err
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

// readServer fills srv and returns the server's binlog files. A server
// without binlog (poll mode) is reported, not an error.
func readServer(ctx context.Context, db *sql.DB, srv *statusServer) ([]binlogFile, error) {
	s, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	srv.Version = s.String()
	vars, err := mysqlserver.GlobalVariables(ctx, db, "binlog_expire_logs_seconds", "expire_logs_days")
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	secs, _ := strconv.ParseInt(vars["binlog_expire_logs_seconds"], 10, 64)
	if secs == 0 {
		// MariaDB before 10.6 and MySQL 5.7 know only days, fractional on MariaDB.
		days, _ := strconv.ParseFloat(vars["expire_logs_days"], 64)
		secs = int64(days * 86400)
	}
	srv.ExpireSeconds = secs
	if srv.File, srv.Pos, err = s.BinlogPosition(ctx, db); err != nil {
		srv.Unknown = "binlog position: " + err.Error()
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, "SHOW /* binlog-outbox */ BINARY LOGS")
	if err != nil {
		srv.Unknown = "binlog files: " + err.Error()
		return nil, nil
	}
	defer rows.Close()
	var files []binlogFile
	err = mysqlserver.ScanRows(rows, func(v []sql.RawBytes) {
		if len(v) >= 2 {
			n, _ := strconv.ParseInt(string(v[1]), 10, 64)
			files = append(files, binlogFile{name: string(v[0]), size: n})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("status: read binlog files: %w", err)
	}
	srv.BinlogFiles = len(files)
	return files, nil
}

// readPosition fills rep.Position from the stored position and the
// server's binlog files.
func readPosition(ctx context.Context, client *redis.Client, key string, rep *statusReport, files []binlogFile) error {
	raw, err := client.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status: read position %s: %w", key, err)
	}
	b, err := position.Decode(raw)
	if err != nil {
		return fmt.Errorf("status: stored position at %s: %w", key, err)
	}
	p := &statusPosition{File: b.File, Pos: b.Pos, GTIDSet: b.GTIDSet, ServerID: b.ServerID, UpdatedAt: b.UpdatedAt,
		AgeSeconds: time.Since(b.UpdatedAt).Round(time.Millisecond).Seconds()}
	rep.Position = p
	srv := rep.Server
	switch {
	case srv.File == "":
		p.BehindUnknown, p.Retention = "the server reports no binlog position", "unknown: the server reports no binlog position"
		return nil
	case b.File == "":
		p.BehindUnknown, p.Retention = "the position has no binlog file", "unknown: the position has no binlog file"
		return nil
	}
	behind, idx := binlogBehind(files, b.File, b.Pos, srv.File, srv.Pos)
	if idx < 0 {
		p.BehindUnknown = "the server no longer has " + b.File
		p.Retention = "purged: the server no longer has " + b.File
		if !b.GTIDMode() {
			rep.Warnings = append(rep.Warnings, "the server purged "+b.File+", which the position points into: the relay cannot resume by file and offset (see docs/operations.md)")
		}
		return nil
	}
	p.BytesBehind = &behind
	switch {
	case b.File == srv.File:
		p.Retention = "not at risk: the position is in the current binlog file, which the server does not purge"
	case srv.ExpireSeconds == 0:
		p.Retention = "not purged by age (binlog_expire_logs_seconds and expire_logs_days are 0); PURGE BINARY LOGS would still remove it"
	default:
		// A file is purged when its last write is older than the expiry,
		// and SQL shows no file's time: only its place is known.
		p.Retention = fmt.Sprintf("unknown: the server does not show binlog file times over SQL; %s is %d files before the current one, and files expire %s after their last write",
			b.File, len(files)-1-idx, time.Duration(srv.ExpireSeconds)*time.Second)
	}
	return nil
}

// binlogBehind returns the bytes of binlog from file:pos to the server's
// end curFile:curPos, and the index of file among files (-1 when the server
// no longer has it).
func binlogBehind(files []binlogFile, file string, pos uint32, curFile string, curPos uint32) (int64, int) {
	idx := -1
	for i, f := range files {
		if f.name == file {
			idx = i
		}
	}
	if idx < 0 {
		return 0, -1
	}
	behind := int64(0)
	for i := idx; i < len(files); i++ {
		end := files[i].size
		if files[i].name == curFile {
			end = int64(curPos)
		}
		if i == idx {
			end -= int64(pos)
		}
		behind += end
		if files[i].name == curFile {
			break
		}
	}
	return max(behind, 0), idx
}

// readStream reads the length and consumer groups of a stream.
func readStream(ctx context.Context, client *redis.Client, key string) (statusStream, error) {
	s := statusStream{Key: key, Groups: []statusGroup{}}
	var err error
	if s.Length, err = client.XLen(ctx, key).Result(); err != nil {
		return s, fmt.Errorf("status: XLEN %s: %w", key, err)
	}
	groups, err := client.XInfoGroups(ctx, key).Result()
	if err != nil {
		return s, fmt.Errorf("status: XINFO GROUPS %s: %w", key, err)
	}
	for _, g := range groups {
		s.Groups = append(s.Groups, statusGroup{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, Lag: g.Lag, LastDeliveredID: g.LastDeliveredID})
	}
	return s, nil
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
		if p.BytesBehind != nil {
			fmt.Fprintf(&b, "behind:    %d bytes of binlog\n", *p.BytesBehind)
		} else {
			fmt.Fprintf(&b, "behind:    unknown: %s\n", p.BehindUnknown)
		}
		fmt.Fprintf(&b, "retention: %s\n", p.Retention)
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
