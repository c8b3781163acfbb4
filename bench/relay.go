package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// child is the relay running as its own process, so that its memory and CPU
// are its own and not the harness's.
type child struct {
	cmd    *exec.Cmd
	out    *logging.Buffer
	exited chan struct{}
	// started is when the process was started.
	started time.Time
}

// startChild runs `bin args...` with the user's BINLOG_OUTBOX_* variables
// removed, so that only the flags given here configure it.
func startChild(bin string, args []string, env []string) (*child, error) {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BINLOG_OUTBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	c := &child{cmd: cmd, out: &logging.Buffer{Max: 1 << 20}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	c.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay %s: %w", bin, err)
	}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	return c, nil
}

func (c *child) done() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

func (c *child) failure(what string) error {
	out := c.out.String()
	if len(out) > 4000 {
		out = "..." + out[len(out)-4000:]
	}
	return fmt.Errorf("relay %s; its output:\n%s", what, out)
}

// usage is what the kernel says the process used so far: peak RSS (VmHWM)
// and CPU time (utime+stime).
type usage struct {
	PeakRSSMB  float64
	CPUSeconds float64
}

func (c *child) usage() (usage, error) {
	pid := c.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, err
	}
	var u usage
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			u.PeakRSSMB = kb / 1024
		}
	}
	if u.CPUSeconds, err = procCPU(pid); err != nil {
		return usage{}, err
	}
	return u, nil
}

// procCPU is the CPU time (utime+stime) process pid used so far, in seconds.
func procCPU(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// stop ends the relay with SIGTERM (SIGKILL after 10s).
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// progress watches the total length of streams.
type progress struct {
	rdb  *redis.Client
	keys []string
	// every is the time between two polls (default 5 ms).
	every time.Duration
}

func (p progress) count(ctx context.Context) (int64, error) {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(p.keys))
	for i, k := range p.keys {
		cmds[i] = pipe.XLen(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// span is a measured stretch of work: rows done between the first and the
// last observation, which leaves the start-up of the measured program out.
type span struct {
	began, first, last time.Time
	// seen is when the first entry was observed: first moves back to
	// began when everything arrived at once, seen does not.
	seen    time.Time
	atFirst int64
	total   int64
	// cpuFirst and cpuLast are the relay's CPU seconds when the first
	// and the last entries were seen (waitFor of a child only): the
	// catch-up's own, without the start's checks of every table.
	cpuFirst, cpuLast float64
}

// ready is how long the relay took from its start to the first entry.
func (s span) ready() time.Duration { return s.seen.Sub(s.began) }

// windowCPU is the relay's CPU seconds per million events between the
// first entry seen and the last.
func (s span) windowCPU() float64 {
	if s.total <= s.atFirst {
		return 0
	}
	return (s.cpuLast - s.cpuFirst) / float64(s.total-s.atFirst) * 1e6
}

func (s span) rate() float64 {
	d := s.last.Sub(s.first).Seconds()
	if d <= 0 || s.total <= s.atFirst {
		return 0
	}
	return float64(s.total-s.atFirst) / d
}

// waitFor polls the streams until they hold want entries. It fails when the
// relay exits or nothing moves for stall.
func (p progress) waitFor(ctx context.Context, c *child, want int64, stall time.Duration) (span, error) {
	var s span
	s.began = time.Now()
	if c != nil {
		s.began = c.started
	}
	last, lastMove := int64(-1), time.Now()
	cpu := func() float64 {
		if c == nil {
			return 0
		}
		v, _ := procCPU(c.cmd.Process.Pid)
		return v
	}
	for {
		n, err := p.count(ctx)
		now := time.Now()
		if err != nil {
			return s, err
		}
		if n > 0 && s.first.IsZero() {
			s.first, s.seen, s.atFirst, s.cpuFirst = now, now, n, cpu()
		}
		if n >= want {
			s.last, s.total, s.cpuLast = now, n, cpu()
			if s.atFirst >= n {
				// All arrived at once (a small backlog): count from the start.
				s.first, s.atFirst, s.cpuFirst = s.began, 0, 0
			}
			return s, nil
		}
		if n != last {
			last, lastMove = n, now
		}
		if c != nil && c.done() {
			return s, c.failure(fmt.Sprintf("exited at %d of %d entries", n, want))
		}
		if now.Sub(lastMove) > stall {
			if c != nil {
				return s, c.failure(fmt.Sprintf("stalled at %d of %d entries", n, want))
			}
			return s, fmt.Errorf("stalled at %d of %d entries", n, want)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(cmp.Or(p.every, 5*time.Millisecond)):
		}
	}
}

// arrivals reads streams with XREAD BLOCK and records when each entry
// arrived, per stream, keyed by message id.
type arrivals struct {
	mu sync.Mutex
	at []map[string]time.Time // per key of read
}

func newArrivals(streams int) *arrivals {
	a := &arrivals{at: make([]map[string]time.Time, streams)}
	for i := range a.at {
		a.at[i] = map[string]time.Time{}
	}
	return a
}

// count returns the entries seen in the i-th stream.
func (a *arrivals) count(i int) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int64(len(a.at[i]))
}

func (a *arrivals) read(ctx context.Context, rdb *redis.Client, keys []string) error {
	ids := make([]string, len(keys))
	for i := range ids {
		ids[i] = "0-0"
	}
	for ctx.Err() == nil {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: append(append([]string{}, keys...), ids...), Count: 5000, Block: 200 * time.Millisecond}).Result()
		now := time.Now()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		a.mu.Lock()
		for _, st := range res {
			i := slices.Index(keys, st.Stream)
			if i < 0 || len(st.Messages) == 0 {
				continue
			}
			ids[i] = st.Messages[len(st.Messages)-1].ID
			for _, m := range st.Messages {
				id, _ := m.Values[entry.FieldMessageID].(string)
				a.at[i][id] = now
			}
		}
		a.mu.Unlock()
	}
	return nil
}

// latencies returns, for the entries of the i-th stream, the time from the
// return of their producer's COMMIT to their arrival, sorted. A negative one
// arrived before the producer heard back.
func (a *arrivals) latencies(i int, p *producers) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	lat := make([]time.Duration, 0, len(a.at[i]))
	for id, at := range a.at[i] {
		if t, ok := p.committedAt(id); ok {
			lat = append(lat, at.Sub(t))
		}
	}
	slices.Sort(lat)
	return lat
}

// percentile returns the q-quantile of sorted latencies in milliseconds.
func percentile(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
}
