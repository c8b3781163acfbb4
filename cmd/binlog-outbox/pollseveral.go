package main

import (
	"time"

	"github.com/urfave/cli/v2"
)

// defaultPollListInterval is how often a relay of several tables in poll
// mode lists the tables again: a tenant signing up waits at most this long
// for its first event, and each listing costs one information_schema query
// per --table value.
const defaultPollListInterval = 5 * time.Second

// pollListFlag is --poll-list-interval.
func pollListFlag() cli.Flag {
	return &cli.DurationFlag{
		Name:    "poll-list-interval",
		Usage:   "poll mode with several tables or a pattern: how often the tables are listed again, to poll those created since (from their first row) and stop polling those dropped",
		EnvVars: []string{"BINLOG_OUTBOX_POLL_LIST_INTERVAL"},
		Value:   defaultPollListInterval,
	}
}
