package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// callgrindArgs run the private Redis under valgrind's callgrind, whose
// count of instructions the machine's load does not move: the ratio of
// Redis's cost per entry under the relay to a bare pipelined XADD's then
// repeats from run to run, where the CPU-time one moves with what shares
// the cores. Counting starts at once; each measure zeroes it first.
//
// Redis's timer, serverCron, is not counted: it runs ten times a second
// whatever the traffic, and under callgrind a stretch of work lasts some 50
// times longer, so that its share (mostly jemalloc's statistics, which grow
// with the data set) would follow the wall time of the measure rather than
// its entries, and differ from one run to the next (--collect-atstart=yes
// comes after the toggle, which otherwise starts with counting off).
//
// Names are written out in every dump, which callgrind_annotate then reads
// alone: compressed, a later dump would refer to names only an earlier one
// defines.
func callgrindArgs(outFile string) []string {
	return []string{"valgrind", "--tool=callgrind", "--toggle-collect=serverCron", "--collect-atstart=yes",
		"--compress-strings=no", "--compress-pos=no", "--callgrind-out-file=" + outFile}
}

// callgrindReady checks that valgrind's programs are installed and makes
// the directory of the dumps.
func callgrindReady(dir string) error {
	for _, p := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(p); err != nil {
			return outbox.WithHint(fmt.Errorf("%w: bench: RedisCallgrind: %s is not in PATH", outbox.ErrConfig, p),
				"install valgrind (apt-get install valgrind), which brings callgrind_control and callgrind_annotate")
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// callgrind drives the counters of a Redis run under callgrind with
// callgrind_control: zero them before a stretch of work, dump them after.
type callgrind struct {
	pid     int
	outFile string
	// dumps is how many dumps were taken: callgrind writes dump n to
	// outFile.n.
	dumps int
}

// zero resets the counters.
func (c *callgrind) zero(ctx context.Context) error {
	return c.control(ctx, "-z")
}

// dump writes the counters since the last zero or dump to a file of their
// own (which callgrind_annotate reads for the per-function breakdown) and
// returns the instructions they hold and the file. label names the dump in
// the file (its "Trigger").
func (c *callgrind) dump(ctx context.Context, label string) (instructions int64, file string, err error) {
	if err := c.control(ctx, "--dump="+label); err != nil {
		return 0, "", err
	}
	c.dumps++
	file = fmt.Sprintf("%s.%d", c.outFile, c.dumps)
	f, err := os.Open(file)
	if err != nil {
		return 0, "", fmt.Errorf("callgrind dump %q: %w", label, err)
	}
	defer f.Close()
	trigger, ir, err := parseCallgrind(f)
	if err != nil {
		return 0, "", fmt.Errorf("callgrind dump %s: %w", file, err)
	}
	if trigger != "dump "+label {
		return 0, "", fmt.Errorf("callgrind dump %s: its trigger is %q, not dump %s", file, trigger, label)
	}
	return ir, file, nil
}

func (c *callgrind) control(ctx context.Context, arg string) error {
	// callgrind_control answers within a second or so, through valgrind's
	// gdbserver (vgdb), even while Redis waits for clients: a command that
	// takes 30 s is stuck.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "callgrind_control", arg, strconv.Itoa(c.pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s %d: %w: %s", arg, c.pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// parseCallgrind reads the header of a callgrind dump: what triggered it
// and its instruction count (the "summary" line, the one event collected:
// Ir).
func parseCallgrind(r io.Reader) (trigger string, instructions int64, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	events := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "desc: Trigger: "); ok {
			trigger = v
		}
		if v, ok := strings.CutPrefix(line, "events: "); ok {
			events = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			if events != "Ir" {
				return "", 0, fmt.Errorf("events %q, want Ir alone (valgrind --tool=callgrind with no cache simulation)", events)
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return "", 0, fmt.Errorf("summary %q: %w", v, err)
			}
			return trigger, n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", 0, err
	}
	return "", 0, fmt.Errorf("no summary line: not a callgrind dump")
}

// callgrindOut is where a Redis in dir writes its dumps.
func callgrindOut(dir string) string { return filepath.Join(dir, "callgrind.out") }
