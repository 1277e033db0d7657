package stack

import (
	"slices"

	"sluice/block"
	"sluice/throttle"
)

// Write starts an application write of n bytes at off by group g. It is
// split into MaxIO pieces, each charged one write I/O and its bytes; each
// piece is started (Actions.Start, OpWrite) as the throttle admits it, so
// the device sees the group's rate in steps of at most MaxIO. The request
// finishes when every piece is written, or, once it has waited
// Options.MaxWait, with the pieces already started.
func (s *Stack) Write(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	r.renew(Request{Value: r.Value, dir: throttle.Write, group: g, handle: h, off: off, len: n})
	s.each(g, func(c *Counters) { c.AppWrites++ })
	for _, pc := range block.Split(off, n, s.opts.MaxIO) {
		s.queueWrite(now, r, pc.Off, pc.Len, now)
	}
	if r.pending == 0 {
		s.finish(r)
	} else {
		s.await(now, r)
	}
	return s.release(now)
}

// WriteBack starts a write that reaches sluice without a caller: the
// kernel writing back pages written through mmap, or flushing a file's
// cached pages. No process waits on it and its data has already left the
// application, so holding it would only hold the kernel's writeback (and
// everyone's sync behind it): every piece starts at once, charged to g in
// full as debt that the group's later requests pay. Its bytes count in
// WritebackBytes as well as WBytes. It finishes when every piece is
// written.
func (s *Stack) WriteBack(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	r.renew(Request{Value: r.Value, dir: throttle.Write, group: g, handle: h, off: off, len: n, writeback: true})
	s.each(g, func(c *Counters) { c.AppWrites++ })
	s.file(h.Ino).mapped = true
	for _, pc := range block.Split(off, n, s.opts.MaxIO) {
		io := s.writePiece(r, pc.Off, pc.Len, now)
		if g.Limited() {
			s.tree.ChargeCost(now, g, throttle.Write, pc.Len, 1, io.req.Cost)
		}
		s.admitted(now, io)
	}
	if r.pending == 0 {
		s.finish(r)
	}
	return s.release(now)
}

// queueWrite queues one piece of the write r.
func (s *Stack) queueWrite(now int64, r *Request, off, n, queuedAt int64) *IO {
	io := s.writePiece(r, off, n, queuedAt)
	s.queue.Push(now, &io.req)
	return io
}

// writePiece makes one piece of the write r.
func (s *Stack) writePiece(r *Request, off, n, queuedAt int64) *IO {
	h := r.handle
	io := &IO{Op: OpWrite, Dir: throttle.Write, Ino: h.Ino, File: h.File, Off: off, Len: n,
		Class: throttle.Demand, group: r.group, queuedAt: queuedAt, write: r}
	io.req = throttle.Request{Group: r.group, Dir: throttle.Write, Bytes: n, IOs: 1, Class: throttle.Demand, Value: io}
	io.random = s.price(&io.req, h.Ino, throttle.Write, off, n)
	r.ios = append(r.ios, io)
	r.pending++
	return io
}

// Sync starts an fsync of h's file by group g: one flush I/O, started at
// once (a flush moves no bytes and is not charged). The request finishes
// when the driver reports the flush with Wrote.
func (s *Stack) Sync(now int64, h *Handle, g *throttle.Group, r *Request) Actions {
	r.renew(Request{Value: r.Value, dir: throttle.Write, group: g, handle: h})
	if f := s.files[h.Ino]; f != nil {
		s.clean(f) // the flush writes it
	}
	io := &IO{Op: OpFlush, Dir: throttle.Write, Ino: h.Ino, File: h.File, Class: throttle.Demand,
		group: g, queuedAt: now, write: r, started: true}
	r.ios = append(r.ios, io)
	r.pending++
	s.acts.Start = append(s.acts.Start, io)
	return s.release(now)
}

// Wrote reports that the write or flush io finished at now: n bytes were
// written, and err is the device's error if it failed. Unwritten bytes are
// refunded; cached pages the piece touched are dropped.
func (s *Stack) Wrote(now int64, io *IO, n int64, err error) Actions {
	if io.complete {
		return s.release(now)
	}
	io.complete = true
	if io.Op == OpWriteback {
		return s.release(now)
	}
	n = min(max(n, 0), io.Len)
	io.wrote, io.err = n, err
	if io.Op == OpWrite {
		if n < io.Len {
			s.tree.Refund(now, io.group, throttle.Write, io.Len-n)
		}
		s.ended(now, io.tok, io.group, throttle.Write, io.random, n, 1)
		wb := io.write.writeback
		s.each(io.group, func(c *Counters) {
			c.WBytes += n
			c.AppWBytes += n
			if wb {
				c.WritebackBytes += n
			}
		})
		s.Changed(io.Ino, io.Off, io.Len)
		if n > 0 {
			s.dirtied(now, io, n)
		}
	}
	r := io.write
	if r.done {
		return s.release(now)
	}
	if io.Op == OpWrite && n < io.Len {
		s.dropAfter(r)
	}
	if r.pending--; r.pending == 0 {
		if r.Err == nil && r.Size() == 0 && len(r.ios) > 0 && r.ios[0].err != nil {
			r.Err = r.ios[0].err
		}
		s.finish(r)
	}
	return s.release(now)
}

// dropAfter withdraws, uncharged, the pieces of the write r not yet
// started, after one of its pieces failed or came short: the caller is
// told only of the bytes before that piece, so the rest is not written,
// and the caller has its answer once the pieces started are done rather
// than after the rest's wait for the throttle.
func (s *Stack) dropAfter(r *Request) {
	kept := r.ios[:0]
	for _, x := range r.ios {
		if x.started {
			kept = append(kept, x)
			continue
		}
		s.queue.Remove(&x.req)
		r.pending--
	}
	r.ios = kept
}

// Changed drops cached pages of file ino in [off, off+n) and the partial
// page at its old end, after a write that did not go through Write (an
// unthrottled writer) or any other change of the file's contents.
func (s *Stack) Changed(ino uint64, off, n int64) {
	f := s.files[ino]
	if f == nil || n <= 0 {
		return
	}
	s.drop(f, off/PageSize, (off+n-1)/PageSize)
	s.forgetEnd(f)
}

// Truncated drops cached pages of file ino from size on, after a change of
// its length.
func (s *Stack) Truncated(ino uint64, size int64) {
	f := s.files[ino]
	if f == nil {
		return
	}
	f.pages.each(func(idx int64, _ *page) {
		if idx >= size/PageSize {
			s.drop(f, idx, idx)
		}
	})
	s.forgetEnd(f)
}

// Pass accounts a request served without the stack (a group with no limit
// reading or writing through the kernel's cache or the backing file):
// app-level and device-level bytes and calls, device I/Os counted per MaxIO
// piece.
func (s *Stack) Pass(g *throttle.Group, d throttle.Dir, n int64) {
	ios := block.Count(n, s.opts.MaxIO)
	s.each(g, func(c *Counters) {
		if d == throttle.Read {
			c.AppReads++
			c.AppRBytes += n
			c.RBytes += n
			c.RIOs += ios
		} else {
			c.AppWrites++
			c.AppWBytes += n
			c.WBytes += n
			c.WIOs += ios
		}
	})
}

// WritebackMin is the least a file's dirty span holds before the stack
// starts its writeback; a group's threshold is the larger of it and a
// tenth of a second at the tightest write rate on its path.
const WritebackMin = 256 << 10

// DirtyExpire is the longest a dirty span waits for its writeback: a
// group that writes less than its threshold still has its data on the
// way to the device a second later.
const DirtyExpire = int64(1e9)

// dirtied records that the write piece io left n bytes in the backing
// page cache at now, and starts writeback of the file's dirty span once it
// holds the group's threshold (or another group's bytes are in it).
func (s *Stack) dirtied(now int64, io *IO, n int64) {
	f := s.file(io.Ino)
	d := &f.dirty
	if d.n > 0 && d.g != io.group {
		s.writeback(f)
	}
	if d.n == 0 {
		*d = dirtyRange{lo: io.Off, hi: io.Off + n, since: now, g: io.group, ino: io.Ino, file: io.File}
		s.dirty = append(s.dirty, f)
	} else {
		d.lo, d.hi = min(d.lo, io.Off), max(d.hi, io.Off+n)
	}
	d.n += n
	s.each(io.group, func(c *Counters) { c.Dirty += n })
	if d.n >= writebackAt(io.group) {
		s.writeback(f)
	}
}

// writebackAt is g's threshold: WritebackMin, or 100 ms at the tightest
// write rate on g's path when that is more.
func writebackAt(g *throttle.Group) int64 {
	var rate int64
	for p := g; p != nil; p = p.Parent() {
		if w := p.Limits().WBPS; w > 0 && (rate == 0 || w < rate) {
			rate = w
		}
	}
	return max(WritebackMin, rate/10)
}

// writeback starts the writeback of f's dirty span.
func (s *Stack) writeback(f *file) {
	d := f.dirty
	s.clean(f)
	s.each(d.g, func(c *Counters) { c.WritebackEarly += d.n })
	s.acts.Start = append(s.acts.Start, &IO{Op: OpWriteback, Dir: throttle.Write, Ino: d.ino, File: d.file,
		Off: d.lo, Len: d.hi - d.lo, Class: throttle.Demand, group: d.g, started: true})
}

// clean forgets f's dirty span: its writeback has been started, or a flush
// or the kernel will write it.
func (s *Stack) clean(f *file) {
	d := f.dirty
	if d.n == 0 {
		return
	}
	s.each(d.g, func(c *Counters) { c.Dirty -= d.n })
	f.dirty = dirtyRange{}
	if i := slices.Index(s.dirty, f); i >= 0 {
		s.dirty = slices.Delete(s.dirty, i, i+1)
	}
}
