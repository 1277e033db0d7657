package stack

import (
	"math"

	"sluice/block"
	"sluice/readahead"
	"sluice/throttle"
)

// Read starts an application read of n bytes at off through h by group g.
// The request finishes (in some Actions.Done) when its pages are in the
// cache or at end of file, or, once it has waited Options.MaxWait, with
// the part that is ready.
func (s *Stack) Read(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	pages := r.pages // a request used again keeps its page list's storage
	clear(pages)
	r.renew(Request{Value: r.Value, dir: throttle.Read, group: g, handle: h, off: off, len: n, pages: pages[:0]})
	s.each(g, func(c *Counters) { c.AppReads++ })
	if n <= 0 {
		s.finish(r)
		return s.release(now)
	}
	if s.owes(now, h.Ino, g) {
		s.gate(now, r)
		return s.release(now)
	}
	s.startRead(now, r)
	return s.release(now)
}

// Pay admits a read of n bytes at off by group g that the driver performs
// itself: the kernel's page cache in front of the file (the front end's
// kernel cache mode) reads [off, off+n) from the backing file by splice,
// and sluice only charges and paces it; its own cache is not involved. It
// is split into MaxIO pieces, each one read I/O and its bytes, queued as
// demand reads (pay tickets, never device I/Os in Actions: see ticket);
// the request finishes when the last is admitted, and the driver then
// reads. At the wait cap the rest is admitted into debt.
func (s *Stack) Pay(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	r.renew(Request{Value: r.Value, dir: throttle.Read, group: g, handle: h, off: off, len: n, pay: true})
	s.each(g, func(c *Counters) { c.AppReads++ })
	if s.owes(now, h.Ino, g) {
		s.gate(now, r)
		return s.release(now)
	}
	s.queuePay(now, r)
	return s.release(now)
}

// queuePay queues the pieces of the read r that the driver performs.
func (s *Stack) queuePay(now int64, r *Request) {
	for i, pc := range block.Split(r.off, r.len, s.opts.MaxIO) {
		t := &ticket{kind: payTicket, r: r, queuedAt: now}
		t.req = throttle.Request{Group: r.group, Dir: throttle.Read, Bytes: pc.Len, IOs: 1, Class: throttle.Demand, Value: t}
		if random := s.price(&t.req, r.handle.Ino, throttle.Read, pc.Off, pc.Len); i == 0 {
			r.random = random
		}
		r.pieces = append(r.pieces, t)
		r.pending++
		s.queue.Push(now, &t.req)
	}
	if r.pending == 0 {
		s.finish(r)
	} else if r.deadline == 0 {
		s.await(now, r)
	}
}

// gate queues the read r behind its group's write debt (see owes): a gate
// ticket, which waits in the write direction and is charged nothing.
func (s *Stack) gate(now int64, r *Request) {
	t := &ticket{kind: gateTicket, r: r, queuedAt: now}
	t.req = throttle.Request{Group: r.group, Dir: throttle.Write, Class: throttle.Demand, Value: t}
	r.gate = t
	s.queue.Push(now, &t.req)
	s.await(now, r)
}

// ungate takes the read r past its gate (admitted, or at the wait cap).
func (s *Stack) ungate(now int64, r *Request) {
	r.gate = nil
	if r.pay {
		s.queuePay(now, r)
	} else {
		s.startRead(now, r)
	}
}

// owes reports whether a read of ino by g waits for g's write debt first:
// the file was written back without a caller (through a shared mapping),
// so the read may be the mapping's page fault, and g's writes are behind
// their schedule. The kernel writes mapped pages back on its own, and
// sluice writes them at once, charging the group (WriteBack); the writer
// is paced where it next needs sluice, when it faults the pages in again
// (the front end drops them from the kernel's cache while the group is in
// debt). Without this a writer through a mapping would never wait.
func (s *Stack) owes(now int64, ino uint64, g *throttle.Group) bool {
	f := s.files[ino]
	return f != nil && f.mapped && s.InDebt(now, g)
}

// InDebt reports whether g's writes are behind their schedule at now:
// reads of files it wrote through a mapping wait (see Read).
func (s *Stack) InDebt(now int64, g *throttle.Group) bool {
	return g.Limited() && s.tree.Eligible(now, g, throttle.Write) > now
}

// startRead looks r up in the cache and queues the device reads it needs.
func (s *Stack) startRead(now int64, r *Request) {
	h, g, off, n := r.handle, r.group, r.off, r.len
	f := s.file(h.Ino)
	first, last := off/PageSize, (off+n-1)/PageSize
	if want := int(last - first + 1); cap(r.pages) < want {
		r.pages = make([]*page, 0, want)
	}
	maxPages := s.opts.Readahead / PageSize
	for idx := first; idx <= last; {
		if f.eofKnown(now) && idx*PageSize >= f.eof {
			break // known end of file: nothing to read
		}
		want := last - idx + 1
		if idx > first {
			// The kernel moves prev_pos past each page it copies.
			h.ra.Accessed(idx * PageSize)
		}
		p := f.pages.get(idx)
		if p == nil {
			var w readahead.Window
			if s.opts.Readahead == 0 {
				w = readahead.Window{Start: idx, Size: want}
			} else {
				w = s.clamp(now, h, g, h.ra.Sync(idx, want, maxPages, f))
			}
			s.issue(now, h, g, f, w, idx, last)
			if f.pages.get(idx) == nil { // a window that does not cover idx: read it alone
				s.issue(now, h, g, f, readahead.Window{Start: idx, Size: want}, idx, last)
			}
			continue
		}
		if p.marker {
			p.marker = false
			if w, ok := h.ra.Async(idx, want, maxPages, f); ok {
				s.issue(now, h, g, f, s.clamp(now, h, g, w), -1, -1)
			}
		}
		s.used(p)
		r.pages = append(r.pages, p)
		p.pins++
		if p.pending {
			p.waiters = append(p.waiters, r)
			r.pending++
			if io := p.io; io != nil && !io.started {
				s.join(now, io, g)
			}
		} else if len(p.buf) < PageSize {
			break // end of file
		}
		idx++
	}
	h.ra.Accessed(off + n)
	if r.pending == 0 {
		s.finish(r)
	} else if r.deadline == 0 {
		s.await(now, r) // (a read that waited at the gate keeps its deadline)
	}
}

// used records a read of page p: the first use of a page read ahead
// counts toward RAUsed (a page still being read is counted when its length
// is known), and a cached page becomes the LRU's youngest.
func (s *Stack) used(p *page) {
	if p.ahead {
		p.ahead = false
		if !p.pending {
			s.each(p.group, func(c *Counters) { c.RAUsed += int64(len(p.buf)) })
		}
	}
	if !p.pending {
		s.lru.touch(p)
	}
}

// join makes a queued I/O serve a demand read by group g: it becomes a
// demand I/O, and when another group issued it and g may go sooner, it moves
// to g's queue and is charged to g: a tenant does not wait out another
// tenant's debt for pages it needs when its own budget lets it go sooner.
func (s *Stack) join(now int64, io *IO, g *throttle.Group) {
	if io.group != g && s.tree.Eligible(now, g, io.Dir) < s.tree.Eligible(now, io.group, io.Dir) {
		s.queue.Remove(&io.req)
		io.group = g
		io.Class = throttle.Demand
		io.queuedAt = now
		io.req = throttle.Request{Group: g, Dir: io.Dir, Bytes: io.Len, IOs: 1, Class: throttle.Demand, Value: io, Cost: io.req.Cost}
		for k := range io.pages {
			io.pages[k].group = g
		}
		s.queue.Push(now, &io.req)
		return
	}
	if io.Class == throttle.Readahead {
		s.queue.Promote(&io.req)
		io.Class = throttle.Demand
	}
}

// clamp applies the readahead budget to w when the budget is on.
func (s *Stack) clamp(now int64, h *Handle, g *throttle.Group, w readahead.Window) readahead.Window {
	if !s.opts.ReadaheadBudget || w.AsyncSize == 0 {
		return w
	}
	// Bytes only: readahead that extends a read up to MaxIO costs no more
	// I/Os, and its separate I/Os queue behind demand reads as readahead.
	// Under a shared parent the group keeps its fair share of it, so a
	// small-request reader stays queued beside a sibling that keeps the
	// parent busy, and fair queueing splits the parent by bytes.
	b := s.queue.ShareBudget(now, g, throttle.Read)
	if b == math.MaxInt64 {
		return w
	}
	return h.ra.Clamp(w, b/PageSize)
}

// issue queues device reads for the pages of w that are not in the cache.
// Pages in [dfirst, dlast] are demanded by the current read; the rest is
// readahead. Runs of missing pages are split into MaxIO pieces; a piece that
// holds a demanded page is a demand I/O.
func (s *Stack) issue(now int64, h *Handle, g *throttle.Group, f *file, w readahead.Window, dfirst, dlast int64) {
	maxPages := s.opts.MaxIO / PageSize
	marker := w.Marker()
	end := w.End()
	if f.eofKnown(now) {
		end = min(end, (f.eof+PageSize-1)/PageSize)
	}
	for i := w.Start; i < end; {
		if f.pages.get(i) != nil {
			i++
			continue
		}
		j := i
		for j < end && j-i < maxPages && f.pages.get(j) == nil {
			j++
		}
		class := throttle.Readahead
		if i <= dlast && j-1 >= dfirst {
			class = throttle.Demand
		}
		// One allocation for the run: a page that outlives its neighbours
		// keeps only their small headers, never their data.
		pages := make([]page, j-i)
		for k := i; k < j; k++ {
			p := &pages[k-i]
			*p = page{file: f, index: k, pending: true, group: g}
			p.waiters = p.w1[:0]
			p.ahead = k < dfirst || k > dlast
			p.fromRA = p.ahead
			p.marker = k == marker
			f.pages.set(k, p)
		}
		s.queueRead(now, h.Ino, h.File, g, class, f.gen, pages, now)
		i = j
	}
}

// queueRead queues one device read of pages (consecutive, pending), queued
// since queuedAt.
func (s *Stack) queueRead(now int64, ino uint64, file any, g *throttle.Group, class throttle.Class, gen uint64, pages []page, queuedAt int64) *IO {
	var io *IO
	if n := len(s.spareIOs); n > 0 {
		io, s.spareIOs = s.spareIOs[n-1], s.spareIOs[:n-1]
	} else {
		io = new(IO)
	}
	*io = IO{
		Op: OpRead, Dir: throttle.Read, Ino: ino, File: file,
		Off: pages[0].index * PageSize, Len: int64(len(pages)) * PageSize,
		Class: class, group: g, queuedAt: queuedAt, gen: gen, pages: pages,
	}
	for k := range pages {
		pages[k].io = io
	}
	io.req = throttle.Request{Group: g, Dir: throttle.Read, Bytes: io.Len, IOs: 1, Class: class, Value: io}
	io.random = s.price(&io.req, ino, throttle.Read, io.Off, io.Len)
	s.queue.Push(now, &io.req)
	return io
}

// Complete reports that the device read io finished at now: pages[k] holds
// the bytes of the I/O's k-th page, shorter than PageSize (or absent) past
// the end of the file; or the I/O failed with err. The stack keeps the
// slices in its cache until they are evicted, so each should be a separate
// allocation (a page that outlives its neighbours then pins nothing else)
// and must not change until they come back in Actions.Free. A driver that
// never looks at contents may pass one shared page many times (and must
// then not reuse what Free returns).
func (s *Stack) Complete(now int64, io *IO, pages [][]byte, err error) Actions {
	var got int64
	if err == nil {
		for _, b := range pages {
			got += int64(len(b))
		}
	}
	if got < io.Len {
		s.tree.Refund(now, io.group, throttle.Read, io.Len-got)
	}
	s.ended(now, io.tok, io.group, throttle.Read, io.random, got, 1)
	s.each(io.group, func(c *Counters) { c.RBytes += got })
	if f := s.files[io.Ino]; err == nil && got < io.Len && f != nil && f.gen == io.gen {
		f.eof, f.eofAt = io.Off+got, now
	}
	for k := range io.pages {
		p := &io.pages[k]
		p.pending = false
		p.io = nil
		p.buf = nil
		if err == nil && k < len(pages) {
			p.buf = pages[k]
		}
		live := p.file.pages.get(p.index) == p
		switch {
		case err != nil || len(p.buf) == 0:
			// Failed, or beyond end of file: serve the waiters, keep nothing.
			if live {
				p.file.pages.del(p.index)
			}
			p.ahead = false
		case live:
			s.lru.push(p)
			s.cached++
			if len(p.buf) < PageSize {
				p.file.tail = p.index
			}
		default: // detached while it was read: its readers get it, the cache does not
			p.out = true
		}
		if p.fromRA {
			n := int64(len(p.buf))
			used := int64(0)
			if !p.ahead {
				used = n // used while it was being read
			}
			s.each(p.group, func(c *Counters) { c.RAIssued += n; c.RAUsed += used })
		}
		for _, r := range p.waiters {
			if err != nil && r.Err == nil {
				r.Err = err
			}
			if r.pending--; r.pending == 0 {
				s.finish(r)
			}
		}
		clear(p.waiters)
		p.waiters = p.waiters[:0]
		s.free(p)
	}
	if err != nil {
		s.acts.Free = append(s.acts.Free, pages...) // kept nowhere
	}
	if len(s.spareIOs) < maxSpareIOs {
		*io = IO{} // the driver is done with it: the next read's
		s.spareIOs = append(s.spareIOs, io)
	}
	s.evict()
	return s.release(now)
}

// Size is the number of bytes a finished request delivered: for a read, up
// to the end of the file, the first failed page, or the part that was
// ready when its wait reached the cap; for a write, the bytes written
// before the first piece that failed or came short.
func (r *Request) Size() int64 {
	if r.Err != nil {
		return 0
	}
	if r.pay {
		return r.len
	}
	if r.dir == throttle.Write {
		var n int64
		for _, io := range r.ios {
			n += io.wrote
			if io.err != nil || io.wrote < io.Len {
				break
			}
		}
		return n
	}
	var n int64
	skip := r.off % PageSize
	for _, p := range r.pages {
		b := int64(len(p.buf)) - skip
		if b > 0 {
			n += b
		}
		if len(p.buf) < PageSize {
			break
		}
		skip = 0
	}
	return min(n, r.len)
}

// CopyTo copies a finished read's data into dst and returns the byte count.
func (r *Request) CopyTo(dst []byte) int {
	want := min(int64(len(dst)), r.Size())
	var n int64
	skip := r.off % PageSize
	for _, p := range r.pages {
		if n >= want {
			break
		}
		if skip < int64(len(p.buf)) {
			n += int64(copy(dst[n:want], p.buf[skip:]))
		}
		skip = 0
	}
	return int(n)
}

// ReadCached serves up to count consecutive reads of n bytes each, the
// first at off, from the cache alone, as that many calls of Read would
// that each finished at once. It stops before a read that would need the
// device, start readahead (a marker page), meet a page still being read
// or reach the end of the file, and returns how many reads it served. A
// driver that replays many reads at one instant (the simulator, for a
// reader racing through cached pages) uses it instead of one Read each.
func (s *Stack) ReadCached(now int64, h *Handle, g *throttle.Group, off, n int64, count int) (int, Actions) {
	f := s.files[h.Ino]
	if f == nil || n <= 0 || s.owes(now, h.Ino, g) {
		return 0, s.release(now)
	}
	served := 0
	for ; served < count; served++ {
		o := off + int64(served)*n
		first, last := o/PageSize, (o+n-1)/PageSize
		ok := true
		for idx := first; idx <= last && ok; idx++ {
			p := f.pages.get(idx)
			ok = p != nil && !p.pending && !p.marker && len(p.buf) == PageSize &&
				!(f.eofKnown(now) && (idx+1)*PageSize > f.eof)
		}
		if !ok {
			break
		}
		for idx := first; idx <= last; idx++ {
			if idx > first {
				h.ra.Accessed(idx * PageSize)
			}
			s.used(f.pages.get(idx))
		}
		h.ra.Accessed(o + n)
	}
	if served == 0 {
		return 0, s.release(now)
	}
	k := int64(served)
	s.each(g, func(c *Counters) { c.AppReads += k; c.AppRBytes += k * n })
	return served, s.release(now)
}
