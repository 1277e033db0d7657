package fsys

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/group"
)

// TestDeviceShareOnMount: tenants with weights and no caps share SOURCE
// itself, by device time, once it is saturated. SOURCE is an ext4 on a
// loop device, served through a backing wrapper that reads one block at a
// time for 2 ms each (backing.FaultRule.Serial), as a disk of up to 500
// reads a second: the loop device alone serves more than the mount can
// ask of it, and the kernel's blk-throttle, the other way to slow it,
// dispatches in slices and stalls reads for up to 100 ms (seen with fio at
// 1000 IOPS), which is no disk. The tenants, as uids 1001-1003, read 4 KiB
// blocks at random with O_DIRECT, 4 at a time each, so each alone takes
// the whole device. What the device serves is measured first, one tenant
// alone with no weight anywhere (no policy: the device is not shared);
// then, over each run, from the tenants' own counts:
//
//   - weights 200 and 100 split the device 2:1 within 10 %, and together
//     take at least 0.8 of what it serves (0.85-0.90 seen: the capacity
//     is kept a little below the device, so that requests wait where
//     they are ordered);
//   - the weight-100 tenant alone, once the other stopped, takes at least
//     0.85 of it (work conservation);
//   - a floor of 0.4 of it for a tenant of weight 100 beside two of weight
//     300 holds within 10 %, and they split the rest evenly.
func TestDeviceShareOnMount(t *testing.T) {
	if testing.Short() {
		t.Skip("measures rates for about 25 s")
	}
	src := loopFS(t, 256<<20)
	for _, n := range []string{"a", "b", "c"} {
		writeRandom(t, filepath.Join(src, n), 32<<20, uint64(n[0]))
		os.Chmod(filepath.Join(src, n), 0o644)
	}
	os.Chmod(src, 0o755)

	type tenant struct {
		name string
		uid  int
		stop time.Duration // stops reading (0: at the end)
	}
	var capacity float64 // reads a second, measured first
	for _, c := range []struct {
		name    string
		limits  func() []string
		tenants []tenant
		run     time.Duration
		check   func(t *testing.T, rate map[string]float64, alone float64)
	}{
		{"no policy", func() []string { return nil }, []tenant{{"b", 1002, 0}}, 4 * time.Second,
			func(t *testing.T, rate map[string]float64, _ float64) {
				capacity = rate["b"]
				if capacity < 100 {
					t.Fatalf("the device served %.0f reads a second: too few to measure shares", capacity)
				}
			}},
		{"weights 200 and 100", func() []string { return []string{"a weight=200", "b weight=100"} },
			[]tenant{{"a", 1001, 0}, {"b", 1002, 0}}, 6 * time.Second,
			func(t *testing.T, rate map[string]float64, _ float64) {
				if r := rate["a"] / rate["b"]; r < 1.8 || r > 2.2 {
					t.Errorf("a (weight 200) read %.0f/s, b (weight 100) %.0f/s: %.2f to 1, want 2", rate["a"], rate["b"], r)
				}
				if u := (rate["a"] + rate["b"]) / capacity; u < 0.8 {
					t.Errorf("together they read %.0f/s, %.2f of the %.0f/s the device serves", rate["a"]+rate["b"], u, capacity)
				}
			}},
		{"work conservation", func() []string { return []string{"a weight=200", "b weight=100"} },
			[]tenant{{"a", 1001, 3 * time.Second}, {"b", 1002, 0}}, 6 * time.Second,
			func(t *testing.T, _ map[string]float64, alone float64) {
				if u := alone / capacity; u < 0.85 {
					t.Errorf("b alone after a stopped read %.0f/s, %.2f of the %.0f/s the device serves", alone, u, capacity)
				}
			}},
		{"a floor", func() []string {
			return []string{fmt.Sprintf("a weight=100 riops.min=%d", int(0.4*capacity)), "b weight=300", "c weight=300"}
		}, []tenant{{"a", 1001, 0}, {"b", 1002, 0}, {"c", 1003, 0}}, 6 * time.Second,
			func(t *testing.T, rate map[string]float64, _ float64) {
				floor := float64(int(0.4 * capacity))
				if r := rate["a"] / floor; r < 0.9 || r > 1.1 {
					t.Errorf("a (floor %.0f/s) read %.0f/s", floor, rate["a"])
				}
				if r := rate["b"] / rate["c"]; r < 0.85 || r > 1.15 {
					t.Errorf("b and c (weight 300 each) read %.0f and %.0f/s", rate["b"], rate["c"])
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rules []group.Rule
			var limits []group.LimitSpec
			for _, tn := range c.tenants {
				rules = append(rules, group.Rule{Group: tn.name, UID: new(uint32(tn.uid))})
			}
			for _, l := range c.limits() {
				limits = append(limits, limit(t, l))
			}
			local, err := backing.NewLocal(src, backing.LocalOptions{})
			if err != nil {
				t.Fatal(err)
			}
			disk, err := backing.NewFaultTree(local, backing.FaultOptions{Rules: []backing.FaultRule{
				{Ops: backing.OpRead, Delay: 2 * time.Millisecond, Serial: true}}})
			if err != nil {
				t.Fatal(err)
			}
			_, mnt, f := mount(t, Options{Rules: rules, Limits: limits, Tree: disk, AllowOther: true})
			counts := map[string]*atomic.Int64{}
			var wg sync.WaitGroup
			start := time.Now()
			for _, tn := range c.tenants {
				n := new(atomic.Int64)
				counts[tn.name] = n
				stop := c.run
				if tn.stop != 0 {
					stop = tn.stop
				}
				for k := range 4 {
					wg.Go(func() {
						runAs(tn.uid, func() {
							if err := randomReads(filepath.Join(mnt, tn.name), start.Add(stop), uint64(tn.uid*10+k), n); err != nil {
								t.Errorf("%s: %v", tn.name, err)
							}
						})
					})
				}
			}
			// Rates are read between moments inside the run: from 1 s
			// (the device learned, the capacity found) to 0.5 s before a
			// tenant stops.
			sample := func(at time.Duration) map[string]int64 {
				time.Sleep(time.Until(start.Add(at)))
				m := map[string]int64{}
				for k, v := range counts {
					m[k] = v.Load()
				}
				return m
			}
			first := c.run - 500*time.Millisecond
			for _, tn := range c.tenants {
				if tn.stop != 0 {
					first = min(first, tn.stop-500*time.Millisecond)
				}
			}
			s0, s1 := sample(time.Second), sample(first)
			rate := map[string]float64{}
			for k := range counts {
				rate[k] = float64(s1[k]-s0[k]) / (first - time.Second).Seconds()
			}
			// The survivor alone: from 1 s after the others stopped.
			var alone float64
			if first < c.run-500*time.Millisecond {
				a0 := sample(first + 1500*time.Millisecond)
				a1 := sample(c.run - 500*time.Millisecond)
				for _, tn := range c.tenants {
					if tn.stop == 0 {
						alone = float64(a1[tn.name]-a0[tn.name]) / (c.run - 2*time.Second - first).Seconds()
					}
				}
			}
			wg.Wait()
			d := f.Engine().Metrics().Device
			t.Logf("reads a second: %v; alone %.0f; device: shared %v, capacity %.3f s/s, 4 KiB random read %v, %d of %d periods saturated",
				fmt.Sprint(rate), alone, d.Shared, d.Capacity, time.Duration(d.ReadNs), d.Saturations, d.Periods)
			if d.Shared != (len(limits) > 0) {
				t.Errorf("the device is shared %v with limits %q", d.Shared, c.limits())
			}
			c.check(t, rate, alone)
		})
	}
}

// randomReads reads path in 4 KiB blocks at random offsets with O_DIRECT
// until the deadline, counting each read in n.
func randomReads(path string, deadline time.Time, seed uint64, n *atomic.Int64) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	blocks := st.Size / 4096
	buf := *alignedBuf(4096).(*[]byte)
	rng := rand.New(rand.NewPCG(seed, seed))
	for time.Now().Before(deadline) {
		if _, err := unix.Pread(fd, buf, rng.Int64N(blocks)*4096); err != nil {
			return err
		}
		n.Add(1)
	}
	return nil
}
