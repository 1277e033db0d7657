package fsys

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/backing"
	"sluice/cluster"
	"sluice/group"
	"sluice/internal/redistest"
)

// TestClusterDeviceShareOnMount: three mounts stand for three hosts of one
// cluster, serving one SOURCE from one disk: each reads it through a
// backing wrapper whose reads queue on one shared backing.Disk, one block
// at a time for 2 ms each (a disk of up to 500 reads a second, as in
// TestDeviceShareOnMount). Tenant a (weight 200, uid 1001) reads through
// the first, tenant b (weight 100, uid 1002) through the second and the
// third, 4 blocks of 4 KiB at a time on each host, at random, with
// O_DIRECT. What the disk serves is measured first, b alone on one host
// with no weight anywhere.
//
//   - Apart, each host shares only its own part of the disk: the disk
//     splits them by their queues, b taking about twice a's (logged).
//   - Joined over a real redis-server (package cluster), the hosts divide
//     the disk by weight between them: from 3 s on, a and b read 2:1
//     within 10 %, and together take at least 0.8 of what the disk serves;
//   - once a stops, b alone takes at least 0.85 of it within 2 s (work
//     conservation across hosts).
func TestClusterDeviceShareOnMount(t *testing.T) {
	if testing.Short() {
		t.Skip("measures rates for about 25 s")
	}
	dir := t.TempDir()
	r := redistest.Start(t, dir)
	src := loopFS(t, 256<<20)
	for _, n := range []string{"a", "b"} {
		writeRandom(t, filepath.Join(src, n), 32<<20, uint64(n[0]))
		os.Chmod(filepath.Join(src, n), 0o644)
	}
	os.Chmod(src, 0o755)
	disk := backing.NewDisk()
	tenants := map[string]int{"a": 1001, "b": 1002}
	status := map[string]func() cluster.Status{}

	// host mounts SOURCE over the shared disk with the weights given (none
	// for no policy), joined to the cluster where join is set.
	host := func(t *testing.T, name string, weights bool, join bool) string {
		var rules []group.Rule
		var limits []group.LimitSpec
		for n, uid := range tenants {
			rules = append(rules, group.Rule{Group: n, UID: new(uint32(uid))})
		}
		if weights {
			limits = append(limits, limit(t, "a weight=200"), limit(t, "b weight=100"))
		}
		local, err := backing.NewLocal(src, backing.LocalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tree, err := backing.NewFaultTree(local, backing.FaultOptions{Rules: []backing.FaultRule{
			{Ops: backing.OpRead, Delay: 2 * time.Millisecond, Serial: true, Disk: disk}}})
		if err != nil {
			t.Fatal(err)
		}
		_, mnt, f := mount(t, Options{Rules: rules, Limits: limits, Tree: tree, AllowOther: true})
		if join {
			c, err := cluster.Join(context.Background(), f.Engine(), cluster.Options{URL: r.URL(), Name: "t", Host: name})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			status[name] = c.Status
		}
		return mnt
	}
	// read runs each tenant's readers, 4 through each of its hosts'
	// mounts, until its stop, and returns its count of reads.
	read := func(t *testing.T, start time.Time, mnts map[string][]string, stops map[string]time.Duration, wg *sync.WaitGroup) map[string]*atomic.Int64 {
		counts := map[string]*atomic.Int64{}
		for n, ms := range mnts {
			c := new(atomic.Int64)
			counts[n] = c
			for k := range 4 * len(ms) {
				mnt := ms[k%len(ms)]
				wg.Go(func() {
					runAs(tenants[n], func() {
						if err := randomReads(filepath.Join(mnt, n), start.Add(stops[n]), uint64(tenants[n]*10+k), c); err != nil {
							t.Errorf("%s: %v", n, err)
						}
					})
				})
			}
		}
		return counts
	}
	sample := func(start time.Time, at time.Duration, counts map[string]*atomic.Int64) map[string]int64 {
		time.Sleep(time.Until(start.Add(at)))
		m := map[string]int64{}
		for k, v := range counts {
			m[k] = v.Load()
		}
		return m
	}
	rates := func(s0, s1 map[string]int64, d time.Duration) map[string]float64 {
		out := map[string]float64{}
		for k := range s1 {
			out[k] = float64(s1[k]-s0[k]) / d.Seconds()
		}
		return out
	}

	var capacity float64
	t.Run("no policy", func(t *testing.T) {
		mnt := host(t, "h2", false, false)
		var wg sync.WaitGroup
		start := time.Now()
		counts := read(t, start, map[string][]string{"b": {mnt}}, map[string]time.Duration{"b": 4 * time.Second}, &wg)
		s0, s1 := sample(start, time.Second, counts), sample(start, 3500*time.Millisecond, counts)
		wg.Wait()
		capacity = rates(s0, s1, 2500*time.Millisecond)["b"]
		t.Logf("the disk serves %.0f reads a second", capacity)
		if capacity < 100 {
			t.Fatalf("the disk served %.0f reads a second: too few to measure shares", capacity)
		}
	})
	if capacity == 0 {
		return
	}
	for _, joined := range []bool{false, true} {
		t.Run(map[bool]string{false: "apart", true: "joined"}[joined], func(t *testing.T) {
			mnts := map[string][]string{"a": {host(t, "h1", true, joined)}, "b": {host(t, "h2", true, joined), host(t, "h3", true, joined)}}
			run := 6 * time.Second
			stops := map[string]time.Duration{"a": run, "b": run}
			if joined {
				run = 11 * time.Second
				stops = map[string]time.Duration{"a": 7 * time.Second, "b": run}
			}
			var wg sync.WaitGroup
			start := time.Now()
			counts := read(t, start, mnts, stops, &wg)
			// Each second's rates are logged; the figures are from 3 s (the
			// disk learned, the shares found) to 0.5 s before a stops.
			var s0, s1 map[string]int64
			prev := sample(start, 0, counts)
			var seconds []string
			for at := time.Second; at <= stops["a"]-time.Second; at += time.Second {
				cur := sample(start, at, counts)
				r := rates(prev, cur, time.Second)
				seconds = append(seconds, fmt.Sprintf("%.0f:%.0f", r["a"], r["b"]))
				if at == 3*time.Second {
					s0 = cur
				}
				prev = cur
			}
			s1 = sample(start, stops["a"]-500*time.Millisecond, counts)
			if joined {
				// What stat and /metrics show of it: each host's lease of
				// device time, the device divided 2:1 between the groups.
				dev := map[string]cluster.Cap{}
				for _, h := range []string{"h1", "h2", "h3"} {
					for _, x := range status[h]().Caps {
						if x.Key == "dev" {
							dev[h+" "+x.Group] = x
						}
					}
				}
				// (Each host divides it as of its last answer, a tenth of a
				// second apart.)
				a, b2, b3 := dev["h1 a"], dev["h2 b"], dev["h3 b"]
				t.Logf("leases of device time: %+v", dev)
				if len(dev) != 3 || !a.Leased || !b2.Leased || !b3.Leased {
					t.Errorf("leases of device time %+v: want a's on h1, b's on h2 and h3", dev)
				} else if r := float64(a.Shared) / float64(b2.Shared+b3.Shared) * 2; r < 1.7 || r > 2.3 {
					t.Errorf("the device divided %d:%d reads a second between a and b, want 2:1", a.Shared, (b2.Shared+b3.Shared)/2)
				}
			}
			rate := rates(s0, s1, stops["a"]-3500*time.Millisecond)
			t.Logf("a:b reads each second: %s", strings.Join(seconds, " "))
			ratio := rate["a"] / rate["b"]
			t.Logf("a (weight 200, host h1) read %.0f/s, b (weight 100, hosts h2 and h3) %.0f/s: %.2f to 1, together %.2f of the disk",
				rate["a"], rate["b"], ratio, (rate["a"]+rate["b"])/capacity)
			if joined {
				if ratio < 1.8 || ratio > 2.2 {
					t.Errorf("joined, a and b read %.2f to 1, want 2", ratio)
				}
				if u := (rate["a"] + rate["b"]) / capacity; u < 0.8 {
					t.Errorf("joined, together they read %.2f of the %.0f/s the disk serves, want 0.8 or more", u, capacity)
				}
				a0, a1 := sample(start, stops["a"]+2*time.Second, counts), sample(start, run-500*time.Millisecond, counts)
				alone := rates(a0, a1, run-2500*time.Millisecond-stops["a"])["b"]
				t.Logf("b alone, from 2 s after a stopped: %.0f/s, %.2f of the disk", alone, alone/capacity)
				if alone/capacity < 0.85 {
					t.Errorf("b alone read %.0f/s, %.2f of the %.0f/s the disk serves, want 0.85 or more", alone, alone/capacity, capacity)
				}
			}
			wg.Wait()
		})
	}
}
