package main

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/preflight"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// trimFlags are the stream retention flags of run.
func trimFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "trim",
			Usage:   "off, or acked: trim each stream to the oldest entry some consumer group has not acknowledged (XTRIM MINID; Redis 6.2+); streams without a group are left alone",
			EnvVars: []string{"BINLOG_OUTBOX_TRIM"},
			Value:   preflight.TrimOff,
		},
		&cli.DurationFlag{
			Name:    "trim-interval",
			Usage:   "how often --trim and --max-len pass over the streams",
			EnvVars: []string{"BINLOG_OUTBOX_TRIM_INTERVAL"},
			Value:   redisstream.DefaultTrimInterval,
		},
		&cli.Int64Flag{
			Name:    "max-len",
			Usage:   "hard cap of each stream, about this many entries (XTRIM MAXLEN ~): acknowledged entries go first, and a cut of entries some group has not acknowledged is logged as a warning; 0 is no cap",
			EnvVars: []string{"BINLOG_OUTBOX_MAX_LEN"},
		},
	}
}

// startTrimmer starts the stream trimmer of --trim and --max-len, when one
// is set, after checking that Redis can trim; stop ends it and waits. With
// a lease (--lease), only its holder trims: a standby's passes are skipped.
func startTrimmer(c *cli.Context, cfg config, client redis.UniversalClient, lease *redisstream.Lease) (stop func(), err error) {
	acked, err := preflight.ParseTrim(c.String("trim"))
	if err != nil {
		return nil, err
	}
	if !acked && c.Int64("max-len") == 0 {
		return func() {}, nil
	}
	tmpl, err := redisstream.ParseTemplate(streamTemplate(c, cfg), c.Int("partitions"), cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return nil, err
	}
	tcfg := redisstream.TrimConfig{
		Glob: tmpl.Glob(), Exclude: []string{c.String("dead-letter-stream")},
		Acked: acked, MaxLen: c.Int64("max-len"), Interval: c.Duration("trim-interval"),
	}
	if lease != nil {
		tcfg.Active = func() bool { return lease.Value() != "" }
	}
	tr, err := redisstream.NewTrimmer(client, tcfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if err := tr.Check(c.Context); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(c.Context)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := tr.Run(ctx); err != nil {
			// Check passed, so only a refused permission is expected to
			// be final here, logged once with its fix; the relay goes on,
			// since trimming guards memory, not correctness.
			cfg.Logger.Error("stream trimmer stopped", logging.KeyError, err.Error(), logging.KeyHint, outbox.HintOf(err))
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
