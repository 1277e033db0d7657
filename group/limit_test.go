package group

import (
	"fmt"
	"testing"
)

func p(n int64) *int64 { return &n }

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
		{"default rbps=10MiB riops=max", LimitSpec{Group: "default", RBPS: p(10 << 20), RIOPS: p(0)}, "default rbps=10MiB riops=max"},
		{"tenants/a wbps=1G wiops=100", LimitSpec{Group: "tenants/a", WBPS: p(1 << 30), WIOPS: p(100)}, "tenants/a wbps=1GiB wiops=100"},
		{"  x   wiops=1k\triops=2.5k ", LimitSpec{Group: "x", RIOPS: p(2500), WIOPS: p(1000)}, "x riops=2500 wiops=1000"},
		{"x riops=1M wiops=1G", LimitSpec{Group: "x", RIOPS: p(1e6), WIOPS: p(1e9)}, "x riops=1000000 wiops=1000000000"},
		{"x wbps=1.5MiB rbps=10MB", LimitSpec{Group: "x", RBPS: p(10e6), WBPS: p(1572864)}, "x rbps=10000000 wbps=1536KiB"},
		{"x rbps=max wbps=max riops=max wiops=max", LimitSpec{Group: "x", RBPS: p(0), WBPS: p(0), RIOPS: p(0), WIOPS: p(0)}, "x rbps=max wbps=max riops=max wiops=max"},
		{"x rbps=1", LimitSpec{Group: "x", RBPS: p(1)}, "x rbps=1"},
	} {
		got, err := ParseLimit(tc.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
			continue
		}
		if fmt.Sprint(got) != tc.canon || got.Group != tc.want.Group ||
			!eqp(got.RBPS, tc.want.RBPS) || !eqp(got.WBPS, tc.want.WBPS) ||
			!eqp(got.RIOPS, tc.want.RIOPS) || !eqp(got.WIOPS, tc.want.WIOPS) {
			t.Errorf("ParseLimit(%q) = %s; want %s", tc.in, got, tc.canon)
		}
		again, err := ParseLimit(got.String())
		if err != nil || again.String() != got.String() {
			t.Errorf("ParseLimit(%q) = %s, %v; want it to round-trip", got.String(), again, err)
		}
	}
}

func eqp(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

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
		{"default", `no limits given for group "default": want KEY=VALUE with KEY one of rbps, wbps, riops, wiops`},
		{"default rbps", `"rbps" is not KEY=VALUE: want KEY one of rbps, wbps, riops, wiops`},
		{"default rbs=1M", `unknown key "rbs" in "rbs=1M": want rbps, wbps, riops or wiops`},
		{"default RBPS=1M", `unknown key "RBPS" in "RBPS=1M": want rbps, wbps, riops or wiops`},
		{"default rbps=1M wbps=1M rbps=max", `duplicate key "rbps"`},
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
