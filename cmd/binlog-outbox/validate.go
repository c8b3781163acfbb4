package main

import (
	"github.com/binlog-outbox/binlog-outbox/relay"
	"github.com/urfave/cli/v2"
)

// validateFlags refuses a value of a command's flag outside its range, by
// the one table of every command's flags (relay.Ranges). Every command runs
// it before its action, so that check refuses what run refuses, in the same
// words, before connecting anywhere; what run's flags say together is
// relay.Options.Validate's, which check reports as a requirement.
func validateFlags(c *cli.Context) error {
	set := setFlags(c)
	command := commandPath(c)
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
		if err := relay.CheckFlag(command, name, c.Value(name), env, d.GetDefaultText()); err != nil {
			return err
		}
	}
	return nil
}
