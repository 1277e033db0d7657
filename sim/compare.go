package sim

import (
	"fmt"
	"strconv"
	"strings"
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

// Check asserts the scenario's [[expect]] entries on the runs and returns
// one line per failure.
func Check(sc *Scenario, runs []*Result) []string {
	find := func(cfg string) *Result {
		for _, r := range runs {
			if r.Config == cfg {
				return r
			}
		}
		return nil
	}
	var bad []string
	for _, e := range sc.Expect {
		a := find(e.A)
		if a == nil {
			bad = append(bad, fmt.Sprintf("expect: no run %q", e.A))
			continue
		}
		va, err := a.Figure(e.Job, e.Metric)
		if err != nil {
			bad = append(bad, "expect: "+err.Error())
			continue
		}
		desc := fmt.Sprintf("%s %s under %s = %s", e.Job, e.Metric, e.A, strconv.FormatFloat(va, 'g', 5, 64))
		if e.B != "" {
			b := find(e.B)
			if b == nil {
				bad = append(bad, fmt.Sprintf("expect: no run %q", e.B))
				continue
			}
			vb, _ := b.Figure(e.Job, e.Metric)
			r := va / vb
			if e.Ratio < 1 && r > e.Ratio || e.Ratio >= 1 && r < e.Ratio {
				bad = append(bad, fmt.Sprintf("%s, %s under %s = %.5g: ratio %.3f, want %s %.3f", desc, e.Metric, e.B, vb, r, map[bool]string{true: "<=", false: ">="}[e.Ratio < 1], e.Ratio))
			}
		}
		if e.Min != 0 && va < e.Min || e.Max != 0 && va > e.Max {
			bad = append(bad, fmt.Sprintf("%s: want within [%g, %g]", desc, e.Min, e.Max))
		}
	}
	return bad
}
