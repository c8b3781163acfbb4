package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// clusterCommands are the commands that know Redis Cluster (by their path,
// e.g. "position show"): the others read keys (SCAN, the position) as one
// standalone Redis holds them. cleanup reads the position key, a lower
// bound of every slot's, and waits for the replicas (clusterGuard).
var clusterCommands = map[string]bool{
	"run": true, "check": true, "cleanup": true,
	"status": true, "verify": true, "mark-appended": true, "repair": true,
	"position show": true, "position set": true, "position reset": true,
	"dead-letters list": true, "dead-letters replay": true, "dead-letters purge": true,
}

// commandPath is the command's name after its parents', e.g. "position
// show" (urfave/cli v2's FullName gives the last name only).
func commandPath(c *cli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	return strings.Join(slices.Compact(names), " ")
}
