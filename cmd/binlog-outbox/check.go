package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/binlog-outbox/binlog-outbox/relay"

	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/preflight"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "check that MySQL, the outbox table and Redis meet the relay's requirements",
		Description: "Prints one line per requirement (PASS, WARN, FAIL or SKIP) and, for each problem, how to fix it.\n" +
			"Exits non-zero when a requirement of --mode fails; with --mode auto, only when neither mode can run.\n" +
			"Takes every flag of run: give it the flags run gets, and it refuses what run would refuse at start, in the same words.",
		// Every flag of run: check validates the values run would refuse
		// at start, with the same words (preflight.Start).
		Flags: append(runFlags(),
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up on unreachable servers after this long"}),
		Action: runCheck,
	}
}

func runCheck(c *cli.Context) error {
	o, requested, err := loadOptions(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	rep := relay.Check(ctx, o, requested)
	printReport(c.App.Writer, rep)
	// The fixes are printed above; the error only sums up.
	return relay.CheckVerdict(rep, requested)
}

// printReport prints one line per requirement, the fix of each problem
// indented below it, and which modes can run.
func printReport(w io.Writer, rep preflight.Report) {
	width := 0
	for _, r := range rep.Results {
		width = max(width, len(r.Name))
	}
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%s  %-*s  %s\n", r.Status, width, r.Name, r.Detail)
		if r.Fix != "" && (r.Status == preflight.Fail || r.Status == preflight.Warn) {
			fmt.Fprintf(w, "      %-*s  fix: %s\n", width, "", r.Fix)
		}
	}
	for _, m := range preflight.AllModes {
		if n := len(rep.Failed(m)); n > 0 {
			fmt.Fprintf(w, "%s mode: not ready (%d failed)\n", m, n)
		} else {
			fmt.Fprintf(w, "%s mode: ready\n", m)
		}
	}
}
