package sim

import (
	"time"

	"sluice/readahead"
	"sluice/stack"
	"sluice/throttle"
)

// The kernel's page cache in front of the mount, as `sluice mount` uses it
// (fsys.CacheMode): groups without a limit, and limited groups that
// cache-mode serves through it (auto: stack.KernelCache), read through
// the kernel's page cache. A buffered read() that finds its pages there
// costs no FUSE request; one that misses starts the kernel's readahead,
// whose requests (of at most max-read bytes) reach sluice, which charges
// and paces them for a limited group (stack.Pay) and reads the device
// itself. A direct (O_DIRECT) read of such a group is one such request.
// Writes are paced at write() unless write-cache takes them (kernel.go).
//
// The kernel's readahead is readahead.State, the port of Linux's
// on-demand readahead that sluice's own readahead uses, with the kernel's
// largest window (kernelRA). The cache holds page-cache bytes (default 4
// GiB) and drops the pages read first. A write does not update pages
// cached by readers of the same file.

// kernelRA is the kernel's largest readahead window on the mount: the
// read_ahead_kb that sluice sets (fsys.Mount).
const kernelRA = 1 << 20

// cacheHit is what a read() served from the page cache costs the reader:
// about what 4 KiB reads of cached pages take on the bench's VM (1400 to
// 1800 MiB/s).
const cacheHit = int64(2500 * time.Nanosecond)

// defaultPageCache is the kernel's page cache for the mount's files when a
// scenario gives none.
const defaultPageCache = 4 << 30

// kfile is the kernel's page cache of one file.
type kfile struct {
	cached  []uint64 // bitset of pages in the cache
	reading []uint64 // bitset of pages being read
	marks   map[int64]bool
	waiters []*call // reads waiting for pages
}

// pcache is the kernel's page cache of the mount.
type pcache struct {
	limit int64
	bytes int64
	fifo  []kext // extents read into the cache, oldest first
	head  int
}

type kext struct {
	f      *file
	lo, hi int64 // pages
}

func bit(s []uint64, i int64) bool { return i>>6 < int64(len(s)) && s[i>>6]&(1<<(i&63)) != 0 }

func setBit(s *[]uint64, i int64, v bool) {
	for i>>6 >= int64(len(*s)) {
		*s = append(*s, 0)
	}
	if v {
		(*s)[i>>6] |= 1 << (i & 63)
	} else {
		(*s)[i>>6] &^= 1 << (i & 63)
	}
}

// kread serves the application read c of a thread that reads through the
// kernel's page cache.
func (r *runner) kread(c *call) {
	t, f := c.t, c.t.f
	c.req.Err = nil
	if t.job.Direct {
		// O_DIRECT: each FUSE request goes to sluice, as without the cache.
		c.part = min(c.n-c.done, r.maxRead)
		r.push(event{at: r.now + r.fuseLat/2, kind: evSubmit, c: r.kreq(t, c, c.off+c.done, c.part)})
		return
	}
	off := c.off + c.done
	end := min(c.off+c.n, f.size)
	if off >= end {
		c.part, c.got = c.n-c.done, 0
		r.push(event{at: r.now + cacheHit, kind: evReply, c: c})
		return
	}
	kf := r.kfileOf(f)
	lo, hi := off/stack.PageSize, (end-1)/stack.PageSize+1
	// As filemap_read: a missing page starts synchronous readahead from
	// it, a marked page the next window ahead of the reader.
	ra, max := &t.ra, int64(kernelRA/stack.PageSize)
	for p := lo; p < hi; p++ {
		switch {
		case !kf.Has(p):
			w := ra.Sync(p, hi-p, max, kf)
			if w.Start > p {
				r.readahead(t, kf, readahead.Window{Start: p, Size: w.Start - p})
			}
			r.readahead(t, kf, w)
		case kf.marks[p]:
			delete(kf.marks, p)
			if w, ok := ra.Async(p, hi-p, max, kf); ok {
				r.readahead(t, kf, w)
			}
		}
	}
	ra.Accessed(end)
	c.part = c.n - c.done
	r.kwait(kf, c, off, end)
}

// Has reports whether page index is in the cache or being read into it
// (readahead.Cache).
func (kf *kfile) Has(index int64) bool { return bit(kf.cached, index) || bit(kf.reading, index) }

// readahead reads the pages of window w of t's file that are not in the
// cache, in FUSE requests of at most max-read, and marks w's marker page
// if it reads it now.
func (r *runner) readahead(t *thread, kf *kfile, w readahead.Window) {
	f := t.f
	hi := min(w.End(), (f.size+stack.PageSize-1)/stack.PageSize)
	if m := w.Marker(); m >= 0 && m < hi && !kf.Has(m) {
		kf.marks[m] = true
	}
	maxPages := r.maxRead / stack.PageSize
	for p := w.Start; p < hi; {
		if kf.Has(p) {
			p++
			continue
		}
		q := p
		for q < hi && q-p < maxPages && !kf.Has(q) {
			setBit(&kf.reading, q, true)
			q++
		}
		off := p * stack.PageSize
		c := r.kreq(t, nil, off, min(q*stack.PageSize, f.size)-off)
		r.push(event{at: r.now + r.fuseLat/2, kind: evSubmit, c: c})
		p = q
	}
}

// kreq is a FUSE read request that the kernel sends for t: readahead
// into the cache (app nil), or the part of the direct read app.
func (r *runner) kreq(t *thread, app *call, off, n int64) *call {
	c := r.newCall(t, opKRead, off, n)
	c.parent = app
	c.part = n
	c.req.Err = nil
	return c
}

// ksubmit hands the kernel's FUSE read c to sluice: charged and paced for
// a limited group, then read from the device by the driver.
func (r *runner) ksubmit(c *call) {
	g := c.t.job.g
	if !g.Limited() {
		r.st.Pass(g, throttle.Read, c.n)
		r.kdevice(c)
		return
	}
	r.apply(r.st.Pay(r.now, c.t.h, g, c.off, c.n, &c.req))
}

// kdevice reads c's range from the device, as the mount's driver does
// once sluice has admitted it.
func (r *runner) kdevice(c *call) {
	io := &stack.IO{Op: stack.OpRead, File: c.t.f, Ino: c.t.f.ino, Off: c.off, Len: c.n}
	r.kio[io] = c
	r.cur = c.t
	r.start(io)
	r.cur = nil
}

// kdone is the device's answer to the kernel's FUSE read c: it reaches
// the kernel half a round trip later (evReply).
func (r *runner) kdone(c *call, n int64, err error) {
	if p := c.req.TakePayment(); p.Due() {
		r.apply(r.st.Paid(r.now, p, n))
	}
	c.got = n
	if err != nil {
		c.got = 0
		c.req.Err = err
	}
	r.push(event{at: r.now + r.fuseLat/2, kind: evReply, c: c})
}

// kreply takes the answer to the kernel's FUSE read c: pages into the
// cache, or the part of a direct read back to its caller.
func (r *runner) kreply(c *call) {
	t, app := c.t, c.parent
	if app != nil {
		app.got = c.got
		app.req.Err = c.req.Err
		r.release(c)
		r.reply(app)
		return
	}
	kf := r.kfileOf(t.f)
	lo := c.off / stack.PageSize
	hi := (c.off + c.n + stack.PageSize - 1) / stack.PageSize
	for p := lo; p < hi; p++ {
		setBit(&kf.reading, p, false)
		if c.req.Err == nil {
			setBit(&kf.cached, p, true)
		}
	}
	if c.req.Err == nil {
		r.pc.fifo = append(r.pc.fifo, kext{t.f, lo, hi})
		r.pc.bytes += (hi - lo) * stack.PageSize
		r.evictPC()
	}
	err := c.req.Err
	r.release(c)
	waiters := kf.waiters
	kf.waiters = nil
	for _, w := range waiters {
		if err != nil && overlaps(w, lo, hi) {
			w.got, w.req.Err = 0, err
			r.push(event{at: r.now, kind: evReply, c: w})
			continue
		}
		r.kwait(kf, w, w.off+w.done, min(w.off+w.n, w.t.f.size))
	}
}

func overlaps(c *call, lo, hi int64) bool {
	off, end := c.off+c.done, min(c.off+c.n, c.t.f.size)
	return off/stack.PageSize < hi && (end-1)/stack.PageSize >= lo
}

// kwait answers the read c of [off, end) once all its pages are cached,
// or queues it.
func (r *runner) kwait(kf *kfile, c *call, off, end int64) {
	lo, hi := off/stack.PageSize, (end-1)/stack.PageSize+1
	for p := lo; p < hi; p++ {
		if !bit(kf.cached, p) {
			if !bit(kf.reading, p) {
				// Dropped before it was read: read it again.
				r.readahead(c.t, kf, readahead.Window{Start: p, Size: hi - p})
			}
			kf.waiters = append(kf.waiters, c)
			return
		}
	}
	c.got = end - off
	r.push(event{at: r.now + cacheHit, kind: evReply, c: c})
}

// evictPC drops the oldest pages read until the cache is within its limit.
func (r *runner) evictPC() {
	pc := &r.pc
	for pc.bytes > pc.limit && pc.head < len(pc.fifo) {
		e := pc.fifo[pc.head]
		pc.head++
		kf := r.kfileOf(e.f)
		for p := e.lo; p < e.hi; p++ {
			setBit(&kf.cached, p, false)
			delete(kf.marks, p) // the marker goes with its page
		}
		pc.bytes -= (e.hi - e.lo) * stack.PageSize
	}
	if pc.head > 1024 && pc.head*2 > len(pc.fifo) {
		pc.fifo = append(pc.fifo[:0], pc.fifo[pc.head:]...)
		pc.head = 0
	}
}

func (r *runner) kfileOf(f *file) *kfile {
	if f.kc == nil {
		f.kc = &kfile{marks: map[int64]bool{}}
	}
	return f.kc
}
