package group

import (
	"fmt"
	"strings"
	"testing"

	"sluice/throttle"
)

func TestValidName(t *testing.T) {
	for _, name := range []string{"default", "tenants/a", "tenants/a/build", "A.b_c-9", "..a", "a..", "x/.y"} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty group name"},
		{"/a", `bad group name "/a": must not start or end with '/'`},
		{"a/", `bad group name "a/": must not start or end with '/'`},
		{"/", `bad group name "/": must not start or end with '/'`},
		{"a//b", `bad group name "a//b": empty component ("//")`},
		{".", `bad group name ".": component "." is not allowed`},
		{"a/../b", `bad group name "a/../b": component ".." is not allowed`},
		{"a b", `bad group name "a b": character ' ' is not allowed; use letters, digits, '.', '_' and '-', with '/' between components`},
		{"a=b", `bad group name "a=b": character '=' is not allowed; use letters, digits, '.', '_' and '-', with '/' between components`},
		{"é", `bad group name "é": character 'é' is not allowed; use letters, digits, '.', '_' and '-', with '/' between components`},
	} {
		if err := ValidName(tc.in); err == nil || err.Error() != tc.want {
			t.Errorf("ValidName(%q) = %v; want %q", tc.in, err, tc.want)
		}
	}
}

func TestParent(t *testing.T) {
	for in, want := range map[string]string{"tenants/a/build": "tenants/a", "tenants/a": "tenants", "default": ""} {
		if got := Parent(in); got != want {
			t.Errorf("Parent(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  LimitSpec
		canon string
	}{
		{"default rbps=10MiB riops=max", spec("default", throttle.KeyRBPS|throttle.KeyRIOPS, throttle.Limits{RBPS: 10 << 20}), "default rbps=10MiB riops=max"},
		{"tenants/a wbps=1G wiops=100", spec("tenants/a", throttle.KeyWBPS|throttle.KeyWIOPS, throttle.Limits{WBPS: 1 << 30, WIOPS: 100}), "tenants/a wbps=1GiB wiops=100"},
		{"  x   wiops=1k\triops=2.5k ", spec("x", throttle.KeyRIOPS|throttle.KeyWIOPS, throttle.Limits{RIOPS: 2500, WIOPS: 1000}), "x riops=2500 wiops=1000"},
		{"x riops=1M wiops=1G", spec("x", throttle.KeyRIOPS|throttle.KeyWIOPS, throttle.Limits{RIOPS: 1e6, WIOPS: 1e9}), "x riops=1000000 wiops=1000000000"},
		{"x wbps=1.5MiB rbps=10MB", spec("x", throttle.KeyRBPS|throttle.KeyWBPS, throttle.Limits{RBPS: 10e6, WBPS: 1572864}), "x rbps=10000000 wbps=1536KiB"},
		{"x rbps=max wbps=max riops=max wiops=max", spec("x", throttle.KeyRBPS|throttle.KeyWBPS|throttle.KeyRIOPS|throttle.KeyWIOPS, throttle.Limits{}), "x rbps=max wbps=max riops=max wiops=max"},
		{"x weight=200 rbps=1MB", spec("x", throttle.KeyRBPS|throttle.KeyWeight, throttle.Limits{RBPS: 1e6, Weight: 200}), "x rbps=1000000 weight=200"},
		{"x weight=default", spec("x", throttle.KeyWeight, throttle.Limits{}), "x weight=default"},
		{"x target=5ms weight=200", spec("x", throttle.KeyTarget|throttle.KeyWeight, throttle.Limits{Target: 5e6, Weight: 200}), "x weight=200 target=5ms"},
		{"x target=none", spec("x", throttle.KeyTarget, throttle.Limits{}), "x target=none"},
		{"x rbps.min=20MiB wiops.min=1k", spec("x", throttle.KeyRBPSMin|throttle.KeyWIOPSMin, throttle.Limits{RBPSMin: 20 << 20, WIOPSMin: 1000}), "x rbps.min=20MiB wiops.min=1000"},
		{"x wbps.min=none riops.min=5", spec("x", throttle.KeyWBPSMin|throttle.KeyRIOPSMin, throttle.Limits{RIOPSMin: 5}), "x wbps.min=none riops.min=5"},
		{"x rbps=1", spec("x", throttle.KeyRBPS, throttle.Limits{RBPS: 1}), "x rbps=1"},
	} {
		got, err := ParseLimit(tc.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
			continue
		}
		if fmt.Sprint(got) != tc.canon || got != tc.want {
			t.Errorf("ParseLimit(%q) = %s; want %s", tc.in, got, tc.canon)
		}
		again, err := ParseLimit(got.String())
		if err != nil || again.String() != got.String() {
			t.Errorf("ParseLimit(%q) = %s, %v; want it to round-trip", got.String(), again, err)
		}
	}
}

// spec returns the LimitSpec of group g that sets keys to their values in
// to.
func spec(g string, keys throttle.Keys, to throttle.Limits) LimitSpec {
	return LimitSpec{Group: g, LimitChange: throttle.LimitChange{Keys: keys, To: to}}
}

func TestParseLimitErrors(t *testing.T) {
	const (
		size  = `want a number with an optional unit (B, k, K, M, G, T, KiB, MiB, GiB, TiB, kB, MB, GB, TB) or "max"`
		count = `want a whole number with an optional unit (k = 1000, M = 10^6, G = 10^9) or "max"`
	)
	for _, tc := range []struct{ in, want string }{
		{"", `empty limit: want "GROUP KEY=VALUE ...", e.g. "default rbps=10MiB"`},
		{"   ", `empty limit: want "GROUP KEY=VALUE ...", e.g. "default rbps=10MiB"`},
		{"rbps=10MiB", `missing group name before "rbps=10MiB": want "GROUP KEY=VALUE ...", e.g. "default rbps=10MiB"`},
		{"/a rbps=1", `bad group name "/a": must not start or end with '/'`},
		{"a//b rbps=1", `bad group name "a//b": empty component ("//")`},
		{"default", `no limits given for group "default": want KEY=VALUE with KEY one of rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min, target`},
		{"default rbps", `"rbps" is not KEY=VALUE: want KEY one of rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min, target`},
		{"default rbs=1M", `unknown key "rbs" in "rbs=1M": want rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min or target`},
		{"default RBPS=1M", `unknown key "RBPS" in "RBPS=1M": want rbps, wbps, riops, wiops, weight, rbps.min, wbps.min, riops.min, wiops.min or target`},
		{"default rbps=1M wbps=1M rbps=max", `duplicate key "rbps"`},
		{"default rbps.min=0", `bad size "0" for rbps.min: use rbps.min=none for no floor`},
		{"default rbps.min=max", `bad size "max" for rbps.min: ` + strings.TrimSuffix(size, ` or "max"`) + ` or "none"`},
		{"default riops.min=-1", `bad count "-1" for riops.min: must not be negative; use riops.min=none for no floor`},
		{"default weight=0", `bad weight "0": want a whole number from 1 to 10000, or "default" (100)`},
		{"default weight=10001", `bad weight "10001": want a whole number from 1 to 10000, or "default" (100)`},
		{"default weight=max", `bad weight "max": want a whole number from 1 to 10000, or "default" (100)`},
		{"default weight=-5", `bad weight "-5": want a whole number from 1 to 10000, or "default" (100)`},
		{"default weight=1.5", `bad weight "1.5": want a whole number from 1 to 10000, or "default" (100)`},
		{"default target=-5ms", `bad target "-5ms": want a latency such as 5ms or 500us, or "none"`},
		{"default target=0", `bad target "0": want a latency such as 5ms or 500us, or "none"`},
		{"default target=5", `bad target "5": want a latency such as 5ms or 500us, or "none"`},
		{"default target=max", `bad target "max": want a latency such as 5ms or 500us, or "none"`},
		{"default rbps=10XB", `bad size "10XB" for rbps: ` + size},
		{"default wbps=", `bad size "" for wbps: ` + size},
		{"default rbps=MAX", `bad size "MAX" for rbps: ` + size},
		{"default rbps=0", `bad size "0" for rbps: zero is not unlimited; use rbps=max for no limit`},
		{"default wbps=0MiB", `bad size "0MiB" for wbps: zero is not unlimited; use wbps=max for no limit`},
		{"default rbps=-1M", `bad size "-1M" for rbps: must not be negative; use rbps=max for no limit`},
		{"default rbps=0.1", `bad size "0.1" for rbps: rounds to 0 bytes; use rbps=max for no limit`},
		{"default rbps=9999999TiB", `bad size "9999999TiB" for rbps: larger than the maximum, 9223372036854775807; use rbps=max for no limit`},
		{"default riops=0", `bad count "0" for riops: zero is not unlimited; use riops=max for no limit`},
		{"default riops=10x", `bad count "10x" for riops: ` + count},
		{"default wiops=1KiB", `bad count "1KiB" for wiops: ` + count},
		{"default wiops=1.5", `bad count "1.5" for wiops: not a whole number; ` + count},
		{"default wiops=-3", `bad count "-3" for wiops: must not be negative; use wiops=max for no limit`},
	} {
		l, err := ParseLimit(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseLimit(%q) = %s, %v\nwant error %s", tc.in, l, err, tc.want)
		}
	}
	// The flag wraps the error as the command line reports it.
	_, err := ParseLimit("default rbps=10XB")
	got := fmt.Errorf("--limit %q: %w", "default rbps=10XB", err).Error()
	want := `--limit "default rbps=10XB": bad size "10XB" for rbps: ` + size
	if got != want {
		t.Errorf("wrapped error = %s; want %s", got, want)
	}
}
