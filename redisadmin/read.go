// Package redisadmin reads what the relay wrote to Redis, for the
// operator's commands, metrics and the relay's start: the streams a
// template names and their entries (read.go), consumer groups' health
// (grouphealth.go), dead letters (deadletters.go), a backfill's progress
// (backfill.go), a Redis Cluster's per-slot positions
// (clusterpositions.go), and the relays' records (record.go: what the relay
// of each position is, which it writes at start and preflight and the
// commands check against). It writes only the records and what an operator
// asks for (purging dead letters). Appending is redisstream's job;
// redisadmin reads what redisstream wrote, by the names of redisstream and
// entry.
package redisadmin

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/entry"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// ScanDelayedSets lists, as redisconn.ScanStreams does, the sorted sets of
// delayed symfony-doctrine messages (entry.DelayedSetSuffix) of the streams
// glob matches.
func ScanDelayedSets(ctx context.Context, client redis.UniversalClient, glob string) ([]string, error) {
	return redisconn.ScanType(ctx, client, glob+entry.DelayedSetSuffix, "zset", "delayed sets")
}

// ListStreams lists the streams whose names match glob (on every master of a
// Redis Cluster, redisconn.ScanStreams), and the dead-letter stream deadLetter when it
// exists, sorted: the streams a relay with that template writes.
func ListStreams(ctx context.Context, client redis.UniversalClient, glob, deadLetter string) ([]string, error) {
	keys, err := redisconn.ScanStreams(ctx, client, glob)
	if err != nil {
		return nil, err
	}
	typ, err := client.Type(ctx, deadLetter).Result()
	if err != nil {
		return nil, fmt.Errorf("TYPE %s: %w", deadLetter, redisconn.Classify(err))
	}
	if typ == "stream" && !slices.Contains(keys, deadLetter) {
		keys = append(keys, deadLetter)
		sort.Strings(keys)
	}
	return keys, nil
}

// RangeEntries calls fn with every entry of stream key, oldest first, page
// entries per XRANGE. Entries carry their payloads, which XRANGE cannot
// leave out: a small page bounds the memory. An error of fn stops the walk
// and is returned as is.
func RangeEntries(ctx context.Context, client redis.UniversalClient, key string, page int64, fn func([]redis.XMessage) error) error {
	start := "-"
	for {
		msgs, err := client.XRangeN(ctx, key, start, "+", page).Result()
		if err != nil {
			return fmt.Errorf("XRANGE %s: %w", key, redisconn.Classify(err))
		}
		if err := fn(msgs); err != nil {
			return err
		}
		if int64(len(msgs)) < page {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}
