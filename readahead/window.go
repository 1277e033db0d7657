package readahead

// PageSize is the unit of every page index and count in this package, in
// bytes.
const PageSize = 4096

// Cache answers what the page cache holds for one file. The driver
// implements it over its cache; a page that is being read counts as held.
// State uses it to find the end of a stream's readahead (the kernel's
// page_cache_next_miss) and the cached history behind a miss
// (page_cache_prev_miss).
type Cache interface {
	Has(index int64) bool
}

// Window is a range of pages to read: [Start, Start+Size).
//
// The last AsyncSize pages are the asynchronous part. When AsyncSize > 0 the
// page at Start+Size-AsyncSize (Marker) carries the readahead marker: the
// driver sets the marker on that page if it reads it now, and not if the
// page was already cached (the kernel does not mark cached pages). When a
// read later touches a marked page, the driver clears the marker and calls
// State.Async.
//
// The driver reads the pages of the window that are not cached. Pages of
// the window that the current read needs are demand pages; the rest are
// readahead. A window never starts before the page the read is at, but it
// may start after it (see State.Sync), and it may reach past the end of the
// file: the driver reads only pages that exist and sets no marker past the
// end.
type Window struct {
	Start, Size, AsyncSize int64
}

// End is the first page after the window.
func (w Window) End() int64 { return w.Start + w.Size }

// Marker is the page that carries the readahead marker, or -1 when the
// window has no asynchronous part.
func (w Window) Marker() int64 {
	if w.AsyncSize <= 0 {
		return -1
	}
	return w.Start + w.Size - w.AsyncSize
}

// Demand is the number of pages of w that a read of req pages from page
// index needs: the overlap of [index, index+req) with w. For the windows
// that Sync and Async return, which never start before index, these are the
// first Demand pages of w.
func (w Window) Demand(index, req int64) int64 {
	lo := max(w.Start, index)
	hi := min(w.End(), index+req)
	return max(hi-lo, 0)
}
