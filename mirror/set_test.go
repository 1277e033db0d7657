package mirror

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/datadriven"

	tt "sluice/internal/tracetest"
)

// TestSetTrace runs the traces in testdata/set: a Set driven by
// directives on a virtual clock, printing the Step of every call. Run
// with -rewrite to regenerate the expected output.
//
//	new mirrors=N [policy=adaptive] [stale=(I, ...)]
//	begin NAME t= [pid=] [file=] [off=] [len=4KiB] [closed=(I, ...)]
//	    a caller's read, named NAME
//	finish NAME m=I t= [n=len] [err]
//	    the flight's read on mirror I ends, with n bytes or EIO
//	timer NAME t=
//	    Timer at t
//	probe m=I t= [err]
//	    the probe of mirror I ends
//	stale I
//	    MarkStale
//	add
//	    Add: a mirror joins the set, stale
//	revive I
//	    Revive
//	fanout on=(I, ...) out=(ok|failed|gone, ...)
//	policy NAME
//	    SetPolicy
//	stats
//	    each mirror's nonzero counters, and the healthy list
//
// Steps print as "send m1 wake=12ms", "probe m2", "served m0",
// "failed: input/output error", "report", or "-" for nothing to do.
func TestSetTrace(t *testing.T) {
	datadriven.Walk(t, "testdata/set", func(t *testing.T, path string) {
		var s *Set
		type flight struct {
			f     Flight
			sends map[int]Send
		}
		flights := map[string]*flight{}
		probes := map[int]Send{}
		step := func(fl *flight, st Step) string {
			var out []string
			if st.Sending {
				fl.sends[st.Send.Mirror] = st.Send
				out = append(out, fmt.Sprintf("send m%d", st.Send.Mirror))
			}
			if st.Probing {
				probes[st.Probe.Mirror] = st.Probe
				out = append(out, fmt.Sprintf("probe m%d", st.Probe.Mirror))
			}
			if st.Wake > 0 {
				out = append(out, "wake="+tt.Time(st.Wake))
			}
			if st.Done {
				if st.Err != nil {
					out = append(out, "failed: "+st.Err.Error())
				} else {
					out = append(out, fmt.Sprintf("served m%d", st.Served.Mirror))
				}
			}
			if st.Report {
				out = append(out, "report")
			}
			if len(out) == 0 {
				return "-\n"
			}
			return strings.Join(out, " ") + "\n"
		}
		ints := func(a *tt.Args, key string) []int {
			var out []int
			for _, v := range a.Ints(key) {
				out = append(out, int(v))
			}
			return out
		}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			a := tt.New(t, td)
			defer a.Done()
			switch td.Cmd {
			case "new":
				n := int(a.Int("mirrors", 2))
				stale := make([]bool, n)
				for _, i := range ints(a, "stale") {
					stale[i] = true
				}
				var err error
				if s, err = NewSet(n, a.String("policy", Default), stale); err != nil {
					return err.Error() + "\n"
				}
				flights, probes = map[string]*flight{}, map[int]Send{}
				return fmt.Sprintf("live %v\n", s.Live())
			case "begin":
				name := a.Pos("")
				r := Read{PID: int(a.Int("pid", 0)), File: uint64(a.Int("file", 0)), Off: a.Bytes("off", 0), Len: a.Bytes("len", 4<<10)}
				var closed uint64
				for _, i := range ints(a, "closed") {
					closed |= 1 << i
				}
				fl := &flight{sends: map[int]Send{}}
				var st Step
				fl.f, st = s.Begin(a.Time("t", 0), r, closed)
				flights[name] = fl
				return step(fl, st)
			case "finish":
				fl := flights[a.Pos("")]
				m := int(a.Int("m", 0))
				sn, ok := fl.sends[m]
				if !ok {
					a.Time("t", 0)
					a.Flag("err")
					return fmt.Sprintf("no read of %s on m%d\n", td.CmdArgs[0].Key, m)
				}
				delete(fl.sends, m)
				var err error
				if a.Flag("err") {
					err = syscall.EIO
				}
				n := int(a.Bytes("n", fl.f.Read().Len))
				if err != nil {
					n = 0
				}
				return step(fl, s.Finished(a.Time("t", 0), &fl.f, sn, n, err))
			case "timer":
				fl := flights[a.Pos("")]
				return step(fl, s.Timer(a.Time("t", 0), &fl.f))
			case "probe":
				m := int(a.Int("m", 0))
				sn, ok := probes[m]
				if !ok {
					a.Time("t", 0)
					a.Flag("err")
					return fmt.Sprintf("no probe of m%d\n", m)
				}
				delete(probes, m)
				var err error
				if a.Flag("err") {
					err = syscall.EIO
				}
				if s.Done(a.Time("t", 0), sn, 4096, err) {
					return "report\n"
				}
				return "-\n"
			case "stale":
				changed, ok := s.MarkStale(int(a.Pos("0")[0] - '0'))
				return fmt.Sprintf("changed=%v ok=%v live %v\n", changed, ok, s.Live())
			case "add":
				i, err := s.Add()
				if err != nil {
					return err.Error() + "\n"
				}
				return fmt.Sprintf("m%d stale; live %v\n", i, s.Live())
			case "revive":
				i, err := strconv.Atoi(a.Pos("0"))
				if err != nil {
					t.Fatalf("%s: revive %v", td.Pos, err)
				}
				s.Revive(i)
				return fmt.Sprintf("live %v\n", s.Live())
			case "fanout":
				on := ints(a, "on")
				var out []Outcome
				for _, o := range a.Strings("out") {
					out = append(out, map[string]Outcome{"ok": OK, "failed": Failed, "gone": Gone}[o])
				}
				ok, marked := s.Fanout(on, out)
				return fmt.Sprintf("ok=%v marked=%v live %v\n", ok, marked, s.Live())
			case "policy":
				if err := s.SetPolicy(a.Pos("")); err != nil {
					return err.Error() + "\n"
				}
				return fmt.Sprintf("policy %s\n", s.Policy())
			case "stats":
				var b strings.Builder
				for i, c := range s.Stats() {
					fmt.Fprintf(&b, "m%d", i)
					if s.Stale(i) {
						b.WriteString(" stale")
					}
					for _, f := range []struct {
						k string
						v int64
					}{{"reads", c.Reads}, {"bytes", c.Bytes}, {"errors", c.Errors}, {"inflight", int64(c.Inflight)}, {"hedged", c.Hedged}} {
						if f.v != 0 {
							fmt.Fprintf(&b, " %s=%d", f.k, f.v)
						}
					}
					if c.Latency != 0 {
						b.WriteString(" latency=" + tt.Time(c.Latency))
					}
					b.WriteString("\n")
				}
				fmt.Fprintf(&b, "live %v\n", slices.Clone(s.Live()))
				return b.String()
			}
			t.Fatalf("%s: unknown directive %q", td.Pos, td.Cmd)
			return ""
		})
	})
}

// TestFlightMost: a flight reads at most the mirrors open for it when it
// began, the one it is sent to first among them; a mirror added since
// is not one.
func TestFlightMost(t *testing.T) {
	s, err := NewSet(3, "roundrobin", nil)
	if err != nil {
		t.Fatal(err)
	}
	f, st := s.Begin(0, Read{Len: 4096}, 1<<1)
	if !st.Sending || f.Most() != 2 {
		t.Errorf("a read of 3 mirrors, one closed: sending %v, at most %d reads, want 2", st.Sending, f.Most())
	}
	if _, err := s.Add(); err != nil {
		t.Fatal(err)
	}
	s.Revive(3)
	if f.Most() != 2 {
		t.Errorf("at most %d reads once a mirror was added, want 2", f.Most())
	}
	if f, _ = s.Begin(0, Read{Len: 4096}, 0); f.Most() != 4 {
		t.Errorf("a read begun after the add: at most %d reads, want 4", f.Most())
	}
}
