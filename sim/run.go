// Package sim runs sluice's stack on virtual time: modelled devices
// (device.Model), fio-like jobs and a FUSE round trip per request, driving
// the very stack.Stack that `sluice mount` drives through the engine. Only
// the clock, the devices and the request source are simulated. A run is
// deterministic: the same scenario and seed give the same result, byte
// for byte; page contents never exist (every page is one shared buffer),
// so memory is bounded by the stack's cache whatever a run moves.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"sluice/device"
	"sluice/stack"
	"sluice/throttle"
)

// bucket is the width of the time series.
const bucket = int64(100 * time.Millisecond)

// zeroPage stands for every page's contents.
var zeroPage = make([]byte, stack.PageSize)

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// file is a simulated backing file: its size and device.
type file struct {
	ino  uint64
	size int64
	dev  *device.Model
	name string
}

// thread is one copy of a job (fio's numjobs).
type thread struct {
	job     *jobRun
	h       *stack.Handle
	f       *file
	off     int64 // next sequential offset
	rng     *rand.Rand
	issued  int64 // bytes of requests started
	writes  int
	stopped bool
}

// jobRun gathers a job's copies and results.
type jobRun struct {
	Job
	g       *throttle.Group
	threads []*thread
	bytes   int64
	ios     int64
	shorts  int64
	clat    hist
	first   int64
	last    int64
	end     int64 // runtime end, absolute
}

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
	jobs    []*jobRun
	files   []*file
	stop    int64
	fuseLat int64
	maxRead int64
	series  map[string][]int64 // per series name, bytes per bucket
	order   []string
}

func (r *runner) at(t int64, fn func()) {
	r.seq++
	heap.Push(&r.q, &event{at: t, seq: r.seq, fn: fn})
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
	r := &runner{sc: sc, opts: opts, st: st, wakeAt: -1, devs: map[string]*device.Model{}, series: map[string][]int64{}}
	r.stop = int64(sc.Duration)
	r.fuseLat = int64(sc.Mount.FuseLatency)
	r.maxRead = int64(sc.Mount.MaxRead)
	if r.maxRead == 0 {
		r.maxRead = 1 << 20
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
		r.track("device " + d.Name)
	}
	for _, g := range sc.Groups {
		l, _ := sc.limits(g)
		r.st.SetLimits(0, g.Name, l)
	}
	for ji, j := range sc.Jobs {
		jr := &jobRun{Job: j, g: r.st.Group(j.Group)}
		r.track("group " + jr.g.Path())
		dev := r.devList[0]
		if j.Device != "" {
			dev = r.devs[j.Device]
		}
		var shared *file
		for k := range max(j.NumJobs, 1) {
			f := shared
			if f == nil {
				f = &file{ino: uint64(len(r.files) + 1), dev: dev, name: fmt.Sprintf("%s.%d", j.Name, k)}
				if j.RW == "read" || j.RW == "randread" {
					f.size = int64(j.Size)
				}
				r.files = append(r.files, f)
				if j.Shared {
					shared = f
				}
			}
			t := &thread{job: jr, f: f, h: &stack.Handle{Ino: f.ino, File: f},
				rng: rand.New(rand.NewPCG(sc.Seed, uint64(ji*1000+k+1)))}
			jr.threads = append(jr.threads, t)
		}
		r.jobs = append(r.jobs, jr)
		start := int64(j.Start)
		if j.Runtime > 0 {
			jr.end = start + int64(j.Runtime)
		}
		r.at(start, func() {
			for _, t := range jr.threads {
				for range max(j.IODepth, 1) {
					r.next(t)
				}
			}
		})
	}
	for r.q.Len() > 0 {
		ev := heap.Pop(&r.q).(*event)
		if r.stop > 0 && ev.at > r.stop {
			r.now = r.stop
			break
		}
		r.now = ev.at
		ev.fn()
	}
	return r.result(), nil
}

func (r *runner) track(name string) {
	if _, ok := r.series[name]; !ok {
		r.series[name] = nil
		r.order = append(r.order, name)
	}
}

func (r *runner) count(name string, at, n int64) {
	b := int(at / bucket)
	s := r.series[name]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	r.series[name] = s
}

// next starts the thread's next application request, if the job goes on.
func (r *runner) next(t *thread) {
	j := t.job
	if t.stopped {
		return
	}
	if j.end > 0 && r.now >= j.end {
		t.stopped = true
		return
	}
	size := int64(j.Size)
	bs := int64(j.BS)
	if !j.TimeBased && t.issued >= size {
		t.stopped = true
		return
	}
	var off int64
	switch j.RW {
	case "randread", "randwrite":
		off = t.rng.Int64N(max(size/bs, 1)) * bs
	default:
		if t.off >= size {
			t.off = 0 // time-based: around again
		}
		off = t.off
		t.off += bs
	}
	t.issued += bs
	start := r.now
	write := j.RW == "write" || j.RW == "randwrite"
	r.call(t, write, off, bs, 0, start)
}

// call sends one FUSE request for the part of an application request
// from done on, at most maxRead bytes; the kernel sends the next part when
// this one is answered, and a short answer is continued (fio resubmits the
// rest), until the whole request is served or a read finds the end.
func (r *runner) call(t *thread, write bool, off, n, done, start int64) {
	j := t.job
	part := min(n-done, r.maxRead)
	req := &stack.Request{}
	req.Value = func() {
		got := req.Size()
		if req.Err != nil {
			got = 0
		}
		r.at(r.now+r.fuseLat/2, func() {
			if got < part {
				j.shorts++
			}
			j.bytes += got
			r.count("group "+j.g.Path(), r.now, got)
			if got > 0 && done+got < n && req.Err == nil {
				r.call(t, write, off, n, done+got, start)
				return
			}
			r.finished(t, write, start)
		})
	}
	r.at(r.now+r.fuseLat/2, func() {
		if write {
			r.apply(r.st.Write(r.now, t.h, j.g, off+done, part, req))
		} else {
			r.apply(r.st.Read(r.now, t.h, j.g, off+done, part, req))
		}
	})
}

// finished records an application request and starts the next, after an
// fsync when one is due.
func (r *runner) finished(t *thread, write bool, start int64) {
	j := t.job
	j.ios++
	j.clat.add(r.now - start)
	if j.first == 0 {
		j.first = start
	}
	j.last = r.now
	if write && j.Fsync > 0 {
		if t.writes++; t.writes%j.Fsync == 0 {
			req := &stack.Request{}
			req.Value = func() { r.at(r.now+r.fuseLat/2, func() { r.next(t) }) }
			r.at(r.now+r.fuseLat/2, func() { r.apply(r.st.Sync(r.now, t.h, j.g, req)) })
			return
		}
	}
	r.next(t)
}

// apply performs the stack's actions on virtual time.
func (r *runner) apply(a stack.Actions) {
	for _, io := range a.Start {
		f := io.File.(*file)
		op := device.Read
		switch io.Op {
		case stack.OpWrite:
			op = device.Write
		case stack.OpFlush:
			op = device.Flush
		}
		n := io.Len
		if op == device.Read {
			n = max(min(io.Len, f.size-io.Off), 0)
		}
		doneAt, err := f.dev.Start(r.now, op, n)
		r.at(doneAt, func() {
			r.count("device "+f.dev.Name, r.now, n)
			switch op {
			case device.Read:
				var pages [][]byte
				if err == nil {
					for k := int64(0); k < n; k += stack.PageSize {
						pages = append(pages, zeroPage[:min(stack.PageSize, n-k)])
					}
				}
				r.apply(r.st.Complete(r.now, io, pages, err))
			case device.Write:
				if err == nil {
					f.size = max(f.size, io.Off+io.Len)
				}
				r.apply(r.st.Wrote(r.now, io, io.Len, err))
			default:
				r.apply(r.st.Wrote(r.now, io, 0, err))
			}
		})
	}
	for _, req := range a.Done {
		req.Value.(func())()
	}
	if a.Wake >= 0 && (r.wakeAt < 0 || r.wakeAt <= r.now || a.Wake < r.wakeAt) {
		r.wakeAt = a.Wake
		at := a.Wake
		r.at(at, func() {
			if r.wakeAt != at {
				return // replaced by an earlier wake-up
			}
			r.wakeAt = -1
			r.apply(r.st.Tick(r.now))
		})
	}
}
