// Package stack composes sluice's policies — group tree and throttle,
// readahead, read cache bookkeeping and request splitting — into one
// single-threaded state machine.
//
// The stack has three kinds of input: an application request arrives (Read,
// Write), a device I/O finishes (Complete), or the clock reaches the wake-up
// time the stack asked for (Tick). Each returns Actions: device reads to
// start, application requests that are finished, and the next wake-up time.
// The stack never sleeps, reads the clock, starts goroutines or touches a
// file; it moves page numbers and byte counts. Page contents are opaque
// buffers handed in by the driver on Complete and handed back in finished
// requests. The real engine drives it from FUSE goroutines under one mutex;
// a simulator can drive it on virtual time.
package stack

import (
	"errors"
	"math"

	"sluice/block"
	"sluice/readahead"
	"sluice/throttle"
)

// Actions is what the driver must do after a call into the stack, in order:
// start every I/O in Start, then complete every request in Done, then make
// sure Tick is called at Wake.
type Actions struct {
	// Start lists device reads admitted by the throttle. For each, the driver
	// reads Len bytes at Off from the backing file of the I/O's File into a
	// buffer of at least Len bytes and reports the result with Complete.
	Start []*IO
	// Done lists application requests that are finished. For a read, the
	// driver copies the data out with Request.CopyTo; for a write, it may now
	// write the data to the backing file and then call Written.
	Done []*Request
	// Wake is the time at which the driver must call Tick; -1 when nothing
	// is waiting on time. A later call's Wake replaces an earlier one.
	Wake int64
}

// Handle is the per-open-file state the stack keeps for the driver. The
// driver creates one per open and passes it to every call for that open.
type Handle struct {
	// Ino identifies the file whose pages the handle reads.
	Ino uint64
	// File is the driver's backing file for reads caused by this handle;
	// the stack copies it into every IO and never looks inside.
	File any

	ra readahead.State
}

// IO is one device request of at most MaxIO bytes.
type IO struct {
	Dir      throttle.Dir
	Ino      uint64
	File     any
	Off, Len int64
	Class    throttle.Class

	group    *throttle.Group
	req      throttle.Request
	queuedAt int64
	started  bool
	gen      uint64   // reads: the file's generation when issued
	pages    []*page  // reads: the pages this I/O fills, in order
	write    *Request // writes: the application write this piece belongs to
}

// Request is one application read or write as seen at the FUSE layer.
type Request struct {
	// Value is the driver's, untouched by the stack (typically what wakes the
	// goroutine waiting for the request).
	Value any
	// Err is set when the request failed.
	Err error

	dir      throttle.Dir
	group    *throttle.Group
	handle   *Handle
	off, len int64
	pages    []*page // reads: pages from off on, in order
	ios      []*IO   // writes: the pieces
	pending  int
	done     bool
}

// ErrCanceled is the error of a request removed by Cancel.
var ErrCanceled = errors.New("request canceled")

// Stack is the composition. It is not safe for concurrent use.
type Stack struct {
	opts    Options
	tree    *throttle.Tree
	queue   *throttle.Queue
	files   map[uint64]*file
	gens    uint64 // file generations handed out: never repeated, so an I/O issued before a file was forgotten or changed cannot touch its successor
	lru     pageList
	cached  int64 // valid pages in the LRU
	limit   int64 // page capacity
	stats   map[*throttle.Group]*counters
	scratch []*throttle.Request
	acts    Actions
}

// New returns a stack with opts (defaults applied; see Options.Validate).
func New(opts Options) (*Stack, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	t := throttle.New(throttle.Config{Burst: opts.Burst})
	s := &Stack{
		opts:  opts,
		tree:  t,
		queue: throttle.NewQueue(t),
		files: make(map[uint64]*file),
		limit: opts.CacheBytes / PageSize,
		stats: make(map[*throttle.Group]*counters),
	}
	s.lru.init()
	return s, nil
}

// Options returns the options in force, defaults filled in.
func (s *Stack) Options() Options { return s.opts }

// Group returns the group for a slash-separated path, creating it.
func (s *Stack) Group(path string) *throttle.Group {
	g := s.tree.Group(path)
	s.each(g, func(*counters) {}) // list it and its ancestors in Metrics
	return g
}

// SetLimits changes a group's limits at now; queued requests are re-timed.
func (s *Stack) SetLimits(now int64, path string, l throttle.Limits) Actions {
	s.Group(path)
	s.tree.SetLimits(now, path, l)
	return s.release(now)
}

// Tick releases what is due at now.
func (s *Stack) Tick(now int64) Actions { return s.release(now) }

// Read starts an application read of n bytes at off through h by group g.
// The request finishes (in some Actions.Done) when its pages are in the
// cache or at end of file.
func (s *Stack) Read(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	*r = Request{Value: r.Value, dir: throttle.Read, group: g, handle: h, off: off, len: n}
	s.each(g, func(c *counters) { c.AppReads++ })
	if n <= 0 {
		s.finish(r)
		return s.release(now)
	}
	f := s.file(h.Ino)
	first, last := off/PageSize, (off+n-1)/PageSize
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
		p := f.pages[idx]
		if p == nil {
			var w readahead.Window
			if s.opts.NoReadahead {
				w = readahead.Window{Start: idx, Size: want}
			} else {
				w = s.clamp(now, h, g, h.ra.Sync(idx, want, maxPages, f))
			}
			s.issue(now, h, g, f, w, idx, last)
			if f.pages[idx] == nil { // a window that does not cover idx: read it alone
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
		if p.ahead {
			// First use of a page read ahead; a page still being read is
			// counted when its length is known.
			p.ahead = false
			if !p.pending {
				s.each(p.group, func(c *counters) { c.RAUsed += int64(len(p.buf)) })
			}
		}
		r.pages = append(r.pages, p)
		if p.pending {
			p.waiters = append(p.waiters, r)
			r.pending++
			if io := p.io; io != nil && !io.started {
				s.join(now, io, g)
			}
		} else {
			s.lru.touch(p)
			if len(p.buf) < PageSize {
				break // end of file
			}
		}
		idx++
	}
	h.ra.Accessed(off + n)
	if r.pending == 0 {
		s.finish(r)
	}
	return s.release(now)
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
		io.req = throttle.Request{Group: g, Dir: io.Dir, Bytes: io.Len, IOs: 1, Class: throttle.Demand, Value: io}
		for _, p := range io.pages {
			p.group = g
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
	if s.opts.NoReadaheadBudget || w.AsyncSize == 0 {
		return w
	}
	// Bytes only: readahead that extends a read up to MaxIO costs no more
	// I/Os, and its separate I/Os queue behind demand reads as readahead.
	b := s.tree.ByteBudget(now, g, throttle.Read)
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
		if f.pages[i] != nil {
			i++
			continue
		}
		j := i
		for j < end && j-i < maxPages && f.pages[j] == nil {
			j++
		}
		io := &IO{
			Dir: throttle.Read, Ino: h.Ino, File: h.File,
			Off: i * PageSize, Len: (j - i) * PageSize,
			Class: throttle.Readahead, group: g, queuedAt: now, gen: f.gen,
		}
		if i <= dlast && j-1 >= dfirst {
			io.Class = throttle.Demand
		}
		for k := i; k < j; k++ {
			p := &page{file: f, index: k, pending: true, io: io, group: g}
			p.ahead = k < dfirst || k > dlast
			p.fromRA = p.ahead
			p.marker = k == marker
			f.pages[k] = p
			io.pages = append(io.pages, p)
		}
		io.req = throttle.Request{Group: g, Dir: throttle.Read, Bytes: io.Len, IOs: 1, Class: io.Class, Value: io}
		s.queue.Push(now, &io.req)
		i = j
	}
}

// Complete reports that io finished at now: pages[k] holds the bytes of
// the I/O's k-th page, shorter than PageSize (or absent) past the end of the
// file; or the I/O failed with err. The stack keeps the slices in its cache
// until they are evicted, so each should be a separate allocation (a page
// that outlives its neighbours then pins nothing else) and must not change.
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
	s.each(io.group, func(c *counters) { c.RBytes += got })
	if f := s.files[io.Ino]; err == nil && got < io.Len && f != nil && f.gen == io.gen {
		f.eof, f.eofAt = io.Off+got, now
	}
	for k, p := range io.pages {
		p.pending = false
		p.io = nil
		p.buf = nil
		if err == nil && k < len(pages) {
			p.buf = pages[k]
		}
		live := p.file.pages[p.index] == p
		switch {
		case err != nil || len(p.buf) == 0:
			// Failed, or beyond end of file: serve the waiters, keep nothing.
			if live {
				delete(p.file.pages, p.index)
			}
			p.ahead = false
		case live:
			s.lru.push(p)
			s.cached++
			if len(p.buf) < PageSize {
				p.file.tail = p.index
			}
		}
		if p.fromRA {
			n := int64(len(p.buf))
			used := int64(0)
			if !p.ahead {
				used = n // used while it was being read
			}
			s.each(p.group, func(c *counters) { c.RAIssued += n; c.RAUsed += used })
		}
		for _, r := range p.waiters {
			if err != nil && r.Err == nil {
				r.Err = err
			}
			if r.pending--; r.pending == 0 {
				s.finish(r)
			}
		}
		p.waiters = nil
	}
	s.evict()
	return s.release(now)
}

// Write starts an application write of n bytes at off by group g. Each
// MaxIO piece is charged one write I/O and its bytes; the request finishes
// when every piece is admitted, and the driver then writes the data and
// calls Written.
func (s *Stack) Write(now int64, h *Handle, g *throttle.Group, off, n int64, r *Request) Actions {
	*r = Request{Value: r.Value, dir: throttle.Write, group: g, handle: h, off: off, len: n}
	s.each(g, func(c *counters) { c.AppWrites++ })
	for _, pc := range block.Split(off, n, s.opts.MaxIO) {
		io := &IO{Dir: throttle.Write, Ino: h.Ino, File: h.File, Off: pc.Off, Len: pc.Len,
			Class: throttle.Demand, group: g, queuedAt: now, write: r}
		io.req = throttle.Request{Group: g, Dir: throttle.Write, Bytes: pc.Len, IOs: 1, Class: throttle.Demand, Value: io}
		r.ios = append(r.ios, io)
		r.pending++
		s.queue.Push(now, &io.req)
	}
	if r.pending == 0 {
		s.finish(r)
	}
	return s.release(now)
}

// Written reports that the driver wrote got bytes of the finished write r.
// Cached pages the write touched are dropped, and unwritten bytes refunded.
func (s *Stack) Written(now int64, r *Request, got int64) Actions {
	if got < r.len && got >= 0 {
		s.tree.Refund(now, r.group, throttle.Write, r.len-got)
		s.each(r.group, func(c *counters) { c.WBytes -= r.len - got })
	}
	if got > 0 {
		s.each(r.group, func(c *counters) { c.AppWBytes += got })
	}
	s.Changed(r.handle.Ino, r.off, r.len)
	return s.release(now)
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
	for idx := range f.pages {
		if idx >= size/PageSize {
			s.drop(f, idx, idx)
		}
	}
	s.forgetEnd(f)
}

// forgetEnd forgets where f ends, after a change that may have moved its
// end: the partial last page leaves the cache (a grown file must not keep
// its old end) and reads issued before the change cannot set the end again.
func (s *Stack) forgetEnd(f *file) {
	if f.tail >= 0 {
		s.drop(f, f.tail, f.tail)
		f.tail = -1
	}
	s.gens++
	f.eof, f.gen = -1, s.gens
}

// drop removes pages [lo, hi] of f from the cache. Pending pages are
// detached: their readers still get the data being read, but the cache does
// not keep it.
func (s *Stack) drop(f *file, lo, hi int64) {
	if hi-lo > int64(len(f.pages)) {
		for idx, p := range f.pages {
			if idx >= lo && idx <= hi {
				s.remove(p)
			}
		}
		return
	}
	for idx := lo; idx <= hi; idx++ {
		if p := f.pages[idx]; p != nil {
			s.remove(p)
		}
	}
}

func (s *Stack) remove(p *page) {
	delete(p.file.pages, p.index)
	if p.pending {
		return
	}
	s.lru.unlink(p)
	s.cached--
	if p.ahead {
		s.each(p.group, func(c *counters) { c.RAWasted += int64(len(p.buf)) })
		p.ahead = false
	}
}

// Pass accounts a request served without the stack (a group with no limit
// reading or writing through the kernel's cache or the backing file):
// app-level and device-level bytes and calls, device I/Os counted per MaxIO
// piece.
func (s *Stack) Pass(g *throttle.Group, d throttle.Dir, n int64) {
	ios := block.Count(n, s.opts.MaxIO)
	s.each(g, func(c *counters) {
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

// Cancel withdraws r (an interrupted request) at now. Its queued demand
// reads that no other request waits for are withdrawn too; writes that were
// not yet admitted are not charged. r.Err becomes ErrCanceled.
func (s *Stack) Cancel(now int64, r *Request) Actions {
	if r.done {
		return s.release(now)
	}
	r.done = true
	r.Err = ErrCanceled
	for _, io := range r.ios {
		if !io.started {
			s.queue.Remove(&io.req)
			continue
		}
		// Admitted but never written: give the bytes back. The throttle
		// refunds bytes only, so the pieces' I/Os stay charged (and counted).
		s.tree.Refund(now, io.group, throttle.Write, io.Len)
		s.each(io.group, func(c *counters) { c.WBytes -= io.Len })
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
		for _, q := range io.pages {
			if q.file.pages[q.index] == q {
				delete(q.file.pages, q.index)
			}
		}
	}
	return s.release(now)
}

// Force admits r's queued I/Os at now whatever the group's debt, charging
// them in full: the long-run rate stays exact, and one request's wait stays
// bounded (the driver calls Force when a wait reaches its cap).
func (s *Stack) Force(now int64, r *Request) Actions {
	force := func(io *IO) {
		if io == nil || io.started || !s.queue.Remove(&io.req) {
			return
		}
		s.tree.Charge(now, io.group, io.Dir, io.Len, 1)
		s.admitted(now, io)
	}
	for _, io := range r.ios {
		force(io)
	}
	for _, p := range r.pages {
		if p.pending {
			force(p.io)
		}
	}
	return s.release(now)
}

func waited(io *IO) bool {
	for _, p := range io.pages {
		if len(p.waiters) > 0 {
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

// release admits what the throttle allows at now and returns the actions
// gathered since the last return.
func (s *Stack) release(now int64) Actions {
	var next int64
	s.scratch, next = s.queue.Release(now, s.scratch[:0])
	for _, q := range s.scratch {
		s.admitted(now, q.Value.(*IO))
	}
	clear(s.scratch)
	a := s.acts
	a.Wake = next
	s.acts = Actions{}
	return a
}

// admitted records that io left the throttle at now.
func (s *Stack) admitted(now int64, io *IO) {
	io.started = true
	wait := now - io.queuedAt
	s.each(io.group, func(c *counters) {
		c.ThrottledNs += wait
		if io.Dir == throttle.Read {
			c.RIOs++
		} else {
			c.WIOs++
			c.WBytes += io.Len
		}
	})
	if io.Dir == throttle.Read {
		s.acts.Start = append(s.acts.Start, io)
		return
	}
	if r := io.write; !r.done {
		if r.pending--; r.pending == 0 {
			s.finish(r)
		}
	}
}

func (s *Stack) finish(r *Request) {
	if r.done {
		return
	}
	r.done = true
	if r.dir == throttle.Read {
		s.each(r.group, func(c *counters) { c.AppRBytes += r.Size() })
	}
	s.acts.Done = append(s.acts.Done, r)
}

// Size is the number of bytes a finished read delivers: up to the end of
// the file or the first failed page.
func (r *Request) Size() int64 {
	if r.dir != throttle.Read || r.Err != nil {
		return 0
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

// evict drops least recently used pages beyond the cache's capacity.
func (s *Stack) evict() {
	for s.cached > s.limit {
		p := s.lru.oldest()
		if p == nil {
			return
		}
		s.remove(p)
	}
}

func (s *Stack) file(ino uint64) *file {
	f := s.files[ino]
	if f == nil {
		s.gens++
		f = &file{pages: make(map[int64]*page), tail: -1, eof: -1, gen: s.gens}
		s.files[ino] = f
	}
	return f
}

// Forget drops everything cached for ino (the file is gone from the
// kernel's view). Pending reads still finish for their waiters.
func (s *Stack) Forget(ino uint64) {
	if f := s.files[ino]; f != nil {
		for _, p := range f.pages {
			s.remove(p)
		}
		delete(s.files, ino)
	}
}
