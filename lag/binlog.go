// Package lag measures how far the relay is behind the database: in binlog
// mode the bytes and seconds between the stored position and the end of the
// server's binlog, and how long the server keeps the binlog file the
// position points into; in poll mode the unsent rows and the age of the
// oldest one. `status` measures once; a running relay samples on its own
// connections every few seconds (Monitor) for its metrics, its readiness and
// its catch-up progress lines, never on the path of the events.
package lag

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
)

// File is one binlog file the server keeps, as SHOW BINARY LOGS lists it.
type File struct {
	Name string
	Size int64
}

// Server is the server's binlog as SQL shows it.
type Server struct {
	// File and Pos are the end of the binlog.
	File string
	Pos  uint32
	// Files are the binlog files the server keeps, oldest first.
	Files []File
	// Expire is the binlog expiry (binlog_expire_logs_seconds, or
	// expire_logs_days); 0 when files are never purged by age.
	Expire time.Duration
}

// ReadExpiry reads how long the server keeps binlog files after their last
// write; 0 when it does not purge them by age.
func ReadExpiry(ctx context.Context, db *sql.DB) (time.Duration, error) {
	vars, err := mysqlserver.GlobalVariables(ctx, db, "binlog_expire_logs_seconds", "expire_logs_days", "binlog_expire_logs_auto_purge")
	if err != nil {
		return 0, err
	}
	if v := vars["binlog_expire_logs_auto_purge"]; strings.EqualFold(v, "OFF") || v == "0" {
		// MySQL 8.0.29+: no purge by age whatever the expiry says.
		return 0, nil
	}
	secs, _ := strconv.ParseInt(vars["binlog_expire_logs_seconds"], 10, 64)
	if secs == 0 {
		// MariaDB before 10.6 and MySQL 5.7 know only days, fractional on MariaDB.
		days, _ := strconv.ParseFloat(vars["expire_logs_days"], 64)
		secs = int64(days * 86400)
	}
	return time.Duration(secs) * time.Second, nil
}

// ReadServer reads the end of the binlog, the files and the expiry. It fails
// when the binlog is off.
func ReadServer(ctx context.Context, db *sql.DB, srv mysqlserver.Server) (Server, error) {
	var s Server
	var err error
	if s.Expire, err = ReadExpiry(ctx, db); err != nil {
		return s, err
	}
	if s.File, s.Pos, err = srv.BinlogPosition(ctx, db); err != nil {
		return s, err
	}
	rows, err := db.QueryContext(ctx, "SHOW /* binlog-outbox */ BINARY LOGS")
	if err != nil {
		return s, fmt.Errorf("list binary logs: %w", err)
	}
	defer rows.Close()
	err = mysqlserver.ScanRows(rows, func(v []sql.RawBytes) {
		if len(v) >= 2 {
			n, _ := strconv.ParseInt(string(v[1]), 10, 64)
			s.Files = append(s.Files, File{Name: string(v[0]), Size: n})
		}
	})
	if err != nil {
		return s, fmt.Errorf("list binary logs: %w", err)
	}
	return s, nil
}

// index returns the place of file among the server's files, -1 when the
// server no longer has it.
func (s Server) index(file string) int {
	for i, f := range s.Files {
		if f.Name == file {
			return i
		}
	}
	return -1
}

// Distance returns the bytes of binlog from file:pos to toFile:toPos, the
// rest of file and every later file up to toFile; ok is false when the
// server no longer has file.
func (s Server) Distance(file string, pos uint32, toFile string, toPos uint32) (bytes int64, ok bool) {
	idx := s.index(file)
	if idx < 0 {
		return 0, false
	}
	for i := idx; i < len(s.Files); i++ {
		end := s.Files[i].Size
		if s.Files[i].Name == toFile {
			end = int64(toPos)
		}
		if i == idx {
			end -= int64(pos)
		}
		bytes += end
		if s.Files[i].Name == toFile {
			break
		}
	}
	return max(bytes, 0), true
}

// Behind returns the bytes of binlog from file:pos to the server's end.
func (s Server) Behind(file string, pos uint32) (int64, bool) {
	return s.Distance(file, pos, s.File, s.Pos)
}

// RetentionState says whether the server may purge a position's file.
type RetentionState int

// The states of a Retention.
const (
	// RetentionUnknown: not measured (no position file, or the
	// measurement failed; Retention.Reason says which).
	RetentionUnknown RetentionState = iota
	// RetentionCurrent: the file is the one the server writes, which it
	// never purges.
	RetentionCurrent
	// RetentionNoExpiry: the server purges no file by age.
	RetentionNoExpiry
	// RetentionExpires: the server purges the file Expire after LastWrite.
	RetentionExpires
	// RetentionPurged: the server no longer has the file.
	RetentionPurged
)

// Retention says how long the server keeps the binlog file a position
// points into. Only the age of the file counts here: PURGE BINARY LOGS by
// hand, and MariaDB's max_binlog_total_size, purge regardless.
type Retention struct {
	State RetentionState
	File  string
	// LastWrite is when the server last wrote File (the start of the file
	// after it), for RetentionExpires.
	LastWrite time.Time
	Expire    time.Duration
	// Behind is how many files after File the current one is.
	Behind int
	// Reason says why the state is unknown.
	Reason string
}

// Headroom is how long until the server may purge the file: +Inf when it
// does not purge it (current file, no expiry), 0 when it may at its next
// rotation or did; ok is false when unknown. The server purges an expired
// file when it rotates (or on FLUSH BINARY LOGS), not at once, and not while
// a connected replica reads it: 0 is "any moment now".
func (r Retention) Headroom(now time.Time) (seconds float64, ok bool) {
	switch r.State {
	case RetentionCurrent, RetentionNoExpiry:
		return math.Inf(1), true
	case RetentionPurged:
		return 0, true
	case RetentionExpires:
		return max(r.LastWrite.Add(r.Expire).Sub(now).Seconds(), 0), true
	}
	return 0, false
}

// String describes the retention for `status`.
func (r Retention) String(now time.Time) string {
	switch r.State {
	case RetentionCurrent:
		return "not at risk: the position is in the current binlog file, which the server does not purge"
	case RetentionNoExpiry:
		return "not purged by age (binlog_expire_logs_seconds and expire_logs_days are 0, or binlog_expire_logs_auto_purge is OFF); PURGE BINARY LOGS would still remove it"
	case RetentionPurged:
		return "purged: the server no longer has " + r.File
	case RetentionExpires:
		until := r.LastWrite.Add(r.Expire).Sub(now)
		if until <= 0 {
			return fmt.Sprintf("expired: %s was last written %s ago, longer than the expiry %s; the server purges it at its next binlog rotation unless a replica is reading it",
				r.File, now.Sub(r.LastWrite).Round(time.Second), r.Expire)
		}
		return fmt.Sprintf("%s left: %s was last written %s ago (files before the current one: %d), and files expire %s after their last write",
			until.Round(time.Second), r.File, now.Sub(r.LastWrite).Round(time.Second), r.Behind, r.Expire)
	}
	return "unknown: " + r.Reason
}

// Binlog measures binlog mode. It remembers the times it read over binlog
// dumps that cannot change (when a closed file was last written, the first
// transaction after a position), so that a relay that stands still, or
// reads within one file, dumps nothing. It is safe for concurrent use.
type Binlog struct {
	DB     *sql.DB
	Server mysqlserver.Server
	Dumper Dumper

	mu sync.Mutex
	// starts caches Dumper.FileStart by file name.
	starts map[string]time.Time
	// oldestAt, oldestEnd and oldest cache the last FirstAfter: the
	// position, the server's end then, and the time found (zero: none).
	oldestAt, oldestEnd string
	oldest              time.Time
}

// BinlogSample is one measurement of binlog mode.
type BinlogSample struct {
	At     time.Time
	Server Server
	// File and Pos are the position measured from.
	File string
	Pos  uint32
	// BytesBehind is the binlog from the position to the server's end;
	// BehindKnown is false when the server no longer has File.
	BytesBehind int64
	BehindKnown bool
	// Oldest is when the first transaction after the position started:
	// the oldest one not appended. Zero when caught up, when only the
	// server's own events follow the position (a rotation, a checkpoint:
	// BytesBehind then counts a few hundred bytes with nothing to relay),
	// or when unknown (OldestErr says why).
	Oldest    time.Time
	OldestErr error
	Retention Retention
}

// Pending reports whether a transaction follows the position (or whether
// that is unknown while bytes do): what the relay has yet to read.
func (s BinlogSample) Pending() bool {
	return s.BehindKnown && s.BytesBehind > 0 && (!s.Oldest.IsZero() || s.OldestErr != nil)
}

// SecondsBehind is how long ago the oldest transaction not appended
// started: 0 when caught up; ok is false when unknown.
func (s BinlogSample) SecondsBehind(now time.Time) (float64, bool) {
	switch {
	case !s.BehindKnown:
		return 0, false
	case s.BytesBehind == 0:
		return 0, true
	case s.Oldest.IsZero():
		return 0, s.OldestErr == nil
	}
	return max(now.Sub(s.Oldest).Seconds(), 0), true
}

// Measure measures the position file:pos against the server. Only the
// server's binlog is needed: an error from it fails the measurement; a
// failed binlog dump leaves the seconds behind or the retention unknown,
// with the reason.
func (b *Binlog) Measure(ctx context.Context, file string, pos uint32) (BinlogSample, error) {
	srv, err := ReadServer(ctx, b.DB, b.Server)
	if err != nil {
		return BinlogSample{At: time.Now(), Server: srv, File: file, Pos: pos}, err
	}
	return b.MeasureOn(ctx, srv, file, pos), nil
}

// MeasureOn measures the position file:pos against srv, which the caller
// read with ReadServer.
func (b *Binlog) MeasureOn(ctx context.Context, srv Server, file string, pos uint32) BinlogSample {
	s := BinlogSample{At: time.Now(), Server: srv, File: file, Pos: pos}
	s.BytesBehind, s.BehindKnown = s.Server.Behind(file, pos)
	if s.BehindKnown && s.BytesBehind > 0 {
		s.Oldest, s.OldestErr = b.firstAfter(ctx, srv, file, pos)
	}
	s.Retention = b.retention(ctx, s.Server, file)
	return s
}

// firstAfter is Dumper.FirstAfter, remembered: while the relay stands
// still its oldest transaction stays the same one, and while the binlog
// does not grow either, there stays none (only the server's own events
// follow the position, e.g. after a rotation on an idle server).
func (b *Binlog) firstAfter(ctx context.Context, srv Server, file string, pos uint32) (time.Time, error) {
	at := file + ":" + strconv.FormatUint(uint64(pos), 10)
	end := srv.File + ":" + strconv.FormatUint(uint64(srv.Pos), 10)
	b.mu.Lock()
	if b.oldestAt == at && (!b.oldest.IsZero() || b.oldestEnd == end) {
		defer b.mu.Unlock()
		return b.oldest, nil
	}
	b.mu.Unlock()
	first, ok, err := b.Dumper.FirstAfter(ctx, file, pos)
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		first = time.Time{}
	}
	b.mu.Lock()
	b.oldestAt, b.oldestEnd, b.oldest = at, end, first
	b.mu.Unlock()
	return first, nil
}

// retention says how long the server keeps file.
func (b *Binlog) retention(ctx context.Context, srv Server, file string) Retention {
	r := Retention{File: file, Expire: srv.Expire}
	idx := srv.index(file)
	switch {
	case file == "":
		r.Reason = "the position has no binlog file"
		return r
	case idx < 0:
		r.State = RetentionPurged
		return r
	case file == srv.File || idx == len(srv.Files)-1:
		r.State = RetentionCurrent
		return r
	case srv.Expire == 0:
		r.State = RetentionNoExpiry
		return r
	}
	r.Behind = len(srv.Files) - 1 - idx
	next := srv.Files[idx+1].Name
	at, err := b.fileStart(ctx, next)
	if err != nil {
		r.Reason = fmt.Sprintf("files before the current one: %d, and files expire %s after their last write, but reading when %s was last written failed: %v",
			r.Behind, srv.Expire, file, err)
		return r
	}
	r.State, r.LastWrite = RetentionExpires, at
	return r
}

// fileStart is Dumper.FileStart, remembered: a file's start never changes.
func (b *Binlog) fileStart(ctx context.Context, file string) (time.Time, error) {
	b.mu.Lock()
	at, ok := b.starts[file]
	b.mu.Unlock()
	if ok {
		return at, nil
	}
	at, err := b.Dumper.FileStart(ctx, file)
	if err != nil {
		return time.Time{}, err
	}
	b.mu.Lock()
	if b.starts == nil {
		b.starts = map[string]time.Time{}
	}
	if len(b.starts) > 64 {
		// Files the position passed long ago; a relay runs for months.
		clear(b.starts)
	}
	b.starts[file] = at
	b.mu.Unlock()
	return at, nil
}
