package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// replicatedPoll is how often the cluster guard reads the replicas'
// offsets again; a replica acknowledges its offset every second.
const replicatedPoll = 100 * time.Millisecond

// clusterGuard is what cleanup adds on a Redis Cluster to "the stored
// position passed the rows". The position key is written after every
// slot's script of a batch, so once it passed the snapshot's end, every
// event of the snapshot's rows was appended on the master of its slot. But
// a master that dies before its replica has those writes takes them with it
// (asynchronous replication), and the relay appends them again only when it
// next appends in that slot, later than cleanup reads the position key. So
// before deleting a round, cleanup also waits until every replica of every
// master has acknowledged what its master holds, and refuses when the slot
// map changed since the round began: the appends it relies on then survive
// any later failover, and none happened in between.
type clusterGuard struct {
	client *redis.ClusterClient
	// masters is the slot map as the round began (snapshotMasters).
	masters string
}

// begin records the slot map before the round's snapshot.
func (g *clusterGuard) begin(ctx context.Context) error {
	m, _, err := g.slotMap(ctx)
	g.masters = m
	return err
}

// slotMap reads CLUSTER NODES: a description of the masters that serve
// slots (id, address, config epoch, slots), and how many replicas (not
// failed) each master has, by address. The config epoch tells a failover
// and a failback apart from no failover: each promotion raises it.
func (g *clusterGuard) slotMap(ctx context.Context) (string, map[string]int, error) {
	text, err := g.client.ClusterNodes(ctx).Result()
	if err != nil {
		return "", nil, fmt.Errorf("read the cluster's nodes: %w", redisconn.Classify(err))
	}
	return parseClusterNodes(text)
}

// parseClusterNodes reads CLUSTER NODES lines: <id> <ip:port@cport[,host]>
// <flags> <master id or -> <ping-sent> <pong-recv> <config-epoch>
// <link-state> <slot> ...
func parseClusterNodes(text string) (string, map[string]int, error) {
	type node struct{ id, addr, desc string }
	var masters []node
	replicasOf := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return "", nil, fmt.Errorf("read the cluster's nodes: unexpected CLUSTER NODES line %q", line)
		}
		flags := "," + f[2] + ","
		if strings.Contains(flags, ",fail,") || strings.Contains(flags, ",noaddr,") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		switch {
		case strings.Contains(flags, ",master,") && len(f) > 8:
			masters = append(masters, node{id: f[0], addr: addr, desc: fmt.Sprintf("%s@%s epoch %s slots %s", f[0], addr, f[6], strings.Join(f[8:], ","))})
		case strings.Contains(flags, ",slave,"):
			replicasOf[f[3]]++
		}
	}
	replicas := map[string]int{}
	parts := make([]string, 0, len(masters))
	for _, m := range masters {
		replicas[m.addr] = replicasOf[m.id]
		parts = append(parts, m.desc)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; "), replicas, nil
}

// replicated waits, up to wait, until every replica of every master has
// acknowledged its master's replication offset as read at the start, and
// checks that the slot map is the one begin read. The error says which
// replica lags or what changed.
func (g *clusterGuard) replicated(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	now, replicas, err := g.slotMap(ctx)
	if err != nil {
		return err
	}
	if now != g.masters {
		return g.changed()
	}
	err = g.client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		want, ok := replicas[addr]
		if !ok {
			return g.changed()
		}
		var target int64 = -1
		for {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("INFO replication of master %s: %w", addr, redisconn.Classify(err))
			}
			rep := parseReplication(info)
			if rep.role != "master" {
				return g.changed()
			}
			if target < 0 {
				target = rep.offset
			}
			behind := rep.behind(target, want)
			if behind == "" {
				return nil
			}
			if time.Now().After(deadline) {
				return outbox.WithHint(fmt.Errorf("master %s: %s after --wait %s, so a failover could still lose appends the rows' events are in; the rows stay", addr, behind, wait),
					"see the replica's link (redis-cli -h <replica> INFO replication); once it is in sync, run cleanup again (or raise --wait)")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(replicatedPoll):
			}
		}
	})
	if err != nil {
		return err
	}
	// A failover while the replicas were read.
	if now, _, err = g.slotMap(ctx); err != nil {
		return err
	}
	if now != g.masters {
		return g.changed()
	}
	return nil
}

// changed is the refusal when the masters changed during a round.
func (g *clusterGuard) changed() error {
	return outbox.WithHint(errors.New("the cluster's masters changed while cleanup waited for the relay (a failover): a master that died may have lost appends it had not replicated yet, which the relay appends again only at its next append in that slot; the rows stay"),
		"run cleanup again in a while: the relay re-appends what a failover lost at its next append in each slot (docs/cleanup.md, cleanup on a Redis Cluster)")
}

// replication is what INFO replication says of a master and its replicas.
type replication struct {
	role   string
	offset int64
	// replicas maps each replica's address to its acknowledged offset;
	// online says which are in sync (state=online).
	replicas map[string]int64
	online   map[string]bool
}

// parseReplication reads the fields of INFO replication cleanup needs:
// role, master_repl_offset and the slaveN lines
// (ip=..,port=..,state=online,offset=..,lag=..).
func parseReplication(info string) replication {
	r := replication{replicas: map[string]int64{}, online: map[string]bool{}}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "role":
			r.role = v
		case k == "master_repl_offset":
			r.offset, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(k, "slave") && strings.Contains(v, "offset="):
			f := map[string]string{}
			for _, kv := range strings.Split(v, ",") {
				if a, b, ok := strings.Cut(kv, "="); ok {
					f[a] = b
				}
			}
			addr := f["ip"] + ":" + f["port"]
			off, err := strconv.ParseInt(f["offset"], 10, 64)
			if err != nil {
				off = -1
			}
			r.replicas[addr] = off
			r.online[addr] = f["state"] == "online"
		}
	}
	return r
}

// behind says how the replicas fall short of having acknowledged target
// ("" when they all have), want being how many replicas the slot map gives
// the master.
func (r replication) behind(target int64, want int) string {
	synced := 0
	var lagging []string
	for addr, off := range r.replicas {
		if r.online[addr] && off >= target {
			synced++
		} else {
			lagging = append(lagging, fmt.Sprintf("%s at offset %d", addr, off))
		}
	}
	if synced >= want {
		return ""
	}
	sort.Strings(lagging)
	if len(lagging) == 0 {
		return fmt.Sprintf("%d of its %d replicas are connected", len(r.replicas), want)
	}
	return fmt.Sprintf("replica %s has not acknowledged the master's offset %d", strings.Join(lagging, ", "), target)
}
