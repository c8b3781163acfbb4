package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as aligned text tables.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "machine: %s\n\n", rep.Machine)
	if err := writeCPU(w, rep); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ceiling (measured alone, same run)\tevents/s\tCPU s/M ev\tRedis CPU us/ev\tMySQL CPU us/ev\t")
	for _, c := range rep.Ceilings {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t\n", c.Name, c.EventsPerSec, orDash(c.CPUSecPerM), orDash(c.RedisCPUus), orDash(c.MySQLCPUus))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tmode\tevents\tevents/s\tx ceiling\tceiling\tp50 ms\tp99 ms\tp99.9 ms\tceil p50\tceil p99\tp99 - ceil\tpeak RSS MB\tCPU s/M ev\tRedis CPU us/ev\tMySQL CPU us/ev\tlag end\tlag max\t")
	for _, r := range rep.Results {
		lat, lag := "-\t-\t-\t-\t-\t-", "-\t-"
		if r.P99ms != 0 {
			lat = fmt.Sprintf("%.2f\t%.2f\t%.2f\t-\t-\t-", r.P50ms, r.P99ms, r.P999ms)
			if r.CeilP99ms != 0 {
				lat = fmt.Sprintf("%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%+.2f", r.P50ms, r.P99ms, r.P999ms, r.CeilP50ms, r.CeilP99ms, r.P99DiffMs)
			}
			lag = fmt.Sprintf("%d\t%d", r.LagEnd, r.LagMax)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t\n",
			r.Workload, r.Mode, r.Rows, r.EventsPerSec, r.Ratio, r.Ceiling, lat, r.PeakRSSMB, r.CPUSecPerM, orDash(r.RedisCPUus), orDash(r.MySQLCPUus), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeIdle(w, rep.Idle)
	writeTenants(w, rep.Tenants)
	if err := writeLatency(w, rep.Latency); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nx ceiling: events/s over the ceiling's; in the live binlog rows, the relay's p99 over the minimal relay's (lower is better)")
	if rep.Duration != "" {
		fmt.Fprintf(w, "\nrun took %s\n", rep.Duration)
	}
	return nil
}

// WriteJSON prints the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// writeLatency prints the median of each binlog live workload's runs.
func writeLatency(w io.Writer, meds []LatencyMedian) error {
	if len(meds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "live workload, runs beside the minimal relay\truns\tp99 - ceil, median\tmin\tmax\t")
	for _, m := range meds {
		fmt.Fprintf(tw, "%s\t%d\t%+.2f\t%+.2f\t%+.2f\t\n", m.Workload, m.Runs, m.P99DiffMs, m.MinMs, m.MaxMs)
	}
	return tw.Flush()
}
