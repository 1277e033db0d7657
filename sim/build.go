package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"sluice/device"
	"sluice/stack"
	"sluice/throttle"
)

// newRunner builds the model of sc: the stack with the mount's options,
// the devices, the mirror set, the groups' limits and the jobs with their
// files and threads, each job's start on the timeline.
func newRunner(sc *Scenario) (*runner, error) {
	opts, err := sc.options()
	if err != nil {
		return nil, err
	}
	st, err := stack.New(opts)
	if err != nil {
		return nil, err
	}
	r := &runner{sc: sc, opts: opts, st: st, wakeAt: -1, devs: map[string]*device.Model{}}
	r.stop = int64(sc.Duration)
	r.fuseLat = int64(sc.Mount.FuseLatency)
	if r.wakeLate = sc.Mount.WakeLatency.Dist; r.wakeLate.Kind != "" {
		// A stream of its own: the other draws stay as they are.
		r.wakeRNG = rand.New(rand.NewPCG(sc.Seed, 1<<40))
	}
	r.maxRead = int64(sc.Mount.MaxRead)
	if r.maxRead == 0 {
		r.maxRead = 1 << 20
	}
	r.kernel.init(sc)
	r.kio = map[*stack.IO]*call{}
	r.pc.limit = int64(sc.Mount.PageCache)
	if r.pc.limit == 0 {
		r.pc.limit = defaultPageCache
	}
	r.addDevices()
	if r.mirrors, err = newMirrorSet(sc); err != nil {
		return nil, err
	}
	all := map[string]throttle.Limits{}
	for _, g := range sc.Groups {
		all[g.Name], _ = sc.limits(g)
	}
	if err := r.st.CheckLimits(all); err != nil {
		return nil, fmt.Errorf("groups: %v", err)
	}
	for _, g := range sc.Groups {
		r.st.SetLimits(0, g.Name, all[g.Name])
	}
	r.addJobs()
	return r, nil
}

// addDevices models the scenario's devices, each with its time series and
// the handle a sync flushes it by.
func (r *runner) addDevices() {
	sc := r.sc
	for i, d := range sc.Devices {
		m := &device.Model{Name: d.Name, Bandwidth: int64(d.Bandwidth), WriteBandwidth: int64(d.WriteBandwidth),
			Latency: d.Latency.Dist, Seek: d.Seek.Dist, QueueDepth: d.QueueDepth}
		if m.Latency.Kind == "" {
			m.Latency = device.Dist{Kind: "const"}
		}
		for _, s := range d.Slow {
			m.Slow = append(m.Slow, device.Slowdown{Window: device.Window{At: time.Duration(s.At), Until: time.Duration(s.Until)}, Factor: s.Factor})
		}
		for _, f := range d.Fail {
			m.Faults = append(m.Faults, device.Fault{Window: device.Window{At: time.Duration(f.At), Until: time.Duration(f.Until)}, Op: f.Op.Op})
		}
		m.Seed(sc.Seed*1000 + uint64(i))
		r.devs[d.Name] = m
		r.devList = append(r.devList, m)
		f := &file{ino: 1<<62 + uint64(i), dev: m, devi: i, name: d.Name}
		r.devFile = append(r.devFile, &stack.Handle{Ino: f.ino, File: f})
		r.track("device " + d.Name)
	}
}

// addJobs sets up the scenario's jobs: each copy (numjobs) a thread with
// its pid, random stream and open of its file (or the job's shared file),
// opened as the mount would; the job starts at its start.
func (r *runner) addJobs() {
	sc := r.sc
	pid := 1000
	for ji, j := range sc.Jobs {
		jr := &jobRun{Job: j, g: r.st.Group(j.Group)}
		jr.series = r.track("group " + jr.g.Path())
		devi := 0
		for i, d := range sc.Devices {
			if d.Name == j.Device {
				devi = i
			}
		}
		dev := r.devList[devi]
		var shared *file
		for k := range max(j.NumJobs, 1) {
			f := shared
			if f == nil {
				f = &file{ino: uint64(len(r.files) + 1), base: int64(len(r.files)) * fileSpan, dev: dev, devi: devi, name: fmt.Sprintf("%s.%d", j.Name, k),
					mirrored: r.mirrors.active() && j.Device == ""}
				if j.RW == "read" || j.RW == "randread" {
					f.size = int64(j.Size)
				}
				r.files = append(r.files, f)
				if j.Shared {
					shared = f
				}
			}
			t := &thread{job: jr, f: f, h: &stack.Handle{Ino: f.ino, File: f}, pid: pid,
				rng: rand.New(rand.NewPCG(sc.Seed, uint64(ji*1000+k+1)))}
			// As the mount opens it (stack.ServeOpen): a reader through
			// the kernel's page cache (sluice paces what the kernel
			// sends; a short reply at the end of the file is taken
			// whole) or with direct I/O; a writer, with --write-cache,
			// through the page cache for groups without a write limit,
			// and in kernel cache mode for those whose limits qualify.
			reads := j.RW == "read" || j.RW == "randread"
			cm, _ := stack.ParseCacheMode(sc.Mount.CacheMode)
			o := stack.Open{Limited: jr.g.Limited(), Writes: !reads, CacheMode: cm,
				WriteCache: sc.Mount.WriteCache, Dirty: r.kernel.limit, MaxIO: r.opts.MaxIO}
			if o.Limited {
				o.Limits = jr.g.PathLimits()
			}
			switch sv := stack.ServeOpen(o); {
			case reads:
				t.kernel = sv.Mode != stack.ServeDirect
				t.h.Whole = t.kernel
			case sc.Mount.WriteCache:
				t.cachedW = sv.CachedWrites
				t.h.Whole = t.cachedW
			}
			pid++
			if f.owner == nil {
				f.owner = t
			}
			jr.threads = append(jr.threads, t)
		}
		r.jobs = append(r.jobs, jr)
		start := int64(j.Start)
		if j.Runtime > 0 {
			jr.end = start + int64(j.Runtime)
		}
		r.push(event{at: start, kind: evJob, j: jr})
	}
}
