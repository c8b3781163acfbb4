package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// CPURow is one workload's CPU per event beside the ceilings that bound it,
// each measured alone in the same run: CPU time per event carries to
// another machine where rates on a shared one do not.
type CPURow struct {
	Workload string `json:"workload"`
	// RelayUs is the relay process's CPU per event; ReadUs go-mysql's own
	// reading and decoding the same binlog alone (the relay cannot do
	// less), and RelayRatio the one over the other.
	RelayUs    float64 `json:"relay_us"`
	ReadUs     float64 `json:"go_mysql_read_decode_us,omitempty"`
	RelayRatio float64 `json:"relay_ratio,omitempty"`
	// RedisUs is Redis's CPU per entry the relay appended; XAddUs Redis's
	// per entry of go-redis pipelining bare XADDs of the same payload size.
	RedisUs    float64 `json:"redis_us,omitempty"`
	XAddUs     float64 `json:"xadd_us,omitempty"`
	RedisRatio float64 `json:"redis_ratio,omitempty"`
	// RedisInstr and XAddInstr are the same two in Redis's instructions
	// per entry (callgrind, Config.RedisCallgrind), which the machine's
	// load does not move, InstrRatio the one over the other; the dumps
	// are the files callgrind_annotate breaks down by function.
	RedisInstr float64 `json:"redis_instructions,omitempty"`
	XAddInstr  float64 `json:"xadd_instructions,omitempty"`
	InstrRatio float64 `json:"instructions_ratio,omitempty"`
	RedisDump  string  `json:"redis_callgrind_dump,omitempty"`
	XAddDump   string  `json:"xadd_callgrind_dump,omitempty"`
	// MySQLUs is the server's CPU per event while the relay read; its
	// ceiling MySQLReadUs the server's while go-mysql alone read.
	MySQLUs     float64 `json:"mysql_us,omitempty"`
	MySQLReadUs float64 `json:"mysql_under_go_mysql_us,omitempty"`
	MySQLRatio  float64 `json:"mysql_ratio,omitempty"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
}

// cpuTable builds the CPU rows of the binlog catch-ups from the results
// and the ceilings measured last before each.
func (rep *Report) cpuTable() []CPURow {
	at := func(i int) (Figure, bool) {
		if i == 0 {
			return Figure{}, false
		}
		return rep.Ceilings[i-1], true
	}
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return a / b
	}
	var rows []CPURow
	for _, r := range rep.Results {
		if r.Mode != "binlog" || r.P99ms != 0 {
			continue // live workloads share the servers with the minimal relay
		}
		row := CPURow{Workload: r.Workload, RelayUs: r.CPUSecPerM, RedisUs: r.RedisCPUus, MySQLUs: r.MySQLCPUus, PeakRSSMB: r.PeakRSSMB}
		read, okRead := at(r.readAt)
		add, okAdd := at(r.appendAt)
		if !okRead && !okAdd {
			continue // no ceiling to set it beside (the giant rows: measured for memory)
		}
		row.ReadUs, row.MySQLReadUs, row.XAddUs = read.CPUSecPerM, read.MySQLCPUus, add.RedisCPUus
		row.RelayRatio, row.RedisRatio, row.MySQLRatio = ratio(row.RelayUs, row.ReadUs), ratio(row.RedisUs, row.XAddUs), ratio(row.MySQLUs, row.MySQLReadUs)
		row.RedisInstr, row.XAddInstr, row.InstrRatio = r.RedisInstr, add.RedisInstr, ratio(r.RedisInstr, add.RedisInstr)
		row.RedisDump, row.XAddDump = r.RedisDump, add.RedisDump
		rows = append(rows, row)
	}
	for _, t := range rep.Tenants {
		if t.CPURatio > 0 {
			rows = append(rows, CPURow{Workload: "catch-up over " + t.Name + " (ratio: over 1 table)", RelayUs: t.CPUSecPerM, RelayRatio: t.CPURatio, PeakRSSMB: t.PeakRSSMB})
		}
	}
	return rows
}

// writeCPU prints the CPU rows, the report's headline.
func writeCPU(w io.Writer, rep *Report) error {
	if len(rep.CPU) == 0 {
		return nil
	}
	fmt.Fprintf(w, "CPU per event, in µs, beside the ceiling that bounds it (measured alone, same run); %s\n", rep.Load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\trelay\tgo-mysql read+decode\tx\tRedis\tgo-redis XADD\tx\tMySQL\tMySQL, go-mysql reading\tx\tpeak RSS MB\t")
	for _, r := range rep.CPU {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Workload, r.RelayUs, orDash(r.ReadUs), times(r.RelayRatio),
			orDash(r.RedisUs), orDash(r.XAddUs), times(r.RedisRatio), orDash(r.MySQLUs), orDash(r.MySQLReadUs), times(r.MySQLRatio), r.PeakRSSMB)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeInstr(w, rep.CPU)
}

// writeInstr prints Redis's instructions per entry where callgrind counted
// them (Config.RedisCallgrind).
func writeInstr(w io.Writer, rows []CPURow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := 0
	for _, r := range rows {
		if r.RedisInstr == 0 {
			continue
		}
		if n == 0 {
			fmt.Fprintln(w, "Redis instructions per entry (callgrind), beside go-redis pipelined XADD of the same entries:")
			fmt.Fprintln(tw, "workload\tRedis\tgo-redis XADD\tx\tdumps (callgrind_annotate)\t")
		}
		n++
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s %s\t\n", r.Workload, r.RedisInstr, r.XAddInstr, times(r.InstrRatio), r.RedisDump, r.XAddDump)
	}
	if n == 0 {
		return nil
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

func times(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// loadAverage is the machine's 1-minute load average, "" where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
