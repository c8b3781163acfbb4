package redisstream

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// ScanStreams lists the streams whose keys match glob (SCAN MATCH glob TYPE
// stream), sorted, each once. On a Redis Cluster client it scans every
// master: SCAN sees the keys of one node only, so a scan through the
// cluster client would miss the streams of the other masters.
//
// A master that fails over during the scan makes it fail (connection
// refused, or a node that turned replica in the middle): the caller
// retries, as a list read from a stale slot map could miss the new
// master's streams without saying so.
func ScanStreams(ctx context.Context, client redis.UniversalClient, glob string) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.ScanType(ctx, 0, glob, scanCount, "stream").Iterator()
		var mine []string
		for iter.Next(ctx) {
			mine = append(mine, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, mine...)
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := scan(ctx, c); err != nil {
				return fmt.Errorf("on master %s: %w", c.Options().Addr, err)
			}
			return nil
		})
	} else {
		err = scan(ctx, client)
	}
	if err != nil {
		return nil, fmt.Errorf("scan streams %s: %w", glob, err)
	}
	// SCAN may return a key twice.
	sort.Strings(keys)
	return slices.Compact(keys), nil
}
