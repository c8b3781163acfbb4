package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

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
			"notices that its position was changed under it and stops (it is fenced) rather than append twice.",
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
	_, sink, closeFn, err := positionSink(c)
	if err != nil {
		return err
	}
	defer closeFn()
	raw, err := sink.Position(c.Context)
	if err != nil {
		return err
	}
	if raw == nil {
		fmt.Fprintf(c.App.Writer, "no position stored at %s: the next run starts at --start-from\n", sink.PositionKey())
		return nil
	}
	b, err := position.Decode(raw)
	if err != nil {
		return fmt.Errorf("stored position at %s: %w", sink.PositionKey(), err)
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, raw, "", "  ")
	fmt.Fprintf(c.App.Writer, "%s: %s (written %s ago)\n%s\n", sink.PositionKey(), b, time.Since(b.UpdatedAt).Round(time.Second), pretty.String())
	return nil
}

func positionSet(c *cli.Context) error {
	start, err := position.ParseStart(c.String("start-from"))
	if err != nil {
		return err
	}
	cfg, sink, closeFn, err := positionSink(c)
	if err != nil {
		return err
	}
	defer closeFn()
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
	reader, err := newReader(c, cfg, srv, db, sink, nil, nil, nil, start, nil)
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
	return nil
}

func positionReset(c *cli.Context) error {
	_, sink, closeFn, err := positionSink(c)
	if err != nil {
		return err
	}
	defer closeFn()
	raw, err := sink.Position(c.Context)
	if err != nil {
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
// the position, for the position commands.
func positionSink(c *cli.Context) (config, *redisstream.Sink, func(), error) {
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
	client := cfg.Redis.NewClient(redisstream.DefaultTimeout)
	sink, err := redisstream.New(client, redisstream.Config{PositionKey: positionKey(c, cfg)})
	if err != nil {
		client.Close()
		return config{}, nil, nil, err
	}
	return cfg, sink, func() { client.Close() }, nil
}
