package stack

import "sluice/throttle"

// The read cache: pages of files by index, the LRU that bounds them, and
// what the stack knows of each file's end.

// file is the cache's view of one backing file.
type file struct {
	pages pageTable
	// tail is the index of a cached page shorter than PageSize (the end of
	// the file when it was read), or -1. A write anywhere may extend the
	// file, so Changed drops it.
	tail int64
	// eof is the file's size as the last short read found it (at eofAt), or
	// -1 when unknown. Changes reset it, and gen counts them so a read issued
	// before a change cannot set a stale eof.
	eof   int64
	eofAt int64
	gen   uint64
	// dirty is what writes through the stack left in the backing page
	// cache and no writeback has been started for.
	dirty dirtyRange
	// mapped: the kernel has written the file back without a caller
	// (pages written through a shared mapping), so reads of it may be a
	// mapping's page faults and pay its group's write debt (see Read).
	mapped bool
}

// dirtyRange is a span of a file holding n bytes written by group g,
// the first of them at since.
type dirtyRange struct {
	lo, hi, n int64
	since     int64
	g         *throttle.Group
	ino       uint64
	file      any
}

// eofTrust is how long a file's end, as a short read found it, is trusted.
// Within it, reads at or past the end cost no device I/O (an application
// reading to the end probes once more right away); past it, a writer that
// appends behind sluice's back is seen again.
const eofTrust = 100e6

func (f *file) eofKnown(now int64) bool { return f.eof >= 0 && now-f.eofAt < eofTrust }

// Has reports whether page index is in the cache or being read; it is the
// readahead package's view of the cache.
func (f *file) Has(index int64) bool { return f.pages.get(index) != nil }

// page is one PageSize piece of a file in the cache.
type page struct {
	file    *file
	index   int64
	buf     []byte // contents once read; shorter than PageSize at end of file
	pending bool   // being read by io
	io      *IO
	waiters []*Request
	w1      [1]*Request     // waiters' storage for the usual single waiter
	pins    int32           // unfinished requests holding the page
	out     bool            // left the cache (its buf goes to Free once unpinned)
	freed   bool            // its buf is in some Actions.Free
	group   *throttle.Group // who read it
	marker  bool            // touching it starts the next readahead window
	ahead   bool            // read ahead and not used yet
	fromRA  bool            // read ahead rather than demanded

	prev, next *page // LRU links while cached and not pending
}

// pageList is an intrusive LRU list; the sentinel's next is the oldest.
type pageList struct{ root page }

func (l *pageList) init() { l.root.prev, l.root.next = &l.root, &l.root }

func (l *pageList) push(p *page) {
	p.prev, p.next = l.root.prev, &l.root
	p.prev.next, l.root.prev = p, p
}

func (l *pageList) unlink(p *page) {
	if p.next == nil {
		return
	}
	p.prev.next, p.next.prev = p.next, p.prev
	p.prev, p.next = nil, nil
}

func (l *pageList) touch(p *page) {
	if p.next == nil {
		return
	}
	l.unlink(p)
	l.push(p)
}

func (l *pageList) oldest() *page {
	if l.root.next == &l.root {
		return nil
	}
	return l.root.next
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
		f = &file{tail: -1, eof: -1, gen: s.gens}
		s.files[ino] = f
	}
	return f
}

// Forget drops everything cached for ino (the file is gone from the
// kernel's view). Pending reads still finish for their waiters.
func (s *Stack) Forget(ino uint64) {
	if f := s.files[ino]; f != nil {
		s.clean(f) // the kernel writes it back in its time
		f.pages.each(func(_ int64, p *page) { s.remove(p) })
		delete(s.files, ino)
	}
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
	if hi-lo > int64(f.pages.len()) {
		f.pages.each(func(idx int64, p *page) {
			if idx >= lo && idx <= hi {
				s.remove(p)
			}
		})
		return
	}
	for idx := lo; idx <= hi; idx++ {
		if p := f.pages.get(idx); p != nil {
			s.remove(p)
		}
	}
}

func (s *Stack) remove(p *page) {
	p.file.pages.del(p.index)
	if p.pending {
		return
	}
	s.lru.unlink(p)
	s.cached--
	if p.ahead {
		s.each(p.group, func(c *Counters) { c.RAWasted += int64(len(p.buf)) })
		p.ahead = false
	}
	p.out = true
	s.free(p)
}

// unpin lets go of p for a request that no longer reads it.
func (s *Stack) unpin(p *page) {
	p.pins--
	s.free(p)
}

// free hands p's buffer back to the driver (Actions.Free) once p has left
// the cache and no unfinished request holds it.
func (s *Stack) free(p *page) {
	if p.out && p.pins == 0 && !p.freed && len(p.buf) > 0 {
		p.freed = true
		s.acts.Free = append(s.acts.Free, p.buf)
	}
}
