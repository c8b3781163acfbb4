package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// ScanStreams lists the streams whose names match glob: with SCAN TYPE stream
// on a standalone Redis, and on every master of a Redis Cluster. SCAN sees
// the keys of one node only, so on a cluster a stream missed would be a
// stream whose rows verify reports missing and mark-appended leaves unsent
// (poll mode would append them again): the listing is refused unless every
// slot has a master, every such master was scanned, and the slot map was the
// same before and after.
func ScanStreams(ctx context.Context, client redis.UniversalClient, glob string) ([]string, error) {
	return scanKeys(ctx, client, glob, "stream", "streams")
}

// ScanKeys lists, as ScanStreams does, the keys of any type whose names
// match glob.
func ScanKeys(ctx context.Context, client redis.UniversalClient, glob string) ([]string, error) {
	return scanKeys(ctx, client, glob, "", "keys")
}

// ScanType lists, as ScanStreams does, the keys of type typ whose names
// match glob; what names them in errors ("delayed sets").
func ScanType(ctx context.Context, client redis.UniversalClient, glob, typ, what string) ([]string, error) {
	return scanKeys(ctx, client, glob, typ, what)
}

// scanKeys lists the keys of type typ (what names them in errors) whose
// names match glob, on every master of a cluster (ScanStreams).
func scanKeys(ctx context.Context, client redis.UniversalClient, glob, typ, what string) ([]string, error) {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		var keys []string
		iter := client.ScanType(ctx, 0, glob, 1000, typ).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("SCAN for %s %s: %w", what, glob, Classify(err))
		}
		return dedupSorted(keys), nil
	}
	before, err := slotMasters(ctx, cc)
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		keys    []string
		scanned = map[string]bool{}
	)
	err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		var mine []string
		iter := m.ScanType(ctx, 0, glob, 1000, typ).Iterator()
		for iter.Next(ctx) {
			mine = append(mine, iter.Val())
		}
		if err := iter.Err(); err != nil {
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				return outbox.WithHint(fmt.Errorf("SCAN for %s %s on master %s: %w", what, glob, m.Options().Addr, err),
					"the master is unreachable: wait until the cluster replaced it (its replica takes over after cluster-node-timeout; redis-cli --cluster check <node>), then run the command again")
			}
			return fmt.Errorf("SCAN for %s %s on master %s: %w", what, glob, m.Options().Addr, Classify(err))
		}
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, mine...)
		scanned[m.Options().Addr] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	after, err := slotMasters(ctx, cc)
	if err != nil {
		return nil, err
	}
	if before != after {
		return nil, outbox.WithHint(fmt.Errorf("list the %s %s: the cluster's slot map changed while its masters were scanned (a failover or a resharding), so a key may have been missed", what, glob),
			"run the command again once the cluster is stable (redis-cli --cluster check <node>)")
	}
	for _, addr := range strings.Split(before, ",") {
		addr, _, _ = strings.Cut(addr, "=")
		if !scannedAs(addr, scanned) {
			return nil, outbox.WithHint(fmt.Errorf("list the %s %s: master %s owns slots but was not scanned: the client's view of the cluster is behind it", what, glob, addr),
				"run the command again in a few seconds (the client reads the slot map every second)")
		}
	}
	return dedupSorted(keys), nil
}

// slotMasters returns the master of every slot range as the cluster reports
// it (CLUSTER SLOTS), as "addr=start-end" items in order, or an error when a
// slot has no master: its streams could not be listed.
func slotMasters(ctx context.Context, cc *redis.ClusterClient) (string, error) {
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("read the cluster's slot map (CLUSTER SLOTS): %w", Classify(err))
	}
	covered := 0
	items := make([]string, 0, len(ranges))
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		covered += int(r.End-r.Start) + 1
		items = append(items, fmt.Sprintf("%s=%d-%d", r.Nodes[0].Addr, r.Start, r.End))
	}
	if covered < clusterSlots {
		return "", outbox.WithHint(fmt.Errorf("list the streams: %d of the cluster's %d hash slots have no master, so their streams cannot be read", clusterSlots-covered, clusterSlots),
			"wait until the cluster has a master for every slot (redis-cli --cluster check <node>), then run the command again")
	}
	sort.Strings(items)
	return strings.Join(items, ","), nil
}

// scannedAs reports whether the master CLUSTER SLOTS names by addr is among
// the scanned ones, which go-redis names as it dials them: it replaces a
// loopback host with the host the client reached the cluster by, and a port
// 0 (a TLS-only cluster) with the port it used.
func scannedAs(addr string, scanned map[string]bool) bool {
	if scanned[addr] {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	for s := range scanned {
		sh, sp, err := net.SplitHostPort(s)
		if err != nil {
			continue
		}
		if (ip != nil && ip.IsLoopback() && sp == port) || (port == "0" && sh == host) {
			return true
		}
	}
	return false
}

func dedupSorted(keys []string) []string {
	sort.Strings(keys)
	return slices.Compact(keys)
}
