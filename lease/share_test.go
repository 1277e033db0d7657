package lease

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// pub is a host's published figures for the tests: its device state and
// groups as weight, use and busy share.
func pub(host string, capacity, saturated bool, groups ...shareGroup) HostShare {
	return HostShare{Host: host, Capacity: capacity, Saturated: saturated, groups: groups}
}

func TestAllot(t *testing.T) {
	busy := func(g string, w, use int64) shareGroup { return shareGroup{group: g, weight: w, use: use, busy: 1} }
	paced := func(g string, w, use int64) shareGroup { return shareGroup{group: g, weight: w, use: use, busy: 0.3} }
	for _, c := range []struct {
		name string
		pool []HostShare
		last map[string]int64
		want map[string]int64
	}{
		{"no host holds the device at a capacity", []HostShare{
			pub("h1", false, false, busy("a", 200, 250)), pub("h2", false, false, busy("b", 100, 750))}, nil, nil},
		{"one group alone", []HostShare{
			pub("h1", true, true, busy("a", 200, 1000), busy("b", 100, 0))}, nil, nil},
		// The case: a of weight 200 on one host, b of weight 100
		// on three, the disk splitting them by their queues, 1 to 3.
		{"weights across hosts", []HostShare{
			pub("h1", true, true, busy("a", 200, 250)),
			pub("h2", true, true, busy("b", 100, 250)), pub("h3", false, false, busy("b", 100, 250)), pub("h4", true, false, busy("b", 100, 250))},
			nil, map[string]int64{"a": 666, "b": 333}},
		{"not saturated: a twentieth more to grow into", []HostShare{
			pub("h1", true, false, busy("a", 200, 500)), pub("h2", true, false, busy("b", 100, 500))},
			nil, map[string]int64{"a": 700, "b": 350}},
		// Busy, but a used less than nine tenths of its last part, the
		// device not saturated: its own pace holds it (its queue depth),
		// not b, who may grow into what a does not use.
		{"busy, using less than its part, the device with room", []HostShare{
			pub("h1", true, false, busy("a", 200, 480)), pub("h2", true, false, busy("b", 100, 320))},
			map[string]int64{"a": 600, "b": 300}, map[string]int64{"a": 510, "b": 330}},
		{"the same where the device is saturated: a wants its part", []HostShare{
			pub("h1", true, true, busy("a", 200, 480)), pub("h2", true, false, busy("b", 100, 320))},
			map[string]int64{"a": 600, "b": 300}, map[string]int64{"a": 533, "b": 266}},
		{"a paced group gets its use and a sixteenth, the busy one the rest", []HostShare{
			pub("h1", true, true, paced("a", 200, 160)), pub("h2", true, true, busy("b", 100, 840))},
			nil, map[string]int64{"a": 170, "b": 830}},
		{"no group wants more than it uses: each its use and a sixteenth", []HostShare{
			pub("h1", true, true, paced("a", 300, 320)), pub("h2", true, true, paced("b", 100, 160))},
			nil, map[string]int64{"a": 340, "b": 170}},
		{"the largest weight of a group's hosts", []HostShare{
			pub("h1", true, true, busy("a", 100, 300)), pub("h2", true, true, busy("a", 300, 300), busy("b", 100, 400))},
			nil, map[string]int64{"a": 750, "b": 250}},
	} {
		t.Run(c.name, func(t *testing.T) {
			held := false
			for _, h := range c.pool {
				held = held || h.Capacity
			}
			got := Allot(c.pool, held, c.last)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("Allot = %v, want %v", got, c.want)
			}
			var sum int64
			for _, v := range got {
				sum += v
			}
			var used int64
			for _, h := range c.pool {
				for _, g := range h.groups {
					used += g.use
				}
			}
			if got != nil && (float64(sum) > float64(used)*17/16 || sum < used*99/100) {
				t.Errorf("Allot divides %d, of a use of %d", sum, used)
			}
		})
	}
}

// TestSharesThroughScript: two hosts publish their groups' figures
// through the script; each gets both, and both divide the device alike. A
// host that stops publishing is dropped at once; one that stops asking,
// once its lease ends.
func TestSharesThroughScript(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	w.mr.SetTime(w.epoch)
	hosts := []*Host{NewHost(Options{}), NewHost(Options{})}
	ask := func(i int, now int64, d DeviceUse, use []ShareUse) Reply {
		h := hosts[i]
		h.SetShares(now, d, use)
		req := h.Request(now, nil)
		keys, args := req.Args("test", fmt.Sprint("h", i), h.Options())
		w.mr.SetTime(w.epoch.Add(time.Duration(now)))
		v, err := w.script.Run(context.Background(), w.rdb, keys, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseReply(v, 0)
		if err != nil {
			t.Fatal(err)
		}
		h.Answer(now+ms, r)
		return r
	}
	held := DeviceUse{Capacity: true, Saturated: true}
	// Two requests a Renew apart: the second measures the rates.
	for k, now := range []int64{0, 100 * ms} {
		n := int64(k)
		ask(0, now, held, []ShareUse{{Group: "a", Weight: 200, Units: n * 25e6, BusyNs: now}})
		ask(1, now, held, []ShareUse{{Group: "b", Weight: 100, Units: n * 75e6, BusyNs: now}})
	}
	r := ask(0, 200*ms, held, []ShareUse{{Group: "a", Weight: 200, Units: 2 * 25e6, BusyNs: 200 * ms}})
	if len(r.Pool) != 2 {
		t.Fatalf("the pool holds %d hosts' figures, want 2: %+v", len(r.Pool), r.Pool)
	}
	a, b := hosts[0].Allots(201*ms), hosts[1].Allots(201*ms)
	want := map[string]int64{"a": 666666666, "b": 333333333}
	if fmt.Sprint(a) != fmt.Sprint(want) || fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("the hosts divide the device as %v and %v, want %v each", a, b, want)
	}
	if !hosts[0].ShareActive("a") || hosts[0].ShareActive("b") {
		t.Errorf("h0: a active %v, b active %v; want a only", hosts[0].ShareActive("a"), hosts[0].ShareActive("b"))
	}
	// h1 publishes nothing more (its device not shared): dropped at once.
	ask(1, 300*ms, DeviceUse{}, nil)
	if r := ask(0, 300*ms, held, []ShareUse{{Group: "a", Weight: 200, Units: 3 * 25e6, BusyNs: 300 * ms}}); len(r.Pool) != 1 || r.Pool[0].Host != "h0" {
		t.Errorf("after h1 published nothing, the pool is %+v, want h0's alone", r.Pool)
	}
	if got := hosts[0].Allots(301 * ms); got != nil {
		t.Errorf("one group alone is divided as %v, want nothing", got)
	}
	// h1 publishes again, then stops asking: its figures hold until its
	// lease ends, a second after it asked.
	ask(1, 400*ms, held, []ShareUse{{Group: "b", Weight: 100, Units: 0, BusyNs: 0}})
	if r := ask(0, 1300*ms, held, nil); len(r.Pool) != 1 {
		t.Errorf("at 1.3 s the pool holds %d hosts' figures, want h1's alone, its lease holding", len(r.Pool))
	}
	if r := ask(0, 1500*ms, held, nil); len(r.Pool) != 0 {
		t.Errorf("at 1.5 s the pool holds %+v, want nothing: h1's lease ended and h0 publishes nothing", r.Pool)
	}
	// Answers older than a Lease divide nothing.
	if got := hosts[0].Allots(1500*ms + int64(DefaultLease) + 2*ms); got != nil {
		t.Errorf("a Lease after the last answer, the device is divided as %v, want nothing", got)
	}
}
