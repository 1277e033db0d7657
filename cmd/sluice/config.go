package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"

	"sluice/tomlpos"
)

// A mount's config file holds what its flags hold, under the flags' names:
//
//	source = "/srv/data"          # or mirrors = ["/a/data", "/b/data"]
//	mountpoint = "/mnt/data"
//	max-io = "128KiB"             # any mount flag: max-io, readahead,
//	cache-mode = "auto"           # cache, burst, max-wait, read-policy, ...
//
//	[[group]]
//	name = "tenants/a"
//	match = ["uid=1001", "comm=rsync"]   # rules, each as --group takes it
//	limits = "rbps=10MiB wbps=5MiB"      # as --limit takes it
//
// Flags on the command line override the file: a flag given there wins
// over the same key, and its --group rules are matched before the file's
// (first match decides), its --limit applied after the file's.

// configFlags are the mount flags a config file may not hold under their
// own name: it holds groups, limits and mirrors in its own form.
var configFlags = map[string]string{
	"config": "a config file cannot name another",
	"group":  "use [[group]] tables with match = [...]",
	"limit":  "use [[group]] tables with limits = \"...\"",
	"mirror": "use mirrors = [\"DIR\", ...]",
}

// config is a parsed config file.
type config struct {
	path, src  string
	source     string
	mountpoint string
	mirrors    []string
	groups     []string // --group values
	limits     []string // --limit values
	flags      []configFlag
	// lines maps a flag name or a group rule/limit value to its line, for
	// errors found once the values are checked.
	lines map[string]int
}

type configFlag struct {
	name, value string
	line        int
}

type configGroup struct {
	Name   string   `toml:"name"`
	Match  []string `toml:"match"`
	Limits string   `toml:"limits"`
}

// loadConfig reads and checks the structure of a config file for the
// mount flags fs; the values are checked as flags are, by apply.
func loadConfig(path string, fs *pflag.FlagSet) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %v", path, err)
	}
	c := &config{path: path, src: string(b), lines: map[string]int{}}
	var raw map[string]any
	md, err := toml.Decode(c.src, &raw)
	if err != nil {
		if pe, ok := err.(toml.ParseError); ok {
			if pe.LastKey != "" {
				return nil, fmt.Errorf("%s:%d: %s: %s", path, pe.Position.Line, pe.LastKey, pe.Message)
			}
			return nil, fmt.Errorf("%s:%d: %s", path, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	groups := false
	for _, k := range md.Keys() {
		if len(k) != 1 {
			continue // inside a table: handled with it
		}
		name := k[0]
		line := tomlpos.Line(c.src, k)
		if t := md.Type(name); t == "Hash" || t == "ArrayHash" {
			line = tomlpos.Line(c.src, toml.Key{name, "0"}) // its [table] header
		}
		errf := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s: %s", path, line, name, fmt.Sprintf(format, a...))
		}
		v := raw[name]
		switch name {
		case "source", "mountpoint":
			s, ok := v.(string)
			if !ok || s == "" {
				return nil, errf("want a directory, as a string, not %s", tomlType(v))
			}
			if name == "source" {
				c.source = s
			} else {
				c.mountpoint = s
			}
			continue
		case "mirrors":
			list, ok := v.([]any)
			for _, e := range list {
				s, isStr := e.(string)
				if !isStr || s == "" {
					ok = false
					break
				}
				c.mirrors = append(c.mirrors, s)
			}
			if !ok || len(list) < 2 {
				return nil, errf("want two directories or more, as a list of strings, not %s", tomlType(v))
			}
			continue
		case "group":
			if groups {
				continue // the keys list the array once per table
			}
			groups = true
			if err := c.loadGroups(md, v); err != nil {
				return nil, err
			}
			continue
		}
		if why, ok := configFlags[name]; ok {
			return nil, errf("not allowed in a config file: %s", why)
		}
		if fs.Lookup(name) == nil {
			return nil, errf("unknown field; want a mount flag's name (sluice help mount), source, mountpoint, mirrors or [[group]]")
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case bool:
			s = strconv.FormatBool(x)
		case int64:
			s = strconv.FormatInt(x, 10)
		case float64:
			s = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			return nil, errf("want a string, number or boolean, not %s", tomlType(v))
		}
		c.flags = append(c.flags, configFlag{name: name, value: s, line: line})
	}
	if c.source != "" && len(c.mirrors) > 0 {
		// As on the command line (--mirror and SOURCE).
		return nil, fmt.Errorf("%s:%d: mirrors and source %s: a mirror set is served in place of source; give one of them", path, tomlpos.Line(c.src, toml.Key{"mirrors"}), c.source)
	}
	return c, nil
}

// tomlType names the TOML type of a decoded value, for errors.
func tomlType(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %t", x)
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case float64:
		return fmt.Sprintf("the float %g", x)
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// loadGroups reads the [[group]] tables, v as decoded; every error names
// the line and the field.
func (c *config) loadGroups(md toml.MetaData, v any) error {
	var tables []map[string]any
	inline := false // group = [{...}]: no line of its own for a field
	switch x := v.(type) {
	case []map[string]any:
		tables = x
	case []any: // group = [{...}, ...]
		inline = true
		for _, e := range x {
			t, ok := e.(map[string]any)
			if !ok {
				return fmt.Errorf("%s:%d: group: want [[group]] tables, not a list holding %s", c.path, tomlpos.Line(c.src, toml.Key{"group"}), tomlType(e))
			}
			tables = append(tables, t)
		}
	default:
		line := tomlpos.Line(c.src, toml.Key{"group"})
		if _, ok := v.(map[string]any); ok {
			line = tomlpos.Line(c.src, toml.Key{"group", "0"})
		}
		return fmt.Errorf("%s:%d: group: want [[group]] tables (double brackets: there may be many), not %s", c.path, line, tomlType(v))
	}
	for _, k := range md.Keys() {
		if len(k) == 2 && k[0] == "group" && k[1] != "name" && k[1] != "match" && k[1] != "limits" {
			return fmt.Errorf("%s:%d: group.%s: unknown field; want name, match or limits", c.path, tomlpos.Line(c.src, k), k[1])
		}
	}
	for i, g := range tables {
		line := func(f string) int {
			if inline {
				return tomlpos.Line(c.src, toml.Key{"group"})
			}
			return tomlpos.Line(c.src, toml.Key{"group", strconv.Itoa(i), f})
		}
		for f := range g {
			if f != "name" && f != "match" && f != "limits" {
				return fmt.Errorf("%s:%d: group.%s: unknown field; want name, match or limits", c.path, line(f), f)
			}
		}
		name, ok := g["name"].(string)
		if _, given := g["name"]; given && !ok {
			return fmt.Errorf("%s:%d: group.name: want a group name, as a string, not %s", c.path, line("name"), tomlType(g["name"]))
		}
		if name == "" {
			k := toml.Key{"group", strconv.Itoa(i)} // its header
			if inline {
				k = toml.Key{"group"}
			}
			return fmt.Errorf("%s:%d: group: a [[group]] needs a name", c.path, tomlpos.Line(c.src, k))
		}
		if m, given := g["match"]; given {
			list, ok := m.([]any)
			var rules []string
			for _, e := range list {
				r, isStr := e.(string)
				if !isStr {
					return fmt.Errorf("%s:%d: group.match: want a list of rules, as strings such as \"uid=1001\", not a list holding %s", c.path, line("match"), tomlType(e))
				}
				rules = append(rules, r)
			}
			if !ok {
				return fmt.Errorf("%s:%d: group.match: want a list of rules, as strings such as [\"uid=1001\"], not %s", c.path, line("match"), tomlType(m))
			}
			for _, r := range rules {
				v := name + " " + r
				c.groups = append(c.groups, v)
				c.lines["group "+v] = line("match")
			}
		}
		if l, given := g["limits"]; given {
			s, ok := l.(string)
			if !ok {
				return fmt.Errorf("%s:%d: group.limits: want limits as one string such as \"rbps=10MiB wiops=100\", not %s", c.path, line("limits"), tomlType(l))
			}
			if s != "" {
				v := name + " " + s
				c.limits = append(c.limits, v)
				c.lines["limit "+v] = line("limits")
			}
		}
	}
	return nil
}

// apply sets on fs every flag the file holds that the command line did
// not give, and returns the file's groups and limits merged with the
// command line's (o's), and the positional arguments completed from the
// file.
func (c *config) apply(fs *pflag.FlagSet, o *mountOpts, pos []string) ([]string, error) {
	given := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { given[f.Name] = f.Changed })
	for _, f := range c.flags {
		if given[f.name] {
			continue
		}
		if err := fs.Set(f.name, f.value); err != nil {
			if cause := errors.Unwrap(err); cause != nil {
				err = cause // what the value's Set said, without pflag's "invalid argument"
			}
			return nil, fmt.Errorf("%s:%d: %s: %q: %s", c.path, f.line, f.name, f.value, flagWant(fs.Lookup(f.name), err.Error()))
		}
		c.lines[f.name] = f.line
	}
	// Command-line rules first (the first match decides), command-line
	// limits last (the last setting of a key wins).
	o.groups = append(o.groups, c.groups...)
	o.limits = append(append(multi{}, c.limits...), o.limits...)
	if len(o.mirrors) == 0 && len(pos) != 2 {
		o.mirrors = c.mirrors // SOURCE on the command line wins over them
	}
	switch {
	case len(pos) > 0:
		return pos, nil // the command line names what is served
	case c.mountpoint == "":
		return nil, fmt.Errorf("%s: no mountpoint (give mountpoint = \"DIR\" or MOUNTPOINT on the command line)", c.path)
	case len(o.mirrors) > 0:
		return []string{c.mountpoint}, nil
	case c.source == "":
		return nil, fmt.Errorf("%s: no source (give source = \"DIR\", mirrors = [...], or SOURCE on the command line)", c.path)
	}
	return []string{c.source, c.mountpoint}, nil
}

// located rewrites a usage error about a value that came from the file
// so that it names the file, the line and the field.
func (c *config) located(err error) error {
	msg := err.Error()
	for key, line := range c.lines {
		name, value, isRule := strings.Cut(key, " ")
		if !isRule {
			if rest, ok := strings.CutPrefix(msg, "--"+name+" "); ok {
				return fmt.Errorf("%s:%d: %s: %s", c.path, line, name, rest)
			}
			continue
		}
		if rest, ok := strings.CutPrefix(msg, "--"+name+" "+strconv.Quote(value)+": "); ok {
			field := map[string]string{"group": "group.match", "limit": "group.limits"}[name]
			return fmt.Errorf("%s:%d: %s: %q: %s", c.path, line, field, value, rest)
		}
	}
	return err
}
