package redisadmin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
	"github.com/redis/go-redis/v9"
)

// BackfillProgress returns the last outbox id a backfill stored under key,
// 0 when it has stored none.
func BackfillProgress(ctx context.Context, client redis.UniversalClient, key string) (uint64, error) {
	s, err := client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", key, redisconn.Classify(err))
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, outbox.WithHint(fmt.Errorf("%w: backfill progress %s holds %q, not an outbox id", outbox.ErrConfig, key, s),
			"delete the key to start this backfill again from its beginning, or fix its value")
	}
	return id, nil
}
