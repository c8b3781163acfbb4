package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// versionString is the -X main.version value, or the module version when the
// binary was built with go install module@version.
func versionString() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// commit returns the VCS revision the binary was built from, with "-dirty"
// for uncommitted changes, or "unknown" (e.g. with -buildvcs=false).
func commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + dirty
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the Go version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "binlog-outbox %s\ncommit: %s\ngo: %s\n", versionString(), commit(), runtime.Version())
			return err
		},
	}
}
