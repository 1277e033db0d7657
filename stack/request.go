package stack

import (
	"sluice/throttle"
)

// The life of an application request beyond its I/O: the wait cap
// (Options.MaxWait) and cancellation.
//
// A request that has waited MaxWait is answered with what it has: a read
// with the pages that are ready or being read, a write with the pieces
// already started. When that is nothing, one page of it is admitted at once
// and charged in full, into debt that the group's later requests pay; the
// rest is refused (a read's pages stay queued for whoever asks next, a
// write's unstarted pieces are withdrawn uncharged). The reply is short,
// which a caller reading or writing through FOPEN_DIRECT_IO sees as a
// short read or write and continues. So no request waits past the cap for
// the throttle, and the long-run rate holds: the forced admissions are one
// page per capped request, charged like any other. A handle marked Whole
// (its caller would take a short read for the end of the file) has its
// request admitted whole instead, into debt.

// reqList is an intrusive list of requests, in deadline order.
type reqList struct{ head, tail *Request }

func (l *reqList) push(r *Request) {
	r.wprev, r.wnext = l.tail, nil
	if l.tail == nil {
		l.head = r
	} else {
		l.tail.wnext = r
	}
	l.tail = r
}

func (l *reqList) remove(r *Request) {
	if r.wprev == nil && l.head != r {
		return // not listed
	}
	if r.wprev == nil {
		l.head = r.wnext
	} else {
		r.wprev.wnext = r.wnext
	}
	if r.wnext == nil {
		l.tail = r.wprev
	} else {
		r.wnext.wprev = r.wprev
	}
	r.wprev, r.wnext = nil, nil
}

// await lists r, which has to wait, under the wait cap if there is one.
// Deadlines come in the order requests arrive, so the list stays sorted.
func (s *Stack) await(now int64, r *Request) {
	if s.opts.MaxWait <= 0 {
		return
	}
	r.deadline = now + int64(s.opts.MaxWait)
	s.waiting.push(r)
}

// expire cuts every request whose deadline is at or before now.
func (s *Stack) expire(now int64) {
	for r := s.waiting.head; r != nil && r.deadline <= now; r = s.waiting.head {
		s.waiting.remove(r)
		if !r.done {
			s.cut(now, r)
		}
	}
}

// cut answers r, which reached its deadline, with what it has (see above).
func (s *Stack) cut(now int64, r *Request) {
	if r.dir == throttle.Write {
		s.cutWrite(now, r)
		return
	}
	if r.gate != nil {
		// Waited for the write debt up to the cap: the read goes on, and
		// is answered as if it had been waiting for its pages.
		s.queue.Remove(&r.gate.req)
		s.ungate(now, r)
		if r.done {
			return
		}
	}
	if r.pay {
		// The driver reads it all, whole: the rest goes into debt.
		for _, t := range r.pieces {
			if !t.admitted {
				s.forceTicket(now, t)
			}
		}
		return
	}
	if r.handle.Whole {
		for _, p := range r.pages {
			if p.pending && !p.io.started {
				s.force(now, p.io)
			}
		}
		return
	}
	keep := 0
	for keep < len(r.pages) && (!r.pages[keep].pending || r.pages[keep].io.started) {
		keep++
	}
	if keep == 0 {
		s.forcePage(now, r.pages[0], r.group)
		keep = 1
	}
	for _, p := range r.pages[keep:] {
		if p.pending {
			p.waiters = removeReq(p.waiters, r)
			r.pending--
		}
		s.unpin(p)
	}
	r.pages = r.pages[:keep]
	if r.pending == 0 {
		s.finish(r)
	}
}

// cutWrite answers the write r with its started pieces, forcing the first
// page when none has started.
func (s *Stack) cutWrite(now int64, r *Request) {
	if r.handle.Whole {
		for _, io := range r.ios {
			if !io.started {
				s.force(now, io)
			}
		}
		return
	}
	keep := 0
	for keep < len(r.ios) && r.ios[keep].started {
		keep++
	}
	first := r.ios[0]
	for _, io := range r.ios[keep:] {
		s.queue.Remove(&io.req)
		r.pending--
	}
	r.ios = r.ios[:keep]
	if keep == 0 {
		n := min(first.Len, PageSize-first.Off%PageSize)
		io := s.queueWrite(now, r, first.Off, n, first.queuedAt)
		s.force(now, io)
	}
	if r.pending == 0 {
		s.finish(r)
	}
}

// force admits the queued io at now whatever its group's debt, charging it
// in full.
func (s *Stack) force(now int64, io *IO) {
	if !s.queue.Remove(&io.req) {
		return
	}
	s.tree.ChargeCost(now, io.group, io.Dir, io.Len, 1, io.req.Cost)
	s.admitted(now, io)
}

// forceTicket admits the queued ticket t at now whatever its group's
// debt, charging it in full.
func (s *Stack) forceTicket(now int64, t *ticket) {
	if !s.queue.Remove(&t.req) {
		return
	}
	s.tree.ChargeCost(now, t.req.Group, t.req.Dir, t.req.Bytes, t.req.IOs, t.req.Cost)
	s.released(now, t)
}

// forcePage admits the queued page p alone at now for group g, charged in
// full; the rest of its I/O stays queued as it was.
func (s *Stack) forcePage(now int64, p *page, g *throttle.Group) {
	io := p.io
	s.queue.Remove(&io.req)
	k := p.index - io.pages[0].index
	if pre := io.pages[:k:k]; len(pre) > 0 {
		s.queueRead(now, io.Ino, io.File, io.group, io.Class, io.gen, pre, io.queuedAt)
	}
	if post := io.pages[k+1:]; len(post) > 0 {
		s.queueRead(now, io.Ino, io.File, io.group, io.Class, io.gen, post, io.queuedAt)
	}
	p.group = g
	one := s.queueRead(now, io.Ino, io.File, g, throttle.Demand, io.gen, io.pages[k:k+1:k+1], io.queuedAt)
	s.force(now, one)
}

// Cancel withdraws r (an interrupted request) at now; r.Err becomes
// ErrCanceled. A read finishes at once; its queued demand reads that no
// other request waits for are withdrawn. A write's pieces that were not
// admitted are withdrawn uncharged; the write finishes when the pieces
// already started have been written (their data is in use until then).
func (s *Stack) Cancel(now int64, r *Request) Actions {
	if r.done {
		return s.release(now)
	}
	r.Err = ErrCanceled
	s.waiting.remove(r)
	if r.dir == throttle.Write {
		kept := r.ios[:0]
		for _, io := range r.ios {
			if io.started {
				kept = append(kept, io)
			} else {
				s.queue.Remove(&io.req)
				r.pending--
			}
		}
		r.ios = kept
		if r.pending == 0 {
			s.finish(r)
		}
		return s.release(now)
	}
	if r.gate != nil {
		s.queue.Remove(&r.gate.req)
		r.gate = nil
	}
	for _, t := range r.pieces { // a read the driver performs (Pay)
		if !t.admitted {
			s.queue.Remove(&t.req)
		}
	}
	for _, p := range r.pages {
		if !p.pending {
			continue
		}
		p.waiters = removeReq(p.waiters, r)
		io := p.io
		if io == nil || io.started || io.Class != throttle.Demand || waited(io) {
			continue
		}
		s.queue.Remove(&io.req)
		for k := range io.pages {
			if q := &io.pages[k]; q.file.pages.get(q.index) == q {
				q.file.pages.del(q.index)
			}
		}
	}
	r.pending = 0
	s.finish(r)
	return s.release(now)
}

func waited(io *IO) bool {
	for k := range io.pages {
		if len(io.pages[k].waiters) > 0 {
			return true
		}
	}
	return false
}

func removeReq(rs []*Request, r *Request) []*Request {
	for i, x := range rs {
		if x == r {
			return append(rs[:i], rs[i+1:]...)
		}
	}
	return rs
}

// renew makes *r the request n, handing n the backing arrays of r's lists
// of I/Os and tickets, emptied: a driver that reuses its Requests then
// allocates none for them.
func (r *Request) renew(n Request) {
	clear(r.ios)
	clear(r.pieces)
	n.ios, n.pieces = r.ios[:0], r.pieces[:0]
	*r = n
}
