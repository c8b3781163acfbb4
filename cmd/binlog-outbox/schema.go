package main

import (
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/urfave/cli/v2"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

func schemaCommand() *cli.Command {
	return &cli.Command{
		Name:  "schema",
		Usage: "print or create the outbox table",
		Subcommands: []*cli.Command{
			{
				Name:  "print",
				Usage: "print the CREATE TABLE statement or a Laravel migration for the outbox table",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "format", Value: "sql", Usage: "sql or laravel"},
				},
				Action: schemaPrint,
			},
			{
				Name:   "apply",
				Usage:  "create the outbox table in the DSN's database unless it exists, then validate it",
				Action: schemaApply,
			},
		},
	}
}

func schemaPrint(c *cli.Context) error {
	format := strings.ToLower(c.String("format"))
	cfg, err := loadTableConfig(c)
	if err != nil {
		return err
	}
	if err := cfg.OwnTable(); err != nil {
		return err
	}
	out := schema.CreateTableSQL(cfg.Table, cfg.Mapping) + ";\n"
	if format == "laravel" {
		out = schema.LaravelMigration(cfg.Table, cfg.Mapping)
	}
	_, err = fmt.Fprint(c.App.Writer, out)
	return err
}

func schemaApply(c *cli.Context) error {
	cfg, err := loadOneTableConfig(c)
	if err != nil {
		return err
	}
	if err := cfg.OwnTable(); err != nil {
		return err
	}
	connector, err := mysql.NewConnector(cfg.MySQL)
	if err != nil {
		return fmt.Errorf("schema apply: %w", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := schema.Apply(c.Context, db, cfg.Table, cfg.Mapping); err != nil {
		return fmt.Errorf("schema apply: %w", err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "table %s.%s is ready\n", cfg.Database, cfg.Table)
	return err
}
