// Package sim runs sluice's stack on virtual time: modelled devices
// (device.Model), fio-like jobs and a FUSE round trip per request, driving
// the very stack.Stack that `sluice mount` drives through the engine. Only
// the clock, the devices and the request source are simulated. A run is
// deterministic: the same scenario and seed give the same result, byte
// for byte; page contents never exist (every page is one shared buffer),
// so memory is bounded by the stack's cache whatever a run moves.
package sim

import (
	"math/rand/v2"
	"time"

	"sluice/device"
	"sluice/stack"
)

// bucket is the width of the time series.
const bucket = int64(100 * time.Millisecond)

// runner is one run of a scenario: the timeline, the stack it drives and
// the models around it. Built by newRunner (build.go), run by run.
type runner struct {
	sc   *Scenario
	opts stack.Options
	st   *stack.Stack

	// The timeline (events.go).
	now  int64
	seq  uint64
	q    events
	stop int64 // the scenario's duration: nothing after it runs; 0: none
	// busy is when the last device I/O or application request finished:
	// the run's end, whatever wake-ups (a dirty span's expiry) follow.
	busy int64

	// The stack's wake-up: when it asked for one (-1: none), and how late
	// they come, drawn from wakeRNG.
	wakeAt   int64
	wakeLate device.Dist
	wakeRNG  *rand.Rand

	// The FUSE round trip (fuse.go).
	fuseLat int64
	maxRead int64   // the largest FUSE request
	cur     *thread // the thread whose request is being submitted

	// The workload (workload.go).
	jobs  []*jobRun
	files []*file
	free  []*call // answered calls, for reuse

	// The devices (devices.go) and the mirror set (mirrorset.go).
	devs    map[string]*device.Model
	devList []*device.Model
	devFile []*stack.Handle // per device, the handle a sync flushes
	pages   [][]byte        // a read's pages, reused
	mirrors mirrorSet

	// The kernel: its write paths (kernel.go), its page cache pc, and kio
	// the device reads made for its FUSE reads, by their call
	// (pagecache.go).
	kernel kernel
	pc     pcache
	kio    map[*stack.IO]*call

	// The time series (track, count).
	names  []string  // series names, in order
	series [][]int64 // per series, bytes per bucket
}

// Run runs sc and returns its result.
func Run(sc *Scenario) (*Result, error) {
	r, err := newRunner(sc)
	if err != nil {
		return nil, err
	}
	r.run()
	return r.result(), nil
}

// run is the event loop: it takes the timeline's events in order until
// none is left or the scenario's duration is over.
func (r *runner) run() {
	for r.q.len() > 0 {
		ev := r.q.pop()
		if r.stop > 0 && ev.at > r.stop {
			r.now = r.stop
			break
		}
		r.now = ev.at
		switch ev.kind {
		case evJob:
			r.startJob(ev.j)
		case evSubmit:
			r.submit(ev.c)
		case evReply:
			r.reply(ev.c)
		case evDevice, evMirror:
			r.deviceDone(ev)
		case evProbe:
			r.probeDone(ev)
		case evHedge:
			r.hedge(ev)
		case evNext:
			r.next(ev.t)
		case evWake:
			r.wake(ev.n)
		}
	}
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

// count adds n bytes at time at to a time series.
func (r *runner) count(series int, at, n int64) {
	b := int(at / bucket)
	s := r.series[series]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	r.series[series] = s
}
