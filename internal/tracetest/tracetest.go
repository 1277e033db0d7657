// Package tracetest holds what the trace tests of sluice's policy packages
// share: typed access to the arguments of a datadriven directive, and the
// formats of byte counts and virtual times in their expected output.
//
// A byte count is written as a plain number of bytes or with a KiB or MiB
// suffix ("4096", "4KiB", "1MiB"); a time is a Go duration from the start
// of the trace ("0", "10ms", "1.5s", "39.062µs").
package tracetest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// Args gives typed access to a directive's arguments. Each accessor fails
// the test on a malformed value; Done fails it on an argument no accessor
// asked for, so a misspelt key does not pass unnoticed.
type Args struct {
	t    testing.TB
	td   *datadriven.TestData
	used []bool
}

// New returns the arguments of td.
func New(t testing.TB, td *datadriven.TestData) *Args {
	return &Args{t: t, td: td, used: make([]bool, len(td.CmdArgs))}
}

// find returns the index of key, or -1.
func (a *Args) find(key string) int {
	for i, arg := range a.td.CmdArgs {
		if arg.Key == key {
			a.used[i] = true
			return i
		}
	}
	return -1
}

// Has reports whether key is given, with or without a value.
func (a *Args) Has(key string) bool { return a.find(key) >= 0 }

// Flag reports whether key is given without a value.
func (a *Args) Flag(key string) bool {
	i := a.find(key)
	if i >= 0 && len(a.td.CmdArgs[i].Vals) > 0 {
		a.td.Fatalf(a.t, "%s takes no value", key)
	}
	return i >= 0
}

// Pos returns the first argument without a value that no accessor has
// asked for yet (a positional name, as in "limit p/a rbps=1MiB"), or def.
func (a *Args) Pos(def string) string {
	for i, arg := range a.td.CmdArgs {
		if !a.used[i] && len(arg.Vals) == 0 {
			a.used[i] = true
			return arg.Key
		}
	}
	return def
}

// String returns the single value of key, or def when key is absent.
func (a *Args) String(key, def string) string {
	i := a.find(key)
	if i < 0 {
		return def
	}
	return a.td.CmdArgs[i].SingleVal(a.t)
}

// Strings returns the values of key: "key=(a, b)" gives a and b.
func (a *Args) Strings(key string) []string {
	if i := a.find(key); i >= 0 {
		return a.td.CmdArgs[i].Vals
	}
	return nil
}

// Int returns the integer value of key, or def.
func (a *Args) Int(key string, def int64) int64 {
	s := a.String(key, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		a.td.Fatalf(a.t, "%s=%s: %v", key, s, err)
	}
	return n
}

// Bytes returns the byte count of key (see ParseBytes), or def.
func (a *Args) Bytes(key string, def int64) int64 {
	s := a.String(key, "")
	if s == "" {
		return def
	}
	n, err := ParseBytes(s)
	if err != nil {
		a.td.Fatalf(a.t, "%s=%s: %v", key, s, err)
	}
	return n
}

// Ints returns the values of key as integers.
func (a *Args) Ints(key string) []int64 {
	var out []int64
	for _, s := range a.Strings(key) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			a.td.Fatalf(a.t, "%s: %v", key, err)
		}
		out = append(out, n)
	}
	return out
}

// Time returns the time of key in nanoseconds, or def.
func (a *Args) Time(key string, def int64) int64 {
	s := a.String(key, "")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		a.td.Fatalf(a.t, "%s=%s: %v", key, s, err)
	}
	return int64(d)
}

// Done fails the test if an argument was given that no accessor asked for.
func (a *Args) Done() {
	for i, u := range a.used {
		if !u {
			a.td.Fatalf(a.t, "%s: unknown argument %s", a.td.Cmd, a.td.CmdArgs[i])
		}
	}
}

// ParseBytes parses a byte count: digits, optionally followed by KiB or
// MiB. "max" is 0, the unlimited rate of io.max.
func ParseBytes(s string) (int64, error) {
	if s == "max" {
		return 0, nil
	}
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "MiB"):
		mul, s = mib, strings.TrimSuffix(s, "MiB")
	case strings.HasSuffix(s, "KiB"):
		mul, s = kib, strings.TrimSuffix(s, "KiB")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mul, nil
}

// Bytes formats a byte count with the largest of MiB and KiB that divides
// it, or as a plain number.
func Bytes(n int64) string {
	switch {
	case n != 0 && n%mib == 0:
		return fmt.Sprintf("%dMiB", n/mib)
	case n != 0 && n%kib == 0:
		return fmt.Sprintf("%dKiB", n/kib)
	}
	return strconv.FormatInt(n, 10)
}

// Time formats a virtual time in nanoseconds as a Go duration, or "none"
// for a negative time (no wake-up).
func Time(ns int64) string {
	if ns < 0 {
		return "none"
	}
	return time.Duration(ns).String()
}
