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
	mirrors  mirrorSet
	cur      *thread // the thread whose request is being submitted
	// busy is when the last device I/O or application request finished:
	// the run's end, whatever wake-ups (a dirty span's expiry) follow.
	busy int64
	// pc is the kernel's page cache, and kio the device reads made for
	// the kernel's FUSE reads, by their call.
	pc  pcache
	kio map[*stack.IO]*call
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
			for _, t := range ev.j.threads {
				for range max(ev.j.IODepth, 1) {
					r.next(t)
				}
			}
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
			if r.wakeAt != ev.n {
				continue // replaced by an earlier wake-up
			}
			r.wakeAt = -1
			r.apply(r.st.Tick(r.now))
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

func (r *runner) count(series int, at, n int64) {
	b := int(at / bucket)
	s := r.series[series]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	r.series[series] = s
}
