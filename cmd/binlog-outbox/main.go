// Command binlog-outbox relays rows of a MySQL/MariaDB outbox table to Redis
// Streams. See `binlog-outbox --help`.
package main

import (
	"context"
	"os"
	"syscall"

	"github.com/binlog-outbox/binlog-outbox/internal/exitcode"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

// ownsProcess is set by main: run may then tune the process as a whole
// (relay.Options.OwnsProcess), which the tests' in-process runs must not.
var ownsProcess bool

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	// SIGHUP too: a closed terminal or a supervisor's reload signal would
	// otherwise kill the relay without a word and leave its lease held,
	// and the next start would wait for it to expire. The first signal
	// stops cleanly, and a relay holding the lease gives it up
	// (canal.Reader.standby), so a standby or the next start reads at
	// once. Binlog mode abandons the batch in flight, whose position is
	// not stored, so nothing is lost or repeated; poll mode finishes the
	// round in flight (within --shutdown-grace), whose marks would
	// otherwise roll back.
	exitcode.CancelOnSignal(cancel, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ownsProcess = true
	app := NewApp()
	err := app.RunContext(ctx, os.Args)
	cancel()
	os.Exit(reportError(app.ErrWriter, err))
}
