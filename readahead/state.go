package readahead

import "math/bits"

// State is the readahead state of one open file (the kernel's
// file_ra_state): the last readahead window and where the previous read
// ended.
//
//	                     |<-------- AsyncSize -------|
//	|------------------------ Size ----------------->|
//	|====================#===========================|
//	^Start               ^marker: Start+Size-AsyncSize
//
// The zero value is a fresh file. A State is not safe for concurrent use:
// the caller serialises calls on one State. Several States (several opens)
// may share one Cache.
type State struct {
	// Start, Size and AsyncSize are the last window that Sync, Async or
	// Clamp recorded, in pages.
	Start, Size, AsyncSize int64
	// PrevPos is where the previous read ended, in bytes (exclusive), as
	// set by Accessed. A negative PrevPos means there was no previous read.
	// The zero value counts as a read that ended at byte 0, so a first read
	// at page 0 or 1 of a fresh State counts as sequential.
	PrevPos int64

	// reqIndex and reqPages are the read that set the recorded window: the
	// page Sync or Async was called for and the pages the read wanted from
	// it. Clamp uses them to keep the pages that read needs.
	reqIndex, reqPages int64
}

// Sync is called when a read finds page index missing from the cache; req
// is the number of pages the read still wants from index on (values below 1
// count as 1) and maxPages is the largest window (128 KiB is 32 pages);
// maxPages <= 0 turns readahead off and Sync returns {index, req, 0}. It
// returns the window to read, following the kernel's ondemand_readahead for
// a cache miss:
//
//   - index 0: initial window for req (InitSize);
//   - index is where the recorded window expects the stream
//     (Start+Size-AsyncSize or Start+Size): the window moves forward to
//     Start+Size and ramps up (NextSize);
//   - req > maxPages: initial window;
//   - sequential miss (the read starts on the page where the previous one
//     ended, or on the next page): initial window;
//   - at least req+1 cached pages right before index (another stream left
//     them; counted up to maxPages): a window of history+req pages (doubled
//     history when it reaches page 0), capped at maxPages, with AsyncSize 1;
//   - otherwise a random read: exactly {index, req, 0}, state unchanged.
//
// Every window except the random one is recorded in the state. When the
// read starts at the marker of the window it gets (the window starts at
// index and is all asynchronous), the next window is merged into it at
// once, capped at maxPages with the second half asynchronous.
//
// The window starts at index except in one case: index is the marker page
// of the recorded window and that page is missing (it was dropped from the
// cache). The kernel then moves the window forward past the recorded one
// and reads the missing page on its own; likewise the driver reads the
// pages of the read before w.Start without readahead.
func (s *State) Sync(index, req, maxPages int64, c Cache) Window {
	req = atLeastOne(req)
	if maxPages <= 0 {
		return Window{Start: index, Size: req}
	}
	switch {
	case index == 0:
		return s.initial(index, req, maxPages)
	case s.expected(index):
		return s.forward(index, req, maxPages)
	case req > maxPages:
		return s.initial(index, req, maxPages)
	case s.sequential(index):
		return s.initial(index, req, maxPages)
	case s.context(index, req, maxPages, c):
		return s.readit(index, req, maxPages)
	}
	return Window{Start: index, Size: req}
}

// Async is called when a read touches a cached page that carries the
// readahead marker; the driver clears the marker first. index is the marked
// page, req the number of pages the read still wants from index on,
// maxPages as for Sync. It follows the kernel's ondemand_readahead for a
// marked page:
//
//   - index 0: initial window, as in Sync;
//   - index is where the recorded window expects the stream: the window
//     moves forward and ramps up, as in Sync;
//   - otherwise the marker belongs to a stream whose state was overwritten
//     (interleaved readers of one open file): the cache tells where that
//     stream's readahead ends (first missing page after index, looked for
//     up to maxPages pages); the window starts there, its size ramps up
//     from the old asynchronous size (that page minus index) plus req, and
//     it is all asynchronous.
//
// The window is recorded in the state, and merged with the next one when
// the read is at its start, as in Sync. ok is false when there is nothing
// to read: readahead is off (maxPages <= 0) or the maxPages pages after
// index are all cached; the state is then unchanged.
func (s *State) Async(index, req, maxPages int64, c Cache) (w Window, ok bool) {
	req = atLeastOne(req)
	if maxPages <= 0 {
		return Window{}, false
	}
	switch {
	case index == 0:
		return s.initial(index, req, maxPages), true
	case s.expected(index):
		return s.forward(index, req, maxPages), true
	}
	start := nextMiss(c, index+1, maxPages)
	if start-index > maxPages {
		return Window{}, false
	}
	s.Start = start
	s.Size = NextSize(start-index+req, maxPages)
	s.AsyncSize = s.Size
	return s.readit(index, req, maxPages), true
}

// Accessed records that a read ended at byte pos (exclusive), as the kernel
// sets prev_pos after copying data out. Call it after each read, and also
// before calling Sync again in the middle of a read served in several steps
// with the position reached so far, as the kernel updates prev_pos after
// every page it copies.
func (s *State) Accessed(pos int64) { s.PrevPos = pos }

// InitSize is the size of a stream's first window for a read of req pages
// (the kernel's get_init_ra_size): req rounded up to a power of two, times 4
// up to maxPages/32, times 2 up to maxPages/4, else maxPages. With maxPages
// 32, reads of 1-2 pages get 4, 3-4 get 8, 5-8 get 16 and more get 32.
func InitSize(req, maxPages int64) int64 {
	n := roundUpPow2(atLeastOne(req))
	switch {
	case n <= maxPages/32:
		return 4 * n
	case n <= maxPages/4:
		return 2 * n
	}
	return maxPages
}

// NextSize is the size of the window after one of cur pages (the kernel's
// get_next_ra_size): times 4 below maxPages/16, times 2 up to maxPages/2,
// else maxPages.
func NextSize(cur, maxPages int64) int64 {
	switch {
	case cur < maxPages/16:
		return 4 * cur
	case cur <= maxPages/2:
		return 2 * cur
	}
	return maxPages
}

// window is the recorded window.
func (s *State) window() Window {
	return Window{Start: s.Start, Size: s.Size, AsyncSize: s.AsyncSize}
}

// expected reports whether index is where the recorded window expects its
// stream: on its marker or right after it.
func (s *State) expected(index int64) bool {
	return index == s.Start+s.Size-s.AsyncSize || index == s.Start+s.Size
}

// sequential reports whether index is the page where the previous read
// ended (PrevPos/PageSize: a read that continues the previous one, aligned
// or not) or the page after it; a read before that page is not sequential.
func (s *State) sequential(index int64) bool {
	if s.PrevPos < 0 {
		return false
	}
	d := index - s.PrevPos/PageSize
	return d == 0 || d == 1
}

// initial starts a stream at index.
func (s *State) initial(index, req, maxPages int64) Window {
	s.Start = index
	s.Size = InitSize(req, maxPages)
	if s.Size > req {
		s.AsyncSize = s.Size - req
	} else {
		s.AsyncSize = s.Size
	}
	return s.readit(index, req, maxPages)
}

// forward moves the recorded window past its end and ramps it up.
func (s *State) forward(index, req, maxPages int64) Window {
	s.Start += s.Size
	s.Size = NextSize(s.Size, maxPages)
	s.AsyncSize = s.Size
	return s.readit(index, req, maxPages)
}

// context looks for a stream's trace before index: the run of cached pages
// right before it (the kernel's try_context_readahead and
// count_history_pages). It records a window and reports true when the run is
// longer than req.
func (s *State) context(index, req, maxPages int64, c Cache) bool {
	n := int64(0)
	for i := index - 1; i >= 0 && n < maxPages && c.Has(i); i-- {
		n++
	}
	if n <= req {
		return false // too little history: maybe a random read
	}
	if n >= index {
		n *= 2 // cached from page 0 on: a long stream or a whole-file read
	}
	s.Start = index
	s.Size = min(n+req, maxPages)
	s.AsyncSize = 1
	return true
}

// readit finishes a recorded window: when the read would hit the window's
// own marker at once (the window starts at index and is all asynchronous),
// the next window is merged in, capped at maxPages with half of it
// asynchronous. It remembers the read for Clamp.
func (s *State) readit(index, req, maxPages int64) Window {
	if index == s.Start && s.Size == s.AsyncSize {
		add := NextSize(s.Size, maxPages)
		if s.Size+add <= maxPages {
			s.AsyncSize = add
			s.Size += add
		} else {
			s.Size = maxPages
			s.AsyncSize = maxPages / 2
		}
	}
	s.reqIndex, s.reqPages = index, req
	return s.window()
}

// nextMiss is the first page in [from, from+n) that c does not hold, or
// from+n when it holds them all (the kernel's page_cache_next_miss).
func nextMiss(c Cache, from, n int64) int64 {
	for i := from; i < from+n; i++ {
		if !c.Has(i) {
			return i
		}
	}
	return from + n
}

func roundUpPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}

func atLeastOne(n int64) int64 { return max(n, 1) }
