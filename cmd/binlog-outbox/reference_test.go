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

This page is generated from the code: after adding or changing a flag, run
` + "`" + regenerate + "`" + `. The test ` + "`TestReference_IsCurrent`" + ` fails while it is out of date.
`
)

// flagReference renders every flag of every command as Markdown tables, from
// the CLI itself, so that docs/reference.md cannot drift from the code.
func flagReference() string {
	app := NewApp()
	var b strings.Builder
	b.WriteString(referenceIntro)
	section := func(title string, flags []cli.Flag) {
		var rows strings.Builder
		for _, f := range flags {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok || f.Names()[0] == "help" || (title != globalTitle && isGlobalFlag(f.Names()[0])) {
				continue
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
			fmt.Fprintf(&rows, "| `--%s` | %s | %s | %s |\n", f.Names()[0], env, def, strings.ReplaceAll(df.GetUsage(), "|", "\\|"))
		}
		if rows.Len() == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n\n| flag | environment variable | default | meaning |\n|---|---|---|---|\n%s", title, rows.String())
	}
	section(globalTitle, app.Flags)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		sorted := append([]*cli.Command(nil), cmds...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		for _, c := range sorted {
			if c.Hidden {
				continue
			}
			name := strings.TrimSpace(prefix + " " + c.Name)
			section("`binlog-outbox "+name+"`", c.Flags)
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return b.String()
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
