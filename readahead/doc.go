// Package readahead decides which pages sluice reads ahead of a file's
// readers. It follows the Linux kernel's on-demand readahead
// (mm/readahead.c, ondemand_readahead as of Linux 6.1-6.9, order-0 pages
// only) and adds a budget clamp for per-group I/O limits. The package is
// pure: it reads no clock, starts no goroutines, does no I/O and does not
// lock; the driver owns the cache, the locking and the reads.
//
// # Units and state
//
// Everything is in pages of PageSize bytes except State.PrevPos, which is in
// bytes. Each open file has a State: the last readahead window
// {Start, Size, AsyncSize} and where the previous read ended. The last
// AsyncSize pages of a window are its asynchronous part; its first page,
// Start+Size-AsyncSize, carries the readahead marker.
//
// # Driving it
//
// For each read, page by page from its first page:
//
//  1. If the page is missing, call State.Sync with the pages the read still
//     wants, clamp the window (State.Clamp) and read its missing pages,
//     setting the marker on the page at Window.Marker if that page is read
//     now. Read the pages of the read that the window does not cover on
//     their own.
//  2. If the page carries the marker, clear it, call State.Async, and if it
//     returns a window, clamp it and read its missing pages the same way.
//  3. Copy the page out. When the read is done, call State.Accessed with
//     the byte it ended at.
//
// # The algorithm
//
// A stream starts with an initial window sized from the request
// (InitSize: the request rounded up to a power of two, times 4 or 2, at
// most the maximum), with all pages past the request asynchronous. When
// the reader reaches the marker, the window moves forward past the old one
// and grows (NextSize: times 4 while small, then times 2, then the
// maximum), all of it asynchronous, so the next read from the device runs
// while the reader uses the pages already read. A 4 KiB sequential reader
// with a 128 KiB maximum gets windows of 16, 32, 64 and 128 KiB, then
// 128 KiB on.
//
// On a miss, Sync decides in the kernel's order: page 0 starts a stream; a
// miss where the recorded window expects its stream moves the window
// forward; a read larger than the maximum starts a stream; a read that
// starts where the previous one ended, or on the next page, starts a
// stream; a run of cached pages right before the miss, longer than the
// read, is taken as another stream's trace and sizes a window from it
// (context readahead); anything else is a random read, which reads exactly
// what was asked and leaves the state alone. When a read would hit the
// marker of the window it just got, the next window is merged in at once.
//
// Several readers that interleave on one open file overwrite each other's
// state. A reader that hits its marker then finds the end of its own
// readahead in the cache (the first missing page after the marker) and
// ramps up from there, and a reader that misses finds its trace by context
// readahead, so each stream keeps growing windows instead of falling back
// to single pages.
//
// # The budget clamp
//
// State.Clamp bounds the readahead in a window, the pages the current read
// does not need, by a budget in pages from the group's throttle: it cuts
// the window from its end, the asynchronous part first, and never drops a
// page the read needs; a budget of 0 or less leaves only those pages. This
// is the kernel's congestion response (drop the asynchronous tail) with the
// recorded window shrunk to what is read, so that the stream's next miss
// lands on the expected page and the window keeps ramping up when budget
// returns. A window cut to nothing is recorded as the already-used pages
// before it, so the ramp never collapses to zero pages. See State.Clamp for
// the exact recorded state.
package readahead
