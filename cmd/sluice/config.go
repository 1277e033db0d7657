package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

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
func loadConfig(path string, fs *flag.FlagSet) (*config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %v", path, err)
	}
	c := &config{path: path, src: string(b), lines: map[string]int{}}
	var raw map[string]any
	md, err := toml.Decode(c.src, &raw)
	if err != nil {
		if pe, ok := err.(toml.ParseError); ok {
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
		errf := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s: %s", path, line, name, fmt.Sprintf(format, a...))
		}
		v := raw[name]
		switch name {
		case "source", "mountpoint":
			s, ok := v.(string)
			if !ok || s == "" {
				return nil, errf("want a directory, as a string")
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
				return nil, errf("want two directories or more, as a list of strings")
			}
			continue
		case "group":
			if groups {
				continue // the keys list the array once per table
			}
			groups = true
			if err := c.loadGroups(md); err != nil {
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
			return nil, errf("want a string, number or boolean")
		}
		c.flags = append(c.flags, configFlag{name: name, value: s, line: line})
	}
	return c, nil
}

func (c *config) loadGroups(md toml.MetaData) error {
	var doc struct {
		Group []configGroup `toml:"group"`
	}
	if _, err := toml.Decode(c.src, &doc); err != nil {
		return fmt.Errorf("%s: group: %v", c.path, err)
	}
	for _, k := range md.Keys() {
		if len(k) == 2 && k[0] == "group" && k[1] != "name" && k[1] != "match" && k[1] != "limits" {
			return fmt.Errorf("%s:%d: group.%s: unknown field; want name, match or limits", c.path, tomlpos.Line(c.src, k), k[1])
		}
	}
	for i, g := range doc.Group {
		key := func(f string) toml.Key { return toml.Key{"group", strconv.Itoa(i), f} }
		if g.Name == "" {
			return fmt.Errorf("%s:%d: group: a [[group]] needs a name", c.path, tomlpos.Line(c.src, toml.Key{"group", strconv.Itoa(i)}))
		}
		for _, m := range g.Match {
			v := g.Name + " " + m
			c.groups = append(c.groups, v)
			c.lines["group "+v] = tomlpos.Line(c.src, key("match"))
		}
		if g.Limits != "" {
			v := g.Name + " " + g.Limits
			c.limits = append(c.limits, v)
			c.lines["limit "+v] = tomlpos.Line(c.src, key("limits"))
		}
	}
	return nil
}

// apply sets on fs every flag the file holds that the command line did
// not give, and returns the file's groups and limits merged with the
// command line's (o's), and the positional arguments completed from the
// file.
func (c *config) apply(fs *flag.FlagSet, o *mountOpts, pos []string) ([]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range c.flags {
		if given[f.name] {
			continue
		}
		if err := fs.Set(f.name, f.value); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %q: %v", c.path, f.line, f.name, f.value, err)
		}
		c.lines[f.name] = f.line
	}
	// Command-line rules first (the first match decides), command-line
	// limits last (the last setting of a key wins).
	o.groups = append(o.groups, c.groups...)
	o.limits = append(append(multi{}, c.limits...), o.limits...)
	if len(o.mirrors) == 0 {
		o.mirrors = c.mirrors
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
