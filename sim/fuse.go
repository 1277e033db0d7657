package sim

import (
	"sluice/stack"
)

// The FUSE round trip: an application request reaches sluice (or the
// kernel's page cache, kernel.go and pagecache.go) half a round trip after
// it is made, in requests of at most max-read bytes, and its answer the
// caller half a round trip after sluice gives it; the stack's actions
// (device I/Os to start, requests answered, a wake-up) are performed here
// (apply).

// send sends the FUSE request for the part of c from c.done on, at most
// maxRead bytes; the kernel sends the next part when this one is
// answered, and a short answer is continued (fio resubmits the rest),
// until the whole request is served or a read finds the end.
func (r *runner) send(c *call) {
	c.part = min(c.n-c.done, r.maxRead)
	at := r.now + r.fuseLat/2
	if c.inKernel() {
		at = r.now
	}
	r.push(event{at: at, kind: evSubmit, c: c})
}

// inKernel reports whether the kernel's page cache takes c before any
// request of it reaches sluice: a read it serves (kread sends what it asks
// of sluice itself), a write into it, or an fsync, before which the
// kernel writes the file's dirty pages back.
func (c *call) inKernel() bool {
	t := c.t
	switch c.op {
	case opRead:
		return t.kernel
	case opMap:
		return true
	case opDirty:
		return t.cachedW
	case opFsync:
		return t.dirties()
	}
	return false
}

// submit hands c's request to sluice (or, for the kernel's own paths, to
// the modelled page cache).
func (r *runner) submit(c *call) {
	t := c.t
	r.cur = t
	defer func() { r.cur = nil }()
	switch c.op {
	case opRead:
		if t.kernel {
			r.kread(c)
			return
		}
		if r.cached(c) {
			return
		}
		r.apply(r.st.Read(r.now, t.h, t.job.g, c.off+c.done, c.part, &c.req))
	case opWrite:
		r.apply(r.st.Write(r.now, t.h, t.job.g, c.off+c.done, c.part, &c.req))
	case opFsync:
		if t.dirties() {
			r.kernel.fsync(r, c)
			return
		}
		r.apply(r.st.Sync(r.now, t.h, t.job.g, &c.req))
	case opDirty:
		r.kernel.dirty(r, c)
	case opSync:
		r.kernel.sync(r, c)
	case opKRead:
		r.ksubmit(c)
	case opMap:
		r.kernel.mapWrite(r, c)
	case opFault:
		r.apply(r.st.Read(r.now, t.h, t.job.g, c.off, c.n, &c.req))
	}
}

// cached serves c and the sequential reads after it, for as long as
// each is a cache hit that starts nothing, in one step: stack.ReadCached
// does what a Read of each would, and the thread goes on when the last
// would have been answered. Each takes one FUSE round trip; events of
// other threads in between are not interleaved, which only moves the
// moment the cached pages are marked used. A read with iodepth above
// one, or split into several FUSE requests, goes the usual way.
func (r *runner) cached(c *call) bool {
	t := c.t
	j := t.job
	half := r.fuseLat / 2
	step := 2 * half
	if j.RW != "read" || j.IODepth > 1 || half <= 0 || c.done != 0 || c.part != c.n {
		return false
	}
	bs, size := c.n, int64(j.Size)
	replyAt := func(i int64) int64 { return r.now + i*step + half }
	if r.stop > 0 && replyAt(0) > r.stop {
		return false
	}
	// Read i >= 1 is issued when read i-1 is answered; count how many
	// the job would issue and the run would see answered.
	ceil := func(a, b int64) int64 { return max(0, (a+b-1)/b) }
	k := 1 + r.opts.CacheBytes/bs    // no more than the cache holds
	k = min(k, ceil(size-c.off, bs)) // the file ends or wraps: the usual way
	if j.end > 0 {
		k = min(k, 1+ceil(j.end-replyAt(0), step))
	}
	if r.stop > 0 {
		k = min(k, 1+(r.stop-replyAt(0))/step)
	}
	if !j.TimeBased {
		k = min(k, 1+ceil(size-t.issued, bs))
	}
	n, a := r.st.ReadCached(r.now, t.h, j.g, c.off, bs, int(k))
	r.apply(a)
	if n == 0 {
		return false
	}
	got := int64(n)
	j.ios += got
	j.bytes += got * bs
	j.clat.addN(step, got)
	if j.first == 0 {
		j.first = c.start
	}
	for i := range got {
		r.count(j.series, replyAt(i), bs)
		j.tally(replyAt(i), 1, bs)
	}
	j.last = replyAt(got - 1)
	r.busy = max(r.busy, j.last)
	t.off = c.off + got*bs
	t.issued += (got - 1) * bs
	r.release(c)
	r.push(event{at: j.last, kind: evNext, t: t})
	return true
}

// answered is called when sluice (or the page cache) has answered c's
// request with c.got bytes: the answer reaches the caller half a round
// trip later.
func (r *runner) answered(c *call) {
	switch c.op {
	case opFlush:
		r.kernel.cleaned(r, c)
		return
	case opKRead:
		r.kdevice(c) // admitted: the driver reads the device
		return
	case opFault:
		r.kernel.faulted(r, c)
		return
	case opDevSync:
		p := c.parent
		r.release(c)
		if p.pending--; p.pending == 0 {
			r.answered(p)
		}
		return
	}
	r.push(event{at: r.now + r.fuseLat/2, kind: evReply, c: c})
}

// reply delivers an answer to the caller.
func (r *runner) reply(c *call) {
	t := c.t
	j := t.job
	switch c.op {
	case opKRead:
		r.kreply(c)
		return
	case opFsync:
		r.release(c)
		r.next(t)
		return
	case opSync:
		r.finished(c)
		return
	}
	if c.got < c.part {
		j.shorts++
	}
	j.bytes += c.got
	r.count(j.series, r.now, c.got)
	j.tally(r.now, 0, c.got)
	c.done += c.got
	if c.got > 0 && c.done < c.n && c.req.Err == nil {
		r.send(c)
		return
	}
	r.finished(c)
}

// apply performs the stack's actions on virtual time.
func (r *runner) apply(a stack.Actions) {
	for _, io := range a.Start {
		r.start(io)
	}
	for _, req := range a.Done {
		c := req.Value.(*call)
		c.got = req.Size()
		if req.Err != nil {
			c.got = 0
		}
		r.answered(c)
	}
	if a.Wake >= 0 && (r.wakeAt < 0 || r.wakeAt <= r.now || a.Wake < r.wakeAt) {
		r.wakeAt = a.Wake
		at := a.Wake
		if r.wakeLate.Kind != "" {
			at += max(r.wakeLate.Sample(r.wakeRNG), 0)
		}
		r.push(event{at: at, kind: evWake, n: a.Wake})
	}
	r.st.Recycle(a) // nothing above kept its slices
}

// wake is the stack's wake-up asked for at, unless an earlier one has
// replaced it since.
func (r *runner) wake(at int64) {
	if r.wakeAt != at {
		return // replaced by an earlier wake-up
	}
	r.wakeAt = -1
	r.apply(r.st.Tick(r.now))
}
