package group

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/throttle"
)

// LimitSpec is one parsed limit argument: a group and the change of its
// limits the argument gives. Keys not given keep their previous value; a
// key given as 0 is "max" (no limit). RBPS and WBPS are bytes per second,
// RIOPS and WIOPS I/Os per second; Weight is the group's share among its
// siblings under a saturated parent (1 to 10000, 0 for the default 100).
type LimitSpec struct {
	Group string
	throttle.LimitChange
}

// field returns the bit of key and its value in l, or 0 and nil for an
// unknown key.
func (l *LimitSpec) field(key string) (throttle.Keys, *int64) {
	for _, f := range throttle.Fields {
		if f.Name == key {
			return f.Key, f.At(&l.To)
		}
	}
	return 0, nil
}

// ParseLimit parses "GROUP KEY=VALUE ...", for example
// "default rbps=10MiB riops=max". At least one key is required and none may
// repeat. The error does not name the flag; callers wrap it, as in
// fmt.Errorf("--limit %q: %w", s, err).
func ParseLimit(s string) (LimitSpec, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return LimitSpec{}, fmt.Errorf(`empty limit: want "GROUP KEY=VALUE ...", e.g. "default rbps=10MiB"`)
	}
	var l LimitSpec
	if strings.Contains(fields[0], "=") {
		return LimitSpec{}, fmt.Errorf(`missing group name before %q: want "GROUP KEY=VALUE ...", e.g. "default rbps=10MiB"`, fields[0])
	}
	if err := ValidName(fields[0]); err != nil {
		return LimitSpec{}, err
	}
	l.Group = fields[0]
	if len(fields) == 1 {
		return LimitSpec{}, fmt.Errorf("no limits given for group %q: want KEY=VALUE with KEY one of rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min, target", l.Group)
	}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return LimitSpec{}, fmt.Errorf("%q is not KEY=VALUE: want KEY one of rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min, target", f)
		}
		k, p := l.field(key)
		if p == nil {
			return LimitSpec{}, fmt.Errorf("unknown key %q in %q: want rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min or target", key, f)
		}
		if l.Keys&k != 0 {
			return LimitSpec{}, fmt.Errorf("duplicate key %q", key)
		}
		n, err := parseLimitValue(key, val)
		if err != nil {
			return LimitSpec{}, err
		}
		l.Keys |= k
		*p = n
	}
	return l, nil
}

// parseLimitValue parses the value of one key; "max" is 0, and so is a
// weight's "default".
func parseLimitValue(key, val string) (int64, error) {
	if key == "weight" {
		return parseWeight(val)
	}
	if key == "target" {
		return parseTarget(val)
	}
	floor := strings.HasSuffix(key, ".min")
	if val == "max" && !floor || val == "none" && floor {
		return 0, nil
	}
	kind, units, whole, want := "size", sizeUnits, false, wantSize
	if strings.Contains(key, "iops") {
		kind, units, whole, want = "count", countUnits, true, wantCount
	}
	n, e := parseNumber(val, units, whole, want)
	switch {
	case e != nil && e.syntax && floor:
		return 0, fmt.Errorf("bad %s %q for %s: %s or \"none\"", kind, val, key, strings.TrimSuffix(e.reason, ` or "max"`))
	case e != nil && e.syntax:
		return 0, fmt.Errorf("bad %s %q for %s: %s or \"max\"", kind, val, key, e.reason)
	case e != nil && floor:
		return 0, fmt.Errorf("bad %s %q for %s: %s; use %s=none for no floor", kind, val, key, e.reason, key)
	case e != nil:
		return 0, fmt.Errorf("bad %s %q for %s: %s; use %s=max for no limit", kind, val, key, e.reason, key)
	case n == 0 && floor:
		return 0, fmt.Errorf("bad %s %q for %s: use %s=none for no floor", kind, val, key, key)
	case n == 0:
		return 0, fmt.Errorf("bad %s %q for %s: zero is not unlimited; use %s=max for no limit", kind, val, key, key)
	}
	return n, nil
}

// parseTarget parses a latency target: a positive duration, or "none"
// (0).
func parseTarget(val string) (int64, error) {
	if val == "none" {
		return 0, nil
	}
	d, err := time.ParseDuration(val)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("bad target %q: want a latency such as 5ms or 500us, or \"none\"", val)
	}
	return int64(d), nil
}

// parseWeight parses a weight: a whole number from 1 to 10000, or
// "default" (0: the default, 100).
func parseWeight(val string) (int64, error) {
	if val == "default" {
		return 0, nil
	}
	n, err := strconv.ParseInt(val, 10, 64)
	if err != nil || n < 1 || n > throttle.MaxWeight {
		return 0, fmt.Errorf("bad weight %q: want a whole number from 1 to %d, or \"default\" (%d)", val, throttle.MaxWeight, throttle.DefaultWeight)
	}
	return n, nil
}

// String returns l in canonical form, keys in the order of
// throttle.Fields, sizes as FormatSize writes them: "default rbps=10MiB
// riops=max".
// ParseLimit(l.String()) returns l again.
func (l LimitSpec) String() string {
	var b strings.Builder
	b.WriteString(l.Group)
	for _, f := range throttle.Fields {
		key, p := f.Name, f.At(&l.To)
		if l.Keys&f.Key == 0 {
			continue
		}
		b.WriteString(" " + key + "=")
		switch {
		case key == "weight" && *p == 0:
			b.WriteString("default")
		case key == "target" && *p == 0:
			b.WriteString("none")
		case key == "target":
			b.WriteString(time.Duration(*p).String())
		case strings.HasSuffix(key, ".min") && *p == 0:
			b.WriteString("none")
		case *p == 0:
			b.WriteString("max")
		case strings.Contains(key, "bps"):
			b.WriteString(FormatSize(*p))
		default:
			b.WriteString(strconv.FormatInt(*p, 10))
		}
	}
	return b.String()
}

// Combine returns the limits each group ends with when specs are applied
// in order to groups with none, for every group named in also or specs,
// and those groups in the order first named (also's first): a group only
// also names gets no limits. A mount's --limit list is Combine(nil,
// specs); a reload, which resets the groups the old list named, is
// Combine(old, new).
func Combine(also, specs []LimitSpec) (order []string, full map[string]throttle.Limits) {
	full = map[string]throttle.Limits{}
	for _, l := range append(slices.Clone(also), specs...) {
		if _, ok := full[l.Group]; !ok {
			full[l.Group] = throttle.Limits{}
			order = append(order, l.Group)
		}
	}
	for _, l := range specs {
		full[l.Group] = l.Apply(full[l.Group])
	}
	return order, full
}

// FormatLimits renders a group's limits in io.max form, every cap
// present, sizes as FormatSize writes them: "rbps=10MiB wbps=max
// riops=max wiops=100", and the weight and floors that are set
// (" weight=200 rbps.min=1MiB").
func FormatLimits(l throttle.Limits) string {
	c := throttle.SetAll(l)
	for _, f := range throttle.Fields[4:] {
		if *f.At(&l) == 0 {
			c.Keys &^= f.Key
		}
	}
	return strings.TrimPrefix(LimitSpec{LimitChange: c}.String(), " ")
}
