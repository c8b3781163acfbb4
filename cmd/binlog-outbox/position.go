package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

func positionCommand() *cli.Command {
	flags := []cli.Flag{positionKeyFlag()}
	return &cli.Command{
		Name:  "position",
		Usage: "show, set or reset the binlog position stored in Redis",
		Description: "The position is where binlog mode resumes. Stop the relay before set or reset: a running relay\n" +
			"notices that its position was changed under it and stops (it is fenced) rather than append twice.\n" +
			"With --redis-cluster, show sums up the position of every hash slot too, and set and reset delete them\n" +
			"(on every master): the position key alone then says where the relay resumes.",
		Subcommands: []*cli.Command{
			{
				Name:   "show",
				Usage:  "print the stored position",
				Flags:  flags,
				Action: positionShow,
			},
			{
				Name:  "set",
				Usage: "store a position: --start-from now, earliest, <file>:<offset> or a GTID set",
				Description: "now skips everything not yet relayed; earliest re-reads all binlog the server has (consumers\n" +
					"deduplicate by message_id); <file>:<offset> must be the start of a transaction.",
				Flags:  append(flags, startFromFlag()),
				Action: positionSet,
			},
			{
				Name:   "reset",
				Usage:  "delete the stored position: the next run starts where --start-from says",
				Flags:  flags,
				Action: positionReset,
			},
		},
	}
}

func positionShow(c *cli.Context) error {
	cfg, sink, client, err := positionSink(c)
	if err != nil {
		return err
	}
	defer client.Close()
	var raw []byte
	var slots *statusSlots
	var warnings []string
	if cfg.RedisCluster != nil {
		// Read as is, not as Sink.Position judges it: show must also show
		// the slot positions the relay would refuse.
		cp, err := redisstream.ReadClusterPositions(c.Context, client, sink.PositionKey())
		if err != nil {
			return err
		}
		raw = cp.Base
		slots, warnings = slotsStatus(cp, nil)
	} else if raw, err = sink.Position(c.Context); err != nil {
		return err
	}
	var b strings.Builder
	if raw == nil {
		fmt.Fprintf(&b, "no position stored at %s: the next run starts at --start-from\n", sink.PositionKey())
	} else {
		pos, err := position.Decode(raw)
		if err != nil {
			return fmt.Errorf("stored position at %s: %w", sink.PositionKey(), err)
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, raw, "", "  ")
		fmt.Fprintf(&b, "%s: %s (written %s ago)\n%s\n", sink.PositionKey(), pos, time.Since(pos.UpdatedAt).Round(time.Second), pretty.String())
	}
	if slots != nil {
		slotsText(&b, slots)
	}
	for _, w := range warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	_, err = io.WriteString(c.App.Writer, b.String())
	return err
}

func positionSet(c *cli.Context) error {
	start, err := position.ParseStart(c.String("start-from"))
	if err != nil {
		return err
	}
	cfg, sink, client, err := positionSink(c)
	if err != nil {
		return err
	}
	defer client.Close()
	db, err := sql.Open("mysql", cfg.DSN())
	if err != nil {
		return fmt.Errorf("open mysql: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	srv, err := mysqlserver.Detect(ctx, db)
	if err != nil {
		return fmt.Errorf("connect to mysql: %w", err)
	}
	reader, err := newReader(c, cfg, srv, db, sink, nil, nil, nil, start, nil, nil)
	if err != nil {
		return err
	}
	raw, err := reader.StartPosition(ctx, start)
	if err != nil {
		return err
	}
	if err := sink.SetPosition(ctx, raw); err != nil {
		return err
	}
	b, _ := position.Decode(raw)
	fmt.Fprintf(c.App.Writer, "stored %s at %s\n", b, sink.PositionKey())
	if err := prepareSwitch(ctx, c.App.Writer, client, db, cfg, mode.Binlog); err != nil {
		return err
	}
	if cfg.RedisCluster != nil {
		// After the position key, which fences a running relay's next
		// store: a stop in between leaves slots that the new position may
		// be before, and those skip only what they hold.
		n, err := redisstream.DeleteSlotPositions(ctx, client, sink.PositionKey())
		if err != nil {
			return outbox.WithHint(fmt.Errorf("position set: stored the position at %s, but deleting the slot positions failed: %w", sink.PositionKey(), err),
				"run position set again before starting the relay: slots left ahead of the new position would skip what they hold")
		}
		fmt.Fprintf(c.App.Writer, "deleted %d hash slot positions (%s:{...}) on every master: every slot resumes from the new position\n", n, sink.PositionKey())
	}
	return nil
}

func positionReset(c *cli.Context) error {
	cfg, sink, client, err := positionSink(c)
	if err != nil {
		return err
	}
	defer client.Close()
	var raw []byte
	if cfg.RedisCluster != nil {
		// The slot positions before the position key: a stop in between
		// leaves the key without slots, from which the relay resumes,
		// rather than slots without a key, which it refuses. Read as is:
		// reset is what repairs a position the relay refuses.
		cp, err := redisstream.ReadClusterPositions(c.Context, client, sink.PositionKey())
		if err != nil {
			return err
		}
		raw = cp.Base
		n, err := redisstream.DeleteSlotPositions(c.Context, client, sink.PositionKey())
		if err != nil {
			return fmt.Errorf("position reset: %w", err)
		}
		fmt.Fprintf(c.App.Writer, "deleted %d hash slot positions (%s:{...}) on every master\n", n, sink.PositionKey())
	} else if raw, err = sink.Position(c.Context); err != nil {
		return err
	}
	if err := sink.DeletePosition(c.Context); err != nil {
		return err
	}
	if raw == nil {
		fmt.Fprintf(c.App.Writer, "no position was stored at %s\n", sink.PositionKey())
		return nil
	}
	fmt.Fprintf(c.App.Writer, "deleted the position at %s; it was: %s\n", sink.PositionKey(), raw)
	return nil
}

// positionSink loads the configuration and opens the Redis sink that holds
// the position, for the position commands; the caller closes the client.
func positionSink(c *cli.Context) (config, *redisstream.Sink, redis.UniversalClient, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return config{}, nil, nil, err
	}
	if err := requirePositionKey(c, cfg); err != nil {
		return config{}, nil, nil, err
	}
	if c.String("position-key") == "" {
		// The default key embeds the table's name as the server stores
		// it, as run builds it.
		db, err := sql.Open("mysql", cfg.DSN())
		if err != nil {
			return config{}, nil, nil, fmt.Errorf("open mysql: %w", err)
		}
		err = resolveTable(c.Context, &cfg, db)
		db.Close()
		if err != nil {
			return config{}, nil, nil, err
		}
	}
	client := cfg.redisClient()
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: positionKey(c, cfg), Cluster: cfg.RedisCluster != nil})
	if err != nil {
		client.Close()
		return config{}, nil, nil, err
	}
	return cfg, sink, client, nil
}
