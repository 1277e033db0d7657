package sim

import (
	"sluice/device"
	"sluice/stack"
)

// The devices: the stack's device I/Os sent to the modelled devices (or
// to the mirror set, mirrorset.go), and their completions reported to the
// stack.

// zeroPage stands for every page's contents.
var zeroPage = make([]byte, stack.PageSize)

// start sends the device I/O io to its device, or to the mirror set
// (startMirror) for a mirrored file.
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
		r.push(event{at: r.now, kind: evDevice, io: io, dev: f.devi})
		return
	}
	if f.mirrored {
		r.startMirror(io, r.reader(f).pid, op, f.base+io.Off, n)
		return
	}
	doneAt, err := f.dev.Start(r.now, op, f.base+io.Off, n)
	r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: f.devi})
}

// reader is the thread a device read of f goes by: the one whose request
// is being submitted, or f's owner when none is (a read started by the
// throttle's wake-up).
func (r *runner) reader(f *file) *thread {
	if r.cur != nil {
		return r.cur
	}
	return f.owner
}

// deviceDone reports a device I/O's completion to the stack.
func (r *runner) deviceDone(ev event) {
	io, n, err := ev.io, ev.n, ev.err
	if io.Op != stack.OpWriteback {
		r.busy = r.now
	}
	r.count(ev.dev, r.now, n)
	if ev.kind == evMirror {
		var done bool
		if done, n, err = r.mirrorDone(ev); !done {
			return
		}
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
