package settings

import (
	"fmt"
	"strconv"
	"strings"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Source says where a setting's value comes from, from the strongest to
// the weakest.
type Source int

// The sources of a value. The .env of --laravel-env is not among them: it
// gives the MySQL connection and the Redis URL only, where neither the
// command line nor the environment gives them (see Resolve).
const (
	// Unset: no source gives a value and there is no default.
	Unset Source = iota
	// Default is the setting's default.
	Default
	// Environment is the setting's environment variable.
	Environment
	// CommandLine is the flag, before or after the command.
	CommandLine
)

func (s Source) String() string {
	switch s {
	case Default:
		return "default"
	case Environment:
		return "environment"
	case CommandLine:
		return "command line"
	}
	return "unset"
}

// Value is one setting as resolved.
type Value struct {
	// Values are its values: one for a string, a number or a switch; any
	// number for a list.
	Values []string
	// Source is where they come from.
	Source Source
}

// First is the value of a setting that is not a list, "" for none.
func (v Value) First() string {
	if len(v.Values) == 0 {
		return ""
	}
	return v.Values[0]
}

// values are the settings by name.
type values map[string]Value

func (vs values) str(name string) string { return vs[name].First() }

func (vs values) list(name string) []string { return vs[name].Values }

// uint parses a Uint setting; Resolve checked that it parses.
func (vs values) uint(name string) uint64 {
	n, _ := strconv.ParseUint(vs.str(name), 0, 64)
	return n
}

func (vs values) bool(name string) bool {
	b, _ := strconv.ParseBool(vs.str(name))
	return b
}

// resolveValues applies the precedence to every global setting: the
// command line, else the environment, else the default.
func resolveValues(commandLine map[string][]string, lookupEnv func(string) (string, bool)) (values, error) {
	for name := range commandLine {
		if _, ok := lookup(name); !ok {
			return nil, fmt.Errorf("settings: %q is not a global setting", name)
		}
	}
	vs := values{}
	for _, f := range Flags() {
		v, err := resolveOne(f, commandLine, lookupEnv)
		if err != nil {
			return nil, err
		}
		vs[f.Name] = v
	}
	return vs, nil
}

func resolveOne(f Flag, commandLine map[string][]string, lookupEnv func(string) (string, bool)) (Value, error) {
	if given, ok := commandLine[f.Name]; ok {
		// urfave/cli parsed and checked the flag's type already. An empty
		// value would stand for the default without a word.
		if f.Default != nil && strings.Join(given, "") == "" {
			return Value{}, outbox.WithHint(fmt.Errorf("%w: --%s is empty", outbox.ErrConfig, f.Name),
				"give --%s a value, or leave it out for the default (%s)", f.Name, f.DefaultText())
		}
		return Value{Values: given, Source: CommandLine}, nil
	}
	if lookupEnv != nil {
		// An empty variable counts as unset, as a compose file's `VAR=`
		// means to leave it out.
		if raw, ok := lookupEnv(f.Env); ok && raw != "" {
			v, err := parseEnv(f, raw)
			return Value{Values: v, Source: Environment}, err
		}
	}
	if f.Default != nil {
		return Value{Values: f.Default, Source: Default}, nil
	}
	return Value{}, nil
}

// parseEnv reads an environment variable as its flag would read the value.
func parseEnv(f Flag, raw string) ([]string, error) {
	switch f.Kind {
	case List:
		var out []string
		for _, s := range strings.Split(raw, ",") {
			out = append(out, strings.TrimSpace(s))
		}
		return out, nil
	case Uint:
		if _, err := strconv.ParseUint(raw, 0, 64); err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s %q (--%s) is not a number", outbox.ErrConfig, f.Env, raw, f.Name),
				"set %s to a whole number, or unset it", f.Env)
		}
	case Bool:
		if _, err := strconv.ParseBool(raw); err != nil {
			return nil, outbox.WithHint(fmt.Errorf("%w: %s %q (--%s) is neither true nor false", outbox.ErrConfig, f.Env, raw, f.Name),
				"set %s to true or false, or unset it", f.Env)
		}
	}
	return []string{raw}, nil
}
