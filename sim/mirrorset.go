package sim

import (
	"sluice/device"
	"sluice/mirror"
	"sluice/stack"
)

// The model of the mount's mirror set: devices holding the same data, of
// which a read goes to the one the read policy picks (hedged to another
// when it runs long, as the mount does, and with the background reads a
// probing policy asks for), and to which writes and flushes go all. The
// rest of the runner knows it by these alone:
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

// mirrorSet is the mirror set's state.
type mirrorSet struct {
	devs   []int         // device indexes of the set, in the mount's order
	policy mirror.Policy // the read policy; nil: no mirror set
	// fanout counts, per write or flush sent to every mirror, the mirrors
	// still to answer, and the first error.
	fanout map[*stack.IO]*fan
}

// mirrorTag is what an evMirror, evHedge or evProbe event carries for
// the mirror set.
type mirrorTag struct {
	m    int     // the read's mirror (its place in the set); -1: a write's or flush's copy
	sent int64   // when the read was sent
	h    *hedged // a read that may be (or was) hedged
}

// hedged is a mirror read that may be sent to a second mirror: the first
// answer without an error completes it; the other is only counted.
type hedged struct {
	left int  // reads of it in flight
	done bool // answered
	pid  int  // whose read it is, for the policy
}

// fan is a write or flush sent to every mirror.
type fan struct {
	left int
	err  error
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
		if s.policy, err = mirror.New(name, len(s.devs)); err != nil {
			return s, err
		}
	}
	return s, nil
}

// active reports whether the mount has a mirror set.
func (s *mirrorSet) active() bool { return len(s.devs) > 0 }

// startMirror sends the device I/O io of a mirrored file, op of n bytes,
// to the mirror set: a read, on behalf of pid, to the mirror the policy
// picks; a write or flush to every mirror.
func (r *runner) startMirror(io *stack.IO, pid int, op device.Op, n int64) {
	s := &r.mirrors
	if op != device.Read {
		s.fanout[io] = &fan{left: len(s.devs)}
		for _, di := range s.devs {
			doneAt, err := r.devList[di].Start(r.now, op, n)
			r.push(event{at: doneAt, kind: evMirror, io: io, n: n, err: err, dev: di, mir: mirrorTag{m: -1}})
		}
		return
	}
	rd := mirror.Read{PID: pid, File: io.Ino, Off: io.Off, Len: io.Len}
	m := s.policy.Pick(r.now, rd)
	s.policy.Started(r.now, m, rd)
	di := s.devs[m]
	doneAt, err := r.devList[di].Start(r.now, op, n)
	var hr *hedged
	if hg, ok := s.policy.(mirror.Hedger); ok && len(s.devs) > 1 {
		// As the mount does: a read still unanswered after the
		// policy's delay goes to another mirror too (once here; the
		// mount goes on to a third mirror of three).
		if after := hg.HedgeAfter(r.now, m); after > 0 && r.now+after < doneAt {
			hr = &hedged{left: 1, pid: pid}
			r.push(event{at: r.now + after, kind: evHedge, io: io, n: n, mir: mirrorTag{m: m, sent: r.now, h: hr}})
		}
	}
	r.push(event{at: doneAt, kind: evMirror, io: io, n: n, err: err, dev: di, mir: mirrorTag{m: m, sent: r.now, h: hr}})
	if pr, ok := s.policy.(mirror.Prober); ok {
		// The mount reads a mirror the policy asks to probe in the
		// background; so does the model.
		if pm, ok := pr.Probe(r.now); ok {
			s.policy.Started(r.now, pm, rd)
			pd := s.devs[pm]
			doneAt, err := r.devList[pd].Start(r.now, op, n)
			r.push(event{at: doneAt, kind: evProbe, n: n, err: err, dev: pd, mir: mirrorTag{m: pm, sent: r.now}})
		}
	}
}

// hedge sends a mirror read that has run long to the mirror the policy
// names (mirror.Hedger's HedgeTo), or asks again a hedge delay later.
func (r *runner) hedge(ev event) {
	s := &r.mirrors
	t := ev.mir
	if t.h.done {
		return
	}
	hg := s.policy.(mirror.Hedger)
	m, ok := hg.HedgeTo(r.now, t.m, t.sent, func(j int) bool { return j != t.m })
	if !ok {
		if after := hg.HedgeAfter(r.now, t.m); after > 0 {
			ev.at = r.now + after
			r.push(ev)
		}
		return
	}
	rd := mirror.Read{PID: t.h.pid, File: ev.io.Ino, Off: ev.io.Off, Len: ev.io.Len}
	s.policy.Started(r.now, m, rd)
	di := s.devs[m]
	doneAt, err := r.devList[di].Start(r.now, device.Read, ev.n)
	t.h.left++
	r.push(event{at: doneAt, kind: evMirror, io: ev.io, n: ev.n, err: err, dev: di, mir: mirrorTag{m: m, sent: r.now, h: t.h}})
}

// probeDone is a probing policy's background read answered.
func (r *runner) probeDone(ev event) {
	r.count(ev.dev, r.now, ev.n)
	r.mirrors.policy.Done(r.now, ev.mir.m, ev.mir.sent, ev.err)
}

// mirrorDone takes the completion ev of one of the mirror set's device
// I/Os and reports whether its I/O is done for the stack, with the bytes
// and error to report: a read when the first mirror to answer without
// an error has (or the last has failed), a write or flush when every
// mirror has, with the first error.
func (r *runner) mirrorDone(ev event) (done bool, n int64, err error) {
	s := &r.mirrors
	io, n, err, t := ev.io, ev.n, ev.err, ev.mir
	if t.m >= 0 {
		s.policy.Done(r.now, t.m, t.sent, err)
	}
	if h := t.h; h != nil {
		h.left--
		if h.done || err != nil && h.left > 0 {
			return false, n, err // answered by the other mirror, or it may yet answer
		}
		h.done = true
	}
	if fo := s.fanout[io]; fo != nil {
		if fo.err == nil {
			fo.err = err
		}
		if fo.left--; fo.left > 0 {
			return false, n, err
		}
		delete(s.fanout, io)
		err = fo.err
	}
	return true, n, err
}
