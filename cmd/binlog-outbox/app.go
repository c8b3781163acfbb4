package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/exitcode"
	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/settings"
)

// Exit codes (package exitcode), which the tests compare with.
const (
	exitOK      = exitcode.OK
	exitFailure = exitcode.Failure
	exitUsage   = exitcode.Usage
)

// NewApp builds the command-line application. Tests drive it in-process, with
// Writer and ErrWriter replaced.
func NewApp() *cli.App {
	app := &cli.App{
		Name:    "binlog-outbox",
		Usage:   "relay rows of a MySQL/MariaDB outbox table to Redis Streams",
		Version: versionString(),
		Flags:   globalFlags(),
		// Commands lists the subcommands; add new ones here.
		Commands: []*cli.Command{
			runCommand(),
			checkCommand(),
			positionCommand(),
			markAppendedCommand(),
			verifyCommand(),
			repairCommand(),
			statusCommand(),
			cleanupCommand(),
			deadLettersCommand(),
			backfillCommand(),
			schemaCommand(),
			versionCommand(),
		},
		Writer:    os.Stdout,
		ErrWriter: os.Stderr,
		// main maps errors to exit codes; cli must not exit by itself, or
		// tests driving the app in-process would end.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError{outbox.WithHint(fmt.Errorf("unknown command %q", c.Args().First()), "binlog-outbox --help lists the commands")}
			}
			return cli.ShowAppHelp(c)
		},
	}
	app.OnUsageError = onUsageError
	setUsageErrorHandler(app.Commands)
	addGlobalFlags(app.Commands)
	nameFlagsOnce(app.Commands)
	return app
}

// namedFlag is a flag whose names are worked out once. urfave/cli asks every
// flag of a command for its names each time it looks one flag up (IsSet,
// which it calls for every flag at each run), and cli.FlagNames builds them
// anew through a regexp each time: that was most of the CPU of an in-process
// run under the race detector. A global flag needs no wrapper
// (globalFlag.Names).
type namedFlag struct {
	parsedFlag
	names []string
}

// Names implements cli.Flag.
func (f namedFlag) Names() []string { return f.names }

// IsSliceFlag implements cli.DocGenerationSliceFlag as the flag does.
func (f namedFlag) IsSliceFlag() bool {
	s, ok := f.parsedFlag.(cli.DocGenerationSliceFlag)
	return ok && s.IsSliceFlag()
}

// RunAction implements cli.ActionableFlag as the flag does.
func (f namedFlag) RunAction(c *cli.Context) error {
	if a, ok := f.parsedFlag.(cli.ActionableFlag); ok {
		return a.RunAction(c)
	}
	return nil
}

// nameOnce returns flags with each one's names worked out once (namedFlag).
func nameOnce(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		if p, ok := f.(parsedFlag); ok && !isGlobal(f) {
			f = namedFlag{parsedFlag: p, names: p.Names()}
		}
		out[i] = f
	}
	return out
}

func isGlobal(f cli.Flag) bool {
	_, ok := f.(globalFlag)
	return ok
}

func nameFlagsOnce(cmds []*cli.Command) {
	for _, c := range cmds {
		c.Flags = nameOnce(c.Flags)
		nameFlagsOnce(c.Subcommands)
	}
}

// addGlobalFlags gives every command the global flags too, so that
// `binlog-outbox run --mysql-dsn …` works as well as `binlog-outbox
// --mysql-dsn … run` (commandLine reads a global flag from wherever it
// stands), and has it check its flags before it runs (validateFlags).
func addGlobalFlags(cmds []*cli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 {
			addGlobalFlags(c.Subcommands)
			continue
		}
		c.Flags = append(c.Flags, globalFlags()...)
		c.Before = validateFlags
	}
}

// isGlobalFlag reports whether name is one of the global flags.
func isGlobalFlag(name string) bool {
	for _, f := range globalFlags() {
		if f.Names()[0] == name {
			return true
		}
	}
	return false
}

// usageError marks a command line that cannot be run as given; it exits 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usageError{fmt.Errorf("incorrect usage: %w (see --help)", err)}
}

func setUsageErrorHandler(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrorHandler(c.Subcommands)
	}
}

// reportError prints err and, on a line of its own, its hint to w and returns
// the exit code: 0 for nil, 2 for usage and configuration errors, 1 for
// everything else.
func reportError(w io.Writer, err error) int {
	// Every command meets a refused login first; its fix is one for all.
	err = mysqlserver.WithLoginHint(err)
	var ue usageError
	if errors.As(err, &ue) && outbox.HintOf(err) == "" {
		// The flag's message says what it wants; --help says the rest.
		err = outbox.WithHint(err, "the command's --help lists its flags, each with what it takes and its default")
	}
	return exitcode.Report(w, err, func(err error) bool {
		return errors.As(err, &ue)
	})
}

// globalFlag is the flag of a global setting. urfave/cli does not read its
// environment variable, which it would take for a flag given on the command
// line: settings.Resolve reads it, below the command line. The variable is
// shown in --help and the flag reference only.
type globalFlag struct {
	parsedFlag
	setting settings.Flag
}

// parsedFlag is what urfave/cli asks of a flag it parses and documents.
type parsedFlag interface {
	cli.DocGenerationFlag
	cli.CategorizableFlag
	cli.RequiredFlag
}

// Names implements cli.Flag without cli.FlagNames's regexp (namedFlag): a
// setting's name is its flag's only name.
func (f globalFlag) Names() []string { return []string{f.setting.Name} }

// GetEnvVars implements cli.DocGenerationFlag.
func (f globalFlag) GetEnvVars() []string { return []string{f.setting.Env} }

// GetDefaultText implements cli.DocGenerationFlag: the default, never a
// value from the environment (a DSN, password and all).
func (f globalFlag) GetDefaultText() string { return f.setting.DefaultText() }

// IsSliceFlag implements cli.DocGenerationSliceFlag.
func (f globalFlag) IsSliceFlag() bool { return f.setting.Kind == settings.List }

// String renders the flag for --help, with the methods above.
func (f globalFlag) String() string { return cli.FlagStringer(f) }

func globalFlags() []cli.Flag {
	var out []cli.Flag
	for _, s := range settings.Flags() {
		var f parsedFlag
		switch s.Kind {
		case settings.List:
			f = &cli.StringSliceFlag{Name: s.Name, Usage: s.Usage}
		case settings.Uint:
			f = &cli.UintFlag{Name: s.Name, Usage: s.Usage}
		case settings.Bool:
			f = &cli.BoolFlag{Name: s.Name, Usage: s.Usage}
		default:
			f = &cli.StringFlag{Name: s.Name, Usage: s.Usage}
		}
		out = append(out, globalFlag{parsedFlag: f, setting: s})
	}
	return out
}

// setFlags is the names of the flags given to ctx's own command, on its
// command line or in their environment variables. Context.IsSet of a flag
// not given walks every flag's names, each through a regexp: asked of every
// flag, that is most of a command's start-up under the race detector.
func setFlags(ctx *cli.Context) map[string]bool {
	set := map[string]bool{}
	for _, name := range ctx.LocalFlagNames() {
		set[name] = true
	}
	return set
}

// commandLine collects the global flags given on the command line, before
// or after the command; given at both places, the one after wins.
func commandLine(c *cli.Context) map[string][]string {
	given := map[string][]string{}
	lineage := c.Lineage()
	set := make([]map[string]bool, len(lineage))
	for i, ctx := range lineage {
		set[i] = setFlags(ctx)
	}
	for _, f := range settings.Flags() {
		for i, ctx := range lineage {
			if !set[i][f.Name] {
				continue
			}
			switch f.Kind {
			case settings.List:
				given[f.Name] = ctx.StringSlice(f.Name)
			case settings.Uint:
				given[f.Name] = []string{strconv.FormatUint(uint64(ctx.Uint(f.Name)), 10)}
			case settings.Bool:
				given[f.Name] = []string{strconv.FormatBool(ctx.Bool(f.Name))}
			default:
				given[f.Name] = []string{ctx.String(f.Name)}
			}
			break
		}
	}
	return given
}

// config is the configuration every command shares (settings.Resolve).
type config = settings.Config

// commandName is the command as typed, "schema print" for a subcommand.
func commandName(c *cli.Context) string {
	if c.Command == nil {
		return c.App.Name
	}
	return strings.TrimPrefix(c.Command.HelpName, c.App.Name+" ")
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

// resolveConfig resolves the global settings of the command of c.
func resolveConfig(c *cli.Context, oneTable, noMySQL bool) (config, error) {
	return settings.Resolve(settings.Input{
		CommandLine: commandLine(c), LookupEnv: os.LookupEnv, LogWriter: c.App.ErrWriter,
		Command: commandName(c), OneTable: oneTable, NoMySQL: noMySQL, ClusterOK: settings.KnowsCluster(commandPath(c)),
		PositionKey: c.String("position-key"), Version: versionString(),
	})
}

// loadConfig reads the global flags of a command that connects to MySQL.
func loadConfig(c *cli.Context) (config, error) { return resolveConfig(c, false, false) }

// loadOneTableConfig is loadConfig for a command that works on one table.
func loadOneTableConfig(c *cli.Context) (config, error) { return resolveConfig(c, true, false) }

// loadTableConfig reads the global flags of a command that only needs the
// table and its mapping (schema print): it works without a DSN.
func loadTableConfig(c *cli.Context) (config, error) { return resolveConfig(c, true, true) }

// report is a report of package admin, which prints as text or as JSON.
type report interface{ Text() string }

// printResult prints r as its text or, asJSON, as indented JSON.
func printResult(w io.Writer, r report, asJSON bool) error {
	if asJSON {
		return printJSON(w, r)
	}
	_, err := io.WriteString(w, r.Text())
	return err
}

// printJSON prints v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
