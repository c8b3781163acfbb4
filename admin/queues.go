package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// laravelReservedSuffix is the sorted set of the jobs Laravel's workers
// hold (RedisQueue::pop moves a job there until it is done).
const laravelReservedSuffix = ":reserved"

// QueueStatus is a Laravel queue the relay pushes jobs to (--format
// laravel-queue or laravel-stream): what waits on it. Workers take jobs off
// Laravel's lists, so the streams' lengths and groups say nothing of them.
type QueueStatus struct {
	Key string `json:"key"`
	// Type is the queue key's: list (laravel-queue), stream
	// (laravel-stream), or none when only delayed or reserved jobs are left.
	Type string `json:"type"`
	// Waiting counts the jobs a worker can take now: the list's length,
	// or the stream's (XLEN, which keeps the entries workers read until
	// they are trimmed).
	Waiting int64 `json:"waiting"`
	// Delayed counts the jobs not due yet (<key>:delayed).
	Delayed int64 `json:"delayed"`
	// Reserved counts the jobs workers run now (<key>:reserved, Laravel's
	// Redis queue only).
	Reserved int64 `json:"reserved"`
}

// readQueues reads, and only reads, the Laravel queues under glob: each
// queue key with its delayed and reserved sets, the notify lists left out.
func readQueues(ctx context.Context, client redis.UniversalClient, glob string) ([]QueueStatus, error) {
	keys, err := redisconn.ScanKeys(ctx, client, glob)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var queues []string
	for _, k := range keys {
		for _, suffix := range []string{entry.LaravelDelayedSuffix, laravelReservedSuffix, entry.LaravelNotifySuffix} {
			k = strings.TrimSuffix(k, suffix)
		}
		queues = append(queues, k)
	}
	slices.Sort(queues)
	out := []QueueStatus{}
	for _, key := range slices.Compact(queues) {
		q := QueueStatus{Key: key}
		if q.Type, err = client.Type(ctx, key).Result(); err != nil {
			return nil, fmt.Errorf("status: TYPE %s: %w", key, redisconn.Classify(err))
		}
		switch q.Type {
		case "list":
			q.Waiting, err = client.LLen(ctx, key).Result()
		case "stream":
			q.Waiting, err = client.XLen(ctx, key).Result()
		case "none":
		default:
			continue // not a queue: check warns of such keys
		}
		if err != nil {
			return nil, fmt.Errorf("status: length of %s: %w", key, redisconn.Classify(err))
		}
		if q.Delayed, err = zcard(ctx, client, key+entry.LaravelDelayedSuffix); err != nil {
			return nil, err
		}
		if q.Reserved, err = zcard(ctx, client, key+laravelReservedSuffix); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// zcard is the size of the sorted set key, 0 when it is another type.
func zcard(ctx context.Context, client redis.UniversalClient, key string) (int64, error) {
	typ, err := client.Type(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("status: TYPE %s: %w", key, redisconn.Classify(err))
	}
	if typ != "zset" {
		return 0, nil
	}
	n, err := client.ZCard(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("status: ZCARD %s: %w", key, redisconn.Classify(err))
	}
	return n, nil
}
