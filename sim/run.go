// Package sim runs sluice's stack on virtual time: modelled devices
// (device.Model), fio-like jobs and a FUSE round trip per request, driving
// the very stack.Stack that `sluice mount` drives through the engine. Only
// the clock, the devices and the request source are simulated. A run is
// deterministic: the same scenario and seed give the same result, byte
// for byte; page contents never exist (every page is one shared buffer),
// so memory is bounded by the stack's cache whatever a run moves.
package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"sluice/device"
	"sluice/mirror"
	"sluice/stack"
)

// bucket is the width of the time series.
const bucket = int64(100 * time.Millisecond)

type runner struct {
	sc      *Scenario
	opts    stack.Options
	now     int64
	seq     uint64
	q       events
	st      *stack.Stack
	wakeAt  int64
	devs    map[string]*device.Model
	devList []*device.Model
	devFile []*stack.Handle // per device, the handle a sync flushes
	jobs    []*jobRun
	files   []*file
	stop    int64
	fuseLat int64
	// wakeLate is how late the stack's wake-ups come, drawn from wakeRNG.
	wakeLate device.Dist
	wakeRNG  *rand.Rand
	maxRead  int64
	free     []*call
	pages    [][]byte
	names    []string  // series names, in order
	series   [][]int64 // per series, bytes per bucket
	kernel   kernel
	mirrors  []int // device indexes of the mirror set
	policy   mirror.Policy
	cur      *thread // the thread whose request is being submitted
	// busy is when the last device I/O or application request finished:
	// the run's end, whatever wake-ups (a dirty span's expiry) follow.
	busy int64
	// fanout counts, per write or flush sent to every mirror, the mirrors
	// still to answer, and the first error.
	fanout map[*stack.IO]*fan
	// pc is the kernel's page cache, and kio the device reads made for
	// the kernel's FUSE reads, by their call.
	pc  pcache
	kio map[*stack.IO]*call
}

// Run runs sc and returns its result.
func Run(sc *Scenario) (*Result, error) {
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
	r.fanout = map[*stack.IO]*fan{}
	r.kio = map[*stack.IO]*call{}
	r.pc.limit = int64(sc.Mount.PageCache)
	if r.pc.limit == 0 {
		r.pc.limit = defaultPageCache
	}
	for i, d := range sc.Devices {
		m := &device.Model{Name: d.Name, Bandwidth: int64(d.Bandwidth), Latency: d.Latency.Dist, QueueDepth: d.QueueDepth}
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
	for _, name := range sc.Mount.Mirrors {
		for i, d := range sc.Devices {
			if d.Name == name {
				r.mirrors = append(r.mirrors, i)
			}
		}
	}
	if len(r.mirrors) > 0 {
		name := sc.Mount.ReadPolicy
		if name == "" {
			name = mirror.Default
		}
		if r.policy, err = mirror.New(name, len(r.mirrors)); err != nil {
			return nil, err
		}
	}
	pid := 1000
	for _, g := range sc.Groups {
		l, _ := sc.limits(g)
		r.st.SetLimits(0, g.Name, l)
	}
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
				f = &file{ino: uint64(len(r.files) + 1), dev: dev, devi: devi, name: fmt.Sprintf("%s.%d", j.Name, k),
					mirrored: len(r.mirrors) > 0 && j.Device == ""}
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
			if j.RW == "read" || j.RW == "randread" {
				// As the mount opens it: through the kernel's page cache
				// (sluice paces what the kernel sends; a short reply at
				// the end of the file is taken whole) or with direct I/O.
				t.kernel = kernelServed(sc.Mount.CacheMode, jr.g)
				t.h.Whole = t.kernel
			} else if sc.Mount.WriteCache {
				// As the mount opens it with --write-cache: through the
				// page cache for groups without a write limit, and in
				// kernel cache mode for those whose limits qualify.
				t.cachedW = !jr.g.Limited() || sc.Mount.CacheMode == "kernel" &&
					stack.WritesCached(jr.g.PathLimits(), r.kernel.limit, opts.MaxIO)
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
	for r.q.len() > 0 {
		ev := r.q.pop()
		if r.stop > 0 && ev.at > r.stop {
			r.now = r.stop
			break
		}
		r.now = ev.at
		switch ev.kind {
		case evJob:
			for _, t := range ev.j.threads {
				for range max(ev.j.IODepth, 1) {
					r.next(t)
				}
			}
		case evSubmit:
			r.submit(ev.c)
		case evReply:
			r.reply(ev.c)
		case evDevice:
			r.deviceDone(ev)
		case evProbe:
			r.count(ev.dev, r.now, ev.n)
			r.policy.Done(r.now, ev.m, ev.sent, ev.err)
		case evHedge:
			r.hedge(ev)
		case evNext:
			r.next(ev.t)
		case evWake:
			if r.wakeAt != ev.n {
				continue // replaced by an earlier wake-up
			}
			r.wakeAt = -1
			r.apply(r.st.Tick(r.now))
		}
	}
	return r.result(), nil
}

// track adds a time series and returns its index.
func (r *runner) track(name string) int {
	for i, n := range r.names {
		if n == name {
			return i
		}
	}
	r.names = append(r.names, name)
	r.series = append(r.series, nil)
	return len(r.names) - 1
}

func (r *runner) count(series int, at, n int64) {
	b := int(at / bucket)
	s := r.series[series]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	r.series[series] = s
}
