package relay

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// trimming is what the preflight checks Redis against when --trim or
// --max-len trims: the trimmer's settings over every key; nil when nothing
// is trimmed or --trim is refused (Options.Validate reports that).
func trimming(o Options) *redisstream.TrimConfig {
	acked, err := ParseTrim(o.Trim)
	if err != nil || (!acked && o.MaxLen == 0) {
		return nil
	}
	return &redisstream.TrimConfig{Glob: "*", Acked: acked, MaxLen: o.MaxLen, Interval: o.TrimInterval}
}

// startTrimmer starts the stream trimmer of --trim and --max-len, when one
// is set, after checking that Redis can trim; stop ends it and waits. With
// a lease (--lease), only its holder trims: a standby's passes are skipped.
func startTrimmer(ctx context.Context, o Options, cfg settings.Config, client redis.UniversalClient, lease *redisstream.Lease) (stop func(), err error) {
	acked, err := ParseTrim(o.Trim)
	if err != nil {
		return nil, err
	}
	if !acked && o.MaxLen == 0 {
		return func() {}, nil
	}
	tmpl, err := entry.ParseTemplate(StreamTemplate(cfg, o.Stream), o.Partitions, cfg.Mapping.Has(schema.ColAggregateType))
	if err != nil {
		return nil, err
	}
	tcfg := redisstream.TrimConfig{
		Glob: tmpl.Glob(), Exclude: []string{o.DeadLetterStream},
		Acked: acked, MaxLen: o.MaxLen, Interval: o.TrimInterval,
	}
	if lease != nil {
		tcfg.Active = func() bool { return lease.Value() != "" }
	}
	tr, err := redisstream.NewTrimmer(client, tcfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if err := tr.Check(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
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
