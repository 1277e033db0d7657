package sim

import (
	"sluice/device"
	"sluice/mirror"
	"sluice/stack"
)

// The model of the mount's mirror set: devices holding the same data,
// driven by the mount's own core (mirror.Set): a read goes to the mirror
// the read policy picks, on to the next when it fails, and to others too
// when it runs long (hedged, on to a third mirror of three), with the
// background reads a probing policy asks for; writes and flushes go to
// every healthy mirror, and one that fails where another succeeded turns
// stale. The rest of the runner knows it by these alone:
//
//   - newMirrorSet, from the scenario;
//   - mirrorSet.active: whether the mount has one (its jobs without a
//     device then use it);
//   - runner.startMirror: a device I/O of a mirrored file;
//   - the events it schedules: evMirror, completions of its device I/Os,
//     handed back to it by deviceDone through runner.mirrorDone, which
//     says when the I/O is done for the stack; evHedge (runner.hedge)
//     and evProbe (runner.probeDone), its own.
//
// What these events carry for it is a mirrorTag, the rest of the runner's
// business only as far as counting a device's bytes by event.dev.

// mirrorSet is the mirror set's state: its devices, and the core that
// decides where each read goes, when it is hedged, and which mirrors a
// failed write turns stale (mirror.Set, the mount's own).
type mirrorSet struct {
	devs []int       // device indexes of the set, in the mount's order
	set  *mirror.Set // nil: no mirror set
	// fanout is, per write or flush sent to every healthy mirror, its
	// copies' outcomes.
	fanout map[*stack.IO]*fan
}

// mirrorTag is what an evMirror, evHedge or evProbe event carries for
// the mirror set.
type mirrorTag struct {
	sn mirror.Send // a read's, or -1 in Mirror for a write's or flush's copy
	fl *flight     // the caller's read it belongs to (evMirror of a read, evHedge)
	k  int         // a write's or flush's copy: its place in the fan-out
}

// flight is a read of the mirror set: the core's Flight, and what the
// model needs to send its reads to the devices.
type flight struct {
	f    mirror.Flight
	io   *stack.IO
	off  int64 // where it reads, on every mirror
	n    int64 // the bytes a read of it returns
	wake int64 // the evHedge scheduled last; 0: none
}

// fan is a write or flush sent to every healthy mirror.
type fan struct {
	on   []int // the mirrors, in the set
	errs []error
	left int
}

// newMirrorSet builds the mount's mirror set from sc: its devices and its
// read policy.
func newMirrorSet(sc *Scenario) (mirrorSet, error) {
	s := mirrorSet{fanout: map[*stack.IO]*fan{}}
	for _, name := range sc.Mount.Mirrors {
		for i, d := range sc.Devices {
			if d.Name == name {
				s.devs = append(s.devs, i)
			}
		}
	}
	if len(s.devs) > 0 {
		name := sc.Mount.ReadPolicy
		if name == "" {
			name = mirror.Default
		}
		var err error
		if s.set, err = mirror.NewSet(len(s.devs), name, nil); err != nil {
			return s, err
		}
	}
	return s, nil
}

// active reports whether the mount has a mirror set.
func (s *mirrorSet) active() bool { return len(s.devs) > 0 }

// startMirror sends the device I/O io of a mirrored file, op of n bytes
// at off on the devices, to the mirror set: a read, on behalf of pid, as the set's core says; a
// write or flush to every healthy mirror.
func (r *runner) startMirror(io *stack.IO, pid int, op device.Op, off, n int64) {
	s := &r.mirrors
	if op != device.Read {
		on := append([]int(nil), s.set.Live()...)
		s.fanout[io] = &fan{on: on, errs: make([]error, len(on)), left: len(on)}
		for k, m := range on {
			di := s.devs[m]
			doneAt, err := r.devList[di].Start(r.now, op, off, n)
			r.push(event{at: doneAt, kind: evMirror, io: io, n: n, err: err, dev: di, mir: mirrorTag{sn: mirror.Send{Mirror: -1}, k: k}})
		}
		return
	}
	fl := &flight{io: io, off: off, n: n}
	var st mirror.Step
	fl.f, st = s.set.Begin(r.now, mirror.Read{PID: pid, File: io.Ino, Off: io.Off, Len: io.Len}, 0)
	r.mirrorStep(fl, st)
}

// mirrorStep does what the core's step st for fl says: send a read to a
// mirror's device, a probe to another's, and wake the flight for its
// hedge.
func (r *runner) mirrorStep(fl *flight, st mirror.Step) {
	s := &r.mirrors
	if st.Sending {
		di := s.devs[st.Send.Mirror]
		doneAt, err := r.devList[di].Start(r.now, device.Read, fl.off, fl.n)
		r.push(event{at: doneAt, kind: evMirror, io: fl.io, n: fl.n, err: err, dev: di, mir: mirrorTag{sn: st.Send, fl: fl}})
	}
	if st.Probing {
		// The mount reads a mirror the policy asks to probe in the
		// background; so does the model.
		di := s.devs[st.Probe.Mirror]
		doneAt, err := r.devList[di].Start(r.now, device.Read, fl.off, fl.n)
		r.push(event{at: doneAt, kind: evProbe, n: fl.n, err: err, dev: di, mir: mirrorTag{sn: st.Probe}})
	}
	if st.Wake > 0 && st.Wake != fl.wake {
		fl.wake = st.Wake
		r.push(event{at: st.Wake, kind: evHedge, mir: mirrorTag{fl: fl}})
	}
}

// hedge is a flight's wake: the core sends a read still running to
// another mirror too, or wakes it again later (one scheduled before the
// flight's wake moved, or after its answer, does nothing).
func (r *runner) hedge(ev event) {
	fl := ev.mir.fl
	r.mirrorStep(fl, r.mirrors.set.Timer(r.now, &fl.f))
}

// probeDone is a probing policy's background read answered.
func (r *runner) probeDone(ev event) {
	r.count(ev.dev, r.now, ev.n)
	r.mirrors.set.Done(r.now, ev.mir.sn, int(ev.n), ev.err)
}

// mirrorDone takes the completion ev of one of the mirror set's device
// I/Os and reports whether its I/O is done for the stack, with the bytes
// and error to report: a read when the core has its answer (the first
// mirror to answer without an error, or the last one's failure, each
// failure sent on to the next mirror), a write or flush when every
// mirror has answered: it fails when all failed, and a mirror that failed
// where another succeeded is marked stale, as the mount marks it.
func (r *runner) mirrorDone(ev event) (done bool, n int64, err error) {
	s := &r.mirrors
	io, n, err, t := ev.io, ev.n, ev.err, ev.mir
	if fl := t.fl; fl != nil {
		st := s.set.Finished(r.now, &fl.f, t.sn, int(n), err)
		r.mirrorStep(fl, st)
		return st.Done, n, st.Err
	}
	fo := s.fanout[io]
	fo.errs[t.k] = err
	if fo.left--; fo.left > 0 {
		return false, n, err
	}
	delete(s.fanout, io)
	out := make([]mirror.Outcome, len(fo.on))
	for k, e := range fo.errs {
		if e != nil {
			out[k] = mirror.Failed
		}
	}
	if ok, _ := s.set.Fanout(fo.on, out); !ok {
		return true, n, fo.errs[0]
	}
	return true, n, nil
}
