package sim

import (
	"sluice/device"
	"sluice/mirror"
	"sluice/stack"
)

// zeroPage stands for every page's contents.
var zeroPage = make([]byte, stack.PageSize)

// hedged is a mirror read that may be sent to a second mirror: the first
// answer without an error completes it; the other is only counted.
type hedged struct {
	left int  // reads of it in flight
	done bool // answered
}

type fan struct {
	left int
	err  error
}

// start sends the device I/O io to its device (or, for a mirror set's
// read, to the mirror the policy picks).
func (r *runner) start(io *stack.IO) {
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
	if io.Op == stack.OpWriteback {
		// The modelled devices have no page cache: written is on disk.
		r.push(event{at: r.now, kind: evDevice, io: io, dev: f.devi, m: -1})
		return
	}
	switch {
	case !f.mirrored:
		doneAt, err := f.dev.Start(r.now, op, n)
		r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: f.devi, m: -1})
	case op == device.Read:
		t := r.cur
		if t == nil {
			t = f.owner
		}
		rd := mirror.Read{PID: t.pid, File: io.Ino, Off: io.Off, Len: io.Len}
		m := r.policy.Pick(r.now, rd)
		r.policy.Started(r.now, m, rd)
		di := r.mirrors[m]
		doneAt, err := r.devList[di].Start(r.now, op, n)
		var hr *hedged
		if hg, ok := r.policy.(mirror.Hedger); ok && len(r.mirrors) > 1 {
			// As the mount does: a read still unanswered after the
			// policy's delay goes to another mirror too (once here; the
			// mount goes on to a third mirror of three).
			if after := hg.HedgeAfter(r.now, m); after > 0 && r.now+after < doneAt {
				hr = &hedged{left: 1}
				r.push(event{at: r.now + after, kind: evHedge, io: io, n: n, m: m, t: t, h: hr, sent: r.now})
			}
		}
		r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: di, m: m, sent: r.now, h: hr})
		if pr, ok := r.policy.(mirror.Prober); ok {
			// The mount reads a mirror the policy asks to probe in the
			// background; so does the model.
			if pm, ok := pr.Probe(r.now); ok {
				r.policy.Started(r.now, pm, rd)
				pd := r.mirrors[pm]
				doneAt, err := r.devList[pd].Start(r.now, op, n)
				r.push(event{at: doneAt, kind: evProbe, n: n, err: err, dev: pd, m: pm, sent: r.now})
			}
		}
	default: // writes and flushes go to every mirror
		r.fanout[io] = &fan{left: len(r.mirrors)}
		for _, di := range r.mirrors {
			doneAt, err := r.devList[di].Start(r.now, op, n)
			r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: di, m: -1})
		}
	}
}

// hedge sends a mirror read that has run long to the mirror the policy
// names (mirror.Hedger's HedgeTo), or asks again a hedge delay later.
func (r *runner) hedge(ev event) {
	if ev.h.done {
		return
	}
	hg := r.policy.(mirror.Hedger)
	m, ok := hg.HedgeTo(r.now, ev.m, ev.sent, func(j int) bool { return j != ev.m })
	if !ok {
		if after := hg.HedgeAfter(r.now, ev.m); after > 0 {
			ev.at = r.now + after
			r.push(ev)
		}
		return
	}
	rd := mirror.Read{PID: ev.t.pid, File: ev.io.Ino, Off: ev.io.Off, Len: ev.io.Len}
	r.policy.Started(r.now, m, rd)
	di := r.mirrors[m]
	doneAt, err := r.devList[di].Start(r.now, device.Read, ev.n)
	ev.h.left++
	r.push(event{at: doneAt, kind: evDevice, io: ev.io, n: ev.n, err: err, dev: di, m: m, sent: r.now, h: ev.h})
}

// deviceDone reports a device I/O's completion to the stack.
func (r *runner) deviceDone(ev event) {
	io, n, err := ev.io, ev.n, ev.err
	if io.Op != stack.OpWriteback {
		r.busy = r.now
	}
	r.count(ev.dev, r.now, n)
	if ev.m >= 0 {
		r.policy.Done(r.now, ev.m, ev.sent, err)
	}
	if h := ev.h; h != nil {
		h.left--
		if h.done || err != nil && h.left > 0 {
			return // answered by the other mirror, or it may yet answer
		}
		h.done = true
	}
	if fo := r.fanout[io]; fo != nil {
		if fo.err == nil {
			fo.err = err
		}
		if fo.left--; fo.left > 0 {
			return
		}
		delete(r.fanout, io)
		err = fo.err
	}
	if len(r.kio) > 0 {
		if c := r.kio[io]; c != nil {
			delete(r.kio, io)
			r.kdone(c, n, err)
			return
		}
	}
	f := io.File.(*file)
	switch io.Op {
	case stack.OpRead:
		pages := r.pages[:0]
		if err == nil {
			for k := int64(0); k < n; k += stack.PageSize {
				pages = append(pages, zeroPage[:min(stack.PageSize, n-k)])
			}
		}
		r.pages = pages
		r.apply(r.st.Complete(r.now, io, pages, err))
	case stack.OpWrite:
		if err == nil {
			f.size = max(f.size, io.Off+io.Len)
		}
		r.apply(r.st.Wrote(r.now, io, io.Len, err))
	default:
		r.apply(r.st.Wrote(r.now, io, 0, err))
	}
}
