// Command binlog-outbox relays rows of a MySQL/MariaDB outbox table to Redis
// Streams. See `binlog-outbox --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	// SIGHUP too: a closed terminal or a supervisor's reload signal would
	// otherwise kill the relay without a word and leave its lease held,
	// and the next start would wait for it to expire.
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		// The first signal stops cleanly, and a relay holding the lease
		// gives it up (canal.Reader.standby), so a standby or the next
		// start reads at once. Binlog mode abandons the batch in
		// flight, whose position is not stored, so nothing is lost or
		// repeated; poll mode finishes the round in flight (within
		// --shutdown-grace), whose marks would otherwise roll back. An
		// operator who signals again wants out now.
		sig := <-signals
		fmt.Fprintf(os.Stderr, "received %s, stopping (signal again to exit at once)\n", sig)
		cancel()
		<-signals
		os.Exit(exitFailure)
	}()
	app := NewApp()
	err := app.RunContext(ctx, os.Args)
	cancel()
	os.Exit(reportError(app.ErrWriter, err))
}
