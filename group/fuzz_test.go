package group

import (
	"reflect"
	"testing"
)

// The parsers of what operators write (sizes, limits, rules) never panic,
// and what they accept comes back the same through its canonical form.

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "10MiB", "512k", "1.5GiB", "4 KiB", " 7 ", "1e9", "-1", "9223372036854775807", "9223372036854775808", "0.5", "1.0000000001TB", "max", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d: negative", s, n)
		}
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d; FormatSize gives %q, which parses to %d, %v", s, n, FormatSize(n), back, err)
		}
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"default rbps=10MiB", "a/b wbps=1.5k riops=max wiops=100", "x rbps=0", "t riops=1M", "bad", "g rbps=", "g rbps=10MiB rbps=1", "/ rbps=1", "a//b riops=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err != nil {
			return
		}
		back, err := ParseLimit(l.String())
		if err != nil || !reflect.DeepEqual(back, l) {
			t.Fatalf("ParseLimit(%q) = %v; its String %q parses to %v, %v", s, l, l.String(), back, err)
		}
	})
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"backup uid=34", "ci gid=100 comm=make", "svc cgroup=/system.slice/x.service", "g uid=0 gid=0", "g uid=-1", "g comm=", "g", "g uid=4294967296", "g cgroup=relative"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		back, err := ParseRule(r.String())
		if err != nil || back.String() != r.String() {
			t.Fatalf("ParseRule(%q) = %v; its String %q parses to %v, %v", s, r, r.String(), back, err)
		}
	})
}
