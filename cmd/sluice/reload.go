package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"sluice/group"
)

// liveFlags are the mount flags a reload applies to the running mount, or
// that name the file itself; every other flag, and source, mirrors and
// mountpoint, takes a remount.
var liveFlags = map[string]bool{"limit": true, "group": true, "read-policy": true, "config": true, "mirror": true}

// flagValues returns every mount flag's value as o holds it, in the flag's
// own form ("128KiB", "auto", "true").
func flagValues(o *mountOpts) map[string]string {
	fs, bound := mountFlags()
	*bound = *o
	vals := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { vals[f.Name] = f.Value.String() })
	return vals
}

// Reload is reload as asked by sluice reload.
func (t *target) Reload() (note string, err error) {
	end, err := t.begin()
	if err != nil {
		return "", err
	}
	defer end()
	return t.reload("sluice reload")
}

// reload reads the mount's command line and config file again and applies
// what can change on a running mount: the groups' rules and limits (a
// group whose limits the file no longer gives, or gives fewer of, goes
// back to max for those) and the read policy. Requests in flight are not
// dropped. A file that does not parse or check is refused and nothing
// changes. It logs the outcome, naming by (what asked for it), and
// returns it as a note of lines: what was applied, then, after
// "warning: ", each setting whose value in the file differs from what the
// mount runs and that only a remount applies, with both values.
func (t *target) reload(by string) (note string, err error) {
	log := t.opts.Logger
	applied, stale, err := t.apply()
	if err != nil {
		if log != nil {
			log.Warn(by+": reload refused, the running configuration stays", "err", err)
		}
		return "", err
	}
	var lines []string
	for _, a := range applied {
		lines = append(lines, "applied: "+a)
	}
	if len(applied) == 0 {
		lines = append(lines, "nothing to apply: the limits, rules and read policy in force are the file's")
	}
	if len(stale) > 0 {
		lines = append(lines, "warning: changed but applied only by a remount (the mount runs the first value): "+strings.Join(stale, "; "))
	}
	if log != nil {
		attrs := []any{"config", t.config, "applied", strings.Join(applied, "; ")}
		if len(stale) > 0 {
			log.Warn(by+": reloaded", append(attrs, "needs_remount", strings.Join(stale, "; "))...)
		} else {
			log.Info(by+": reloaded", attrs...)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// apply does reload's work and returns what it changed and the settings
// a remount would change, each as "KEY OLD → NEW".
func (t *target) apply() (applied, stale []string, err error) {
	if t.config == "" {
		return nil, nil, errors.New("this mount was started without --config: nothing to reload")
	}
	next, o, err := commandOptions(t.args, io.Discard)
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.opts

	// What needs a remount: next against what the mount runs, which a
	// reload never changes.
	if a, b := cur.Source, next.Source; len(cur.Mirrors) > 0 || len(next.Mirrors) > 0 {
		if !slices.Equal(cur.Mirrors, next.Mirrors) {
			stale = append(stale, fmt.Sprintf("mirrors %s → %s", listOr(cur.Mirrors, a), listOr(next.Mirrors, b)))
		}
	} else if a != b {
		stale = append(stale, fmt.Sprintf("source %s → %s", a, b))
	}
	if cur.Mountpoint != next.Mountpoint {
		stale = append(stale, fmt.Sprintf("mountpoint %s → %s", cur.Mountpoint, next.Mountpoint))
	}
	nextFlags := flagValues(o)
	var names []string
	for name := range nextFlags {
		if !liveFlags[name] && nextFlags[name] != t.flags[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		stale = append(stale, fmt.Sprintf("%s %s → %s", name, orNone(t.flags[name]), orNone(nextFlags[name])))
	}

	// What applies live, limits first: they are checked as a whole (a
	// floor within its caps) and refused with nothing changed. Each group
	// named before or now gets every key: the file's value, or max.
	order, full := group.Combine(cur.Limits, next.Limits)
	was, err := t.m.Engine().SetAllLimits(order, full)
	if err != nil {
		return nil, nil, err
	}
	for _, g := range order {
		if is := full[g]; was[g] != is {
			applied = append(applied, fmt.Sprintf("limits of %s %s → %s", g, group.FormatLimits(was[g]), group.FormatLimits(is)))
		}
	}
	if ms := t.m.Mirrors(); ms != nil {
		if was := ms.Policy(); next.ReadPolicy != was {
			if err := ms.SetPolicy(next.ReadPolicy); err != nil {
				return nil, nil, err
			}
			applied = append(applied, fmt.Sprintf("read-policy %s → %s", was, next.ReadPolicy))
		}
	}
	if a, b := rules(cur.Rules), rules(next.Rules); a != b {
		applied = append(applied, fmt.Sprintf("group rules %s → %s", a, b))
	}
	t.m.SetRules(next.Rules)
	t.opts.Rules, t.opts.Limits, t.opts.ReadPolicy = next.Rules, next.Limits, next.ReadPolicy
	return applied, stale, nil
}

// rules renders a rule list for a message.
func rules(rs []group.Rule) string {
	if len(rs) == 0 {
		return "(none)"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func listOr(list []string, s string) string {
	if len(list) == 0 {
		return "source " + s
	}
	return "[" + strings.Join(list, ", ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
