package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateReference = flag.Bool("update", false, "rewrite docs/reference.md from the CLI's flags")

const (
	referencePath  = "../../docs/reference.md"
	regenerate     = "go test ./cmd/binlog-outbox -run TestReference -update"
	globalTitle    = "Global flags (before or after the command)"
	referenceIntro = `# Flag reference

<!-- Generated from the CLI by ` + "`" + regenerate + "`" + `; do not edit by hand. -->

Every flag of every command, as ` + "`binlog-outbox <command> --help`" + ` gives it. A flag with an
environment variable reads it when the flag is not given (a repeatable flag takes a
comma-separated list there).

One precedence holds for every setting: the command line (before or after the command; given at
both places, the one after it wins), then the environment variable (an empty one counts as unset),
then the ` + "`.env`" + ` of ` + "`--laravel-env`" + ` (for the MySQL connection and the Redis URL only), then the
default. A value outside a flag's range is refused with exit code 2, by ` + "`check`" + ` as by ` + "`run`" + `,
naming the flag and its range.
Passwords in DSNs and URLs are never printed (logs, errors, ` + "`--help`" + `); keep them in files
with ` + "`--mysql-password-file`" + ` and ` + "`--redis-password-file`" + `
([connections.md](connections.md#secrets)).
`
)

// flagReference renders every flag of every command as Markdown tables, from
// the CLI itself, so that docs/reference.md cannot drift from the code. A
// flag another command shares with run, word for word, is named, not
// described again: the page is read for one command at a time.
func flagReference() string {
	app := NewApp()
	var b strings.Builder
	b.WriteString(referenceIntro)
	runRows := map[string]string{}
	for _, c := range app.Commands {
		if c.Name == "run" {
			for _, f := range c.Flags {
				if row, ok := flagRow(f); ok {
					runRows[f.Names()[0]] = row
				}
			}
		}
	}
	section := func(title string, flags []cli.Flag, isRun bool) {
		var rows strings.Builder
		var shared []string
		for _, f := range flags {
			name := f.Names()[0]
			if name == "help" || (title != globalTitle && isGlobalFlag(name)) {
				continue
			}
			row, ok := flagRow(f)
			if !ok {
				continue
			}
			if !isRun && runRows[name] == row {
				shared = append(shared, "`--"+name+"`")
				continue
			}
			rows.WriteString(row)
		}
		if rows.Len() == 0 && len(shared) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n", title)
		if rows.Len() > 0 {
			fmt.Fprintf(&b, "\n| flag | environment variable | default | meaning |\n|---|---|---|---|\n%s", rows.String())
		}
		if len(shared) > 0 {
			fmt.Fprintf(&b, "\nAs for [`run`](#binlog-outbox-run): %s.\n", strings.Join(shared, ", "))
		}
	}
	section(globalTitle, app.Flags, true)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		sorted := append([]*cli.Command(nil), cmds...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		for _, c := range sorted {
			if c.Hidden {
				continue
			}
			name := strings.TrimSpace(prefix + " " + c.Name)
			section("`binlog-outbox "+name+"`", c.Flags, name == "run")
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return b.String()
}

// flagRow is one flag's table row; ok is false for flags without docs.
func flagRow(f cli.Flag) (row string, ok bool) {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return "", false
	}
	env := ""
	if ev, ok := f.(interface{ GetEnvVars() []string }); ok && len(ev.GetEnvVars()) > 0 {
		env = "`" + strings.Join(ev.GetEnvVars(), "`, `") + "`"
	}
	def := df.GetDefaultText()
	if def == "" {
		def = df.GetValue()
	}
	def = strings.Trim(def, `"`)
	if def != "" {
		def = "`" + def + "`"
	}
	return fmt.Sprintf("| `--%s` | %s | %s | %s |\n", f.Names()[0], env, def, strings.ReplaceAll(df.GetUsage(), "|", "\\|")), true
}

// TestReference_IsCurrent fails when a flag was added, removed or reworded
// without regenerating docs/reference.md; -update rewrites the page.
func TestReference_IsCurrent(t *testing.T) {
	want := flagReference()
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("read %s: %v (create it with: %s)", referencePath, err, regenerate)
	}
	if got := string(raw); got != want {
		t.Fatalf("docs/reference.md is out of date with the CLI's flags (first difference at line %d); regenerate it with: %s",
			firstDiffLine(got, want), regenerate)
	}
}

// firstDiffLine is the 1-based number of the first line where got and want
// differ, so the failure points at the flag that drifted.
func firstDiffLine(got, want string) int {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return i + 1
		}
	}
	return min(len(g), len(w)) + 1
}
