package main

import (
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/urfave/cli/v2"
)

// validateFlags refuses a value of a command's flag outside its range
// (relay.Ranges, relay.CheckLease). Every command runs it before its action, so that check
// refuses what run refuses, in the same words, before connecting anywhere.
func validateFlags(c *cli.Context) error {
	set := setFlags(c)
	for _, f := range c.Command.Flags {
		d, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		env := ""
		if vars := d.GetEnvVars(); len(vars) > 0 {
			env = vars[0]
		}
		name := f.Names()[0]
		if !set[name] {
			// A default is in range (TestValidateFlags_DefaultsPass); a
			// flag without one, such as backfill's --stream, is the
			// command's to ask for, in its own words.
			continue
		}
		if err := relay.CheckFlag(name, c.Value(name), env, d.GetDefaultText()); err != nil {
			return err
		}
	}
	if commandFlag(c.Command, "lease-ttl") != nil {
		return relay.CheckLease(c.Duration("lease-ttl"), c.Duration("lease-renew"))
	}
	return nil
}

// commandFlag is the command's flag of that name, nil if it has none.
func commandFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		if f.Names()[0] == name {
			return f
		}
	}
	return nil
}
