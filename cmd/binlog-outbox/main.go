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
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal stops cleanly. Binlog mode abandons the batch in
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
