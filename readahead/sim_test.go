package readahead

import (
	"fmt"
	"math"
	"strings"
)

// pageCache is a fake page cache for one file: the pages it holds and the
// pages that carry the readahead marker.
type pageCache struct {
	pages   map[int64]bool
	marks   map[int64]bool
	fetched int64 // pages read from the device
}

func newPageCache() *pageCache {
	return &pageCache{pages: map[int64]bool{}, marks: map[int64]bool{}}
}

func (c *pageCache) Has(index int64) bool { return c.pages[index] }

// fill reads the missing pages of w and sets the marker on the marker page
// if it is read now, as the kernel's page_cache_ra_unbounded does. It
// returns the runs of pages it read, as windows without asynchronous part.
func (c *pageCache) fill(w Window) []Window {
	var runs []Window
	m := w.Marker()
	for p := w.Start; p < w.End(); p++ {
		if c.pages[p] {
			continue
		}
		c.pages[p] = true
		c.fetched++
		if p == m {
			c.marks[p] = true
		}
		if n := len(runs); n > 0 && runs[n-1].End() == p {
			runs[n-1].Size++
		} else {
			runs = append(runs, Window{Start: p, Size: 1})
		}
	}
	return runs
}

// event is one window a reader got from Sync or Async, after Clamp.
type event struct {
	kind       byte // 'S' for Sync, 'A' for Async
	index, req int64
	w          Window
}

func (e event) String() string {
	return fmt.Sprintf("%c%d+%d{%d,%d,%d}", e.kind, e.index, e.req, e.w.Start, e.w.Size, e.w.AsyncSize)
}

func evS(index, req, start, size, async int64) event {
	return event{'S', index, req, Window{start, size, async}}
}

func evA(index, req, start, size, async int64) event {
	return event{'A', index, req, Window{start, size, async}}
}

func fmtEvents(es []event) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.String())
	}
	return b.String()
}

// reader is one open of a file: a State on a cache that other readers may
// share.
type reader struct {
	st       *State
	c        *pageCache
	maxPages int64
	budget   func() int64 // nil: no clamp
	events   []event
	pages    int64 // pages the reads asked for
	// note, if set, is told of every Sync and Async: the window it
	// returned (ok false: Async had nothing to read), the budget and the
	// window after the clamp (budget noClamp: none), the runs of pages
	// read for the window, and the page of the read read on its own when
	// the window does not cover it (-1: none).
	note func(kind byte, index, req int64, raw Window, ok bool, budget int64, w Window, fetched []Window, alone int64)
}

func newReader(st *State, c *pageCache, maxPages int64) *reader {
	return &reader{st: st, c: c, maxPages: maxPages}
}

// noClamp is the budget a reader without one reports.
const noClamp = math.MinInt64

// clamp clamps w by the reader's budget, if it has one, and returns the
// result and the budget (noClamp when there is none).
func (r *reader) clamp(w Window) (Window, int64) {
	if r.budget == nil {
		return w, noClamp
	}
	b := r.budget()
	return r.st.Clamp(w, b), b
}

// read reads n bytes at pos the way the kernel's filemap_read does, page by
// page: a missing page calls Sync and reads the window (and the page itself
// if the window does not cover it); a page with the marker clears it and
// calls Async; then the page is copied out and prev_pos moves to the
// position reached.
func (r *reader) read(pos, n int64) {
	end := pos + n
	last := (end + PageSize - 1) / PageSize
	for idx := pos / PageSize; idx < last; idx++ {
		req := last - idx
		if !r.c.Has(idx) {
			raw := r.st.Sync(idx, req, r.maxPages, r.c)
			w, b := r.clamp(raw)
			r.events = append(r.events, event{'S', idx, req, w})
			fetched := r.c.fill(w)
			alone := int64(-1)
			if !r.c.Has(idx) {
				r.c.fill(Window{Start: idx, Size: 1})
				alone = idx
			}
			if r.note != nil {
				r.note('S', idx, req, raw, true, b, w, fetched, alone)
			}
		}
		if r.c.marks[idx] {
			delete(r.c.marks, idx)
			raw, ok := r.st.Async(idx, req, r.maxPages, r.c)
			w, b, fetched := raw, int64(noClamp), []Window(nil)
			if ok {
				w, b = r.clamp(raw)
				r.events = append(r.events, event{'A', idx, req, w})
				fetched = r.c.fill(w)
			}
			if r.note != nil {
				r.note('A', idx, req, raw, ok, b, w, fetched, -1)
			}
		}
		r.pages++
		r.st.Accessed(min(end, (idx+1)*PageSize))
	}
}

// readPages reads count pages of 4 KiB one at a time from page first on.
func (r *reader) readPages(first, count int64) {
	for i := first; i < first+count; i++ {
		r.read(i*PageSize, PageSize)
	}
}
