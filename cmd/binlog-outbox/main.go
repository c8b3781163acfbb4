// Command binlog-outbox relays rows of a MySQL/MariaDB outbox table to Redis
// Streams. See `binlog-outbox --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	app := NewApp()
	err := app.RunContext(ctx, os.Args)
	stop()
	os.Exit(reportError(app.ErrWriter, err))
}
