package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Set changes one [mount] key of the scenario, as --compare does:
// max-io, readahead, readahead-budget (on/off), cache, burst, max-wait,
// max-read, fuse-latency, wake-latency, write-throttle, dirty-limit,
// read-policy, cache-mode, page-cache, write-cache (on/off), map-dirty.
func (sc *Scenario) Set(key, value string) error {
	m := &sc.Mount
	var err error
	switch key {
	case "max-io":
		err = m.MaxIO.UnmarshalText([]byte(value))
	case "readahead":
		err = m.Readahead.UnmarshalText([]byte(value))
	case "readahead-budget":
		if err := onOff(key, value, &m.ReadaheadBudget); err != nil {
			return err
		}
	case "cache":
		err = m.Cache.UnmarshalText([]byte(value))
	case "burst":
		err = m.Burst.UnmarshalText([]byte(value))
	case "max-wait":
		err = m.MaxWait.UnmarshalText([]byte(value))
	case "max-read":
		err = m.MaxRead.UnmarshalText([]byte(value))
	case "fuse-latency":
		err = m.FuseLatency.UnmarshalText([]byte(value))
	case "wake-latency":
		err = m.WakeLatency.UnmarshalText([]byte(value))
	case "write-throttle":
		m.WriteThrottle = value
	case "dirty-limit":
		err = m.DirtyLimit.UnmarshalText([]byte(value))
	case "read-policy":
		m.ReadPolicy = value
	case "cache-mode":
		m.CacheMode = value
	case "page-cache":
		err = m.PageCache.UnmarshalText([]byte(value))
	case "write-cache":
		if err := onOff(key, value, &m.WriteCache); err != nil {
			return err
		}
	case "map-dirty":
		err = m.MapDirty.UnmarshalText([]byte(value))
	default:
		return fmt.Errorf("--compare %s: unknown key; want one of max-io, readahead, readahead-budget, cache, burst, max-wait, max-read, fuse-latency, wake-latency, write-throttle, dirty-limit, read-policy, cache-mode, page-cache, write-cache, map-dirty", key)
	}
	if err != nil {
		return fmt.Errorf("--compare %s=%s: %v", key, value, err)
	}
	if _, err := sc.options(); err != nil {
		return fmt.Errorf("--compare %s=%s: %v", key, value, err)
	}
	return nil
}

// onOff sets *b from an on/off value of --compare key.
func onOff(key, value string, b *bool) error {
	switch value {
	case "on", "true":
		*b = true
	case "off", "false":
		*b = false
	default:
		return fmt.Errorf("--compare %s=%s: want on or off", key, value)
	}
	return nil
}

// ParseCompare splits "KEY=V1,V2,..." into the key and its values.
func ParseCompare(s string) (string, []string, error) {
	key, vals, ok := strings.Cut(s, "=")
	if !ok || key == "" || vals == "" {
		return "", nil, fmt.Errorf("--compare %q: want KEY=V1,V2,... such as readahead-budget=off,on", s)
	}
	return key, strings.Split(vals, ","), nil
}

// clone returns a deep enough copy of sc for one run of a comparison: Set
// changes only Mount, a value.
func (sc *Scenario) clone() *Scenario {
	c := *sc
	return &c
}

// RunCompare runs sc once per value of key (once as it is when key is
// ""), each labelled KEY=VALUE.
func RunCompare(sc *Scenario, key string, values []string) ([]*Result, error) {
	if key == "" {
		res, err := Run(sc)
		if err != nil {
			return nil, err
		}
		return []*Result{res}, nil
	}
	var out []*Result
	for _, v := range values {
		c := sc.clone()
		if err := c.Set(key, v); err != nil {
			return nil, err
		}
		res, err := Run(c)
		if err != nil {
			return nil, err
		}
		res.Config = key + "=" + v
		out = append(out, res)
	}
	return out, nil
}

// Outcome is an [[expect]] entry asserted on the runs: what was measured
// and wanted, and whether it held.
type Outcome struct {
	Expect
	Line string
	Held bool
}

// Check asserts the scenario's [[expect]] entries on the runs and returns
// one line per failure, a pending entry's (Expect.Pending) marked so.
func Check(sc *Scenario, runs []*Result) []string {
	var bad []string
	for _, o := range Outcomes(sc, runs) {
		if !o.Held {
			bad = append(bad, o.String())
		}
	}
	return bad
}

func (o Outcome) String() string {
	if o.Pending != "" {
		return "pending, " + o.Pending + ": " + o.Line
	}
	return o.Line
}

// Outcomes asserts each of the scenario's [[expect]] entries on the runs.
func Outcomes(sc *Scenario, runs []*Result) []Outcome {
	find := func(cfg string) *Result {
		for _, r := range runs {
			if r.Config == cfg {
				return r
			}
		}
		return nil
	}
	var out []Outcome
	for _, e := range sc.Expect {
		o := Outcome{Expect: e}
		o.Line, o.Held = check(e, find)
		out = append(out, o)
	}
	return out
}

// check asserts e on the runs find gives by configuration.
func check(e Expect, find func(string) *Result) (string, bool) {
	a := find(e.A)
	if a == nil {
		return fmt.Sprintf("expect: no run %q", e.A), false
	}
	va, what, err := e.value(a)
	if err != nil {
		return "expect: " + err.Error(), false
	}
	desc := fmt.Sprintf("%s%s = %s", what, under(e.A), strconv.FormatFloat(va, 'g', 5, 64))
	held := true
	if e.B != "" {
		b := find(e.B)
		if b == nil {
			return fmt.Sprintf("expect: no run %q", e.B), false
		}
		vb, _, _ := e.value(b)
		r := va / vb
		desc = fmt.Sprintf("%s,%s = %.5g: ratio %.3f, want %s %.3f", desc, under(e.B), vb, r, map[bool]string{true: "<=", false: ">="}[e.Ratio < 1], e.Ratio)
		if e.Ratio < 1 && r > e.Ratio || e.Ratio >= 1 && r < e.Ratio {
			held = false
		}
	}
	switch {
	case e.Min != 0 && e.Max != 0:
		desc = fmt.Sprintf("%s: want within [%g, %g]", desc, e.Min, e.Max)
	case e.Min != 0:
		desc = fmt.Sprintf("%s: want at least %g", desc, e.Min)
	case e.Max != 0:
		desc = fmt.Sprintf("%s: want at most %g", desc, e.Max)
	}
	if e.Min != 0 && va < e.Min || e.Max != 0 && va > e.Max {
		held = false
	}
	return desc, held
}

// value is e's figure in res, and what it is: the job's metric, in e's
// window, over its figure alone, over the same of job e.Vs.
func (e Expect) value(res *Result) (float64, string, error) {
	from, until := int64(e.From), int64(e.Until)
	one := func(job string, alone float64) (float64, string, error) {
		v, err := res.FigureIn(job, e.Metric, from, until)
		what := strings.TrimSpace(job + " " + e.Metric)
		if alone > 0 {
			v /= alone
			what = fmt.Sprintf("%s/%g alone", what, alone)
		}
		return v, what, err
	}
	v, what, err := one(e.Job, e.Alone)
	if err != nil || e.Vs == "" {
		return v, inWindow(what, from, until), err
	}
	w, wwhat, err := one(e.Vs, e.VsAlone)
	return v / w, inWindow("("+what+") / ("+wwhat+")", from, until), err
}

// under names a run by its configuration, if it has one.
func under(config string) string {
	if config == "" {
		return ""
	}
	return " under " + config
}

// inWindow names the window from..until of a figure, if there is one.
func inWindow(what string, from, until int64) string {
	switch {
	case until > 0:
		return fmt.Sprintf("%s in %v..%v", what, time.Duration(from), time.Duration(until))
	case from > 0:
		return fmt.Sprintf("%s from %v", what, time.Duration(from))
	}
	return what
}
