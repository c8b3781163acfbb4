// Package exitcode maps the errors of the commands (binlog-outbox,
// binlog-outbox-bench) to their exit codes and stops them on a signal, so
// that both binaries exit alike.
package exitcode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// The exit codes: 2 for a usage or configuration error, 1 for any other.
const (
	OK      = 0
	Failure = 1
	Usage   = 2
)

// Report prints err and, on a line of its own, its hint to w and returns
// the exit code: OK for nil, Usage for outbox.ErrConfig or an error usage
// says is one (nil: none other), Failure for everything else.
func Report(w io.Writer, err error, usage func(error) bool) int {
	if err == nil {
		return OK
	}
	fmt.Fprintln(w, "error:", err)
	if hint := outbox.HintOf(err); hint != "" {
		fmt.Fprintln(w, "hint:", hint)
	}
	if errors.Is(err, outbox.ErrConfig) || (usage != nil && usage(err)) {
		return Usage
	}
	return Failure
}

// CancelOnSignal cancels on the first of sigs, saying so on stderr, so that
// the command stops cleanly; it exits with Failure at once on the second,
// as an operator who signals again wants out now.
func CancelOnSignal(cancel context.CancelFunc, sigs ...os.Signal) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, sigs...)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "received %s, stopping (signal again to exit at once)\n", sig)
		cancel()
		<-signals
		os.Exit(Failure)
	}()
}
