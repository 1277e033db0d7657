package readahead

// Clamp bounds the readahead of w by budget pages and returns the window to
// read. w is the window that the last Sync or Async of s returned; Clamp
// records the clamped window in s.
//
// The readahead of w is the pages of w that the read that asked for it (the
// index and req of that Sync or Async) does not need. Clamp never drops a
// page that read needs. When the readahead is at most budget pages, w comes
// back unchanged. Otherwise w is cut from its end down to the needed pages
// plus budget pages: the asynchronous part shrinks first, and the marker
// stays on its page while any of that part is left; then the synchronous
// readahead goes. With budget <= 0 only the needed pages are left: no
// readahead at all.
//
// In the initial window of a stream and in every window an Async moves
// forward, the synchronous part is exactly what the read needs, so there
// Clamp shrinks only the asynchronous part, to at most budget pages, and
// budget >= AsyncSize changes nothing. Two kinds of window also hold
// synchronous readahead, which counts against budget too: the window merged
// for a read that starts at its own marker (a sequential miss right after
// the recorded window) and a window built from cached history (AsyncSize 1).
//
// The recorded state becomes (the kernel's response to congestion: drop the
// asynchronous tail and shrink the recorded window to what is read):
//
//   - w unchanged: s unchanged; it holds w.
//   - w cut to k > 0 pages: s holds the returned window {w.Start, k, a},
//     a = max(w.AsyncSize-(w.Size-k), 0). With a > 0 the marker is on the
//     same page as before and its hit moves the window forward from
//     w.Start+k, ramping up from k. With a = 0 the stream's next miss is
//     at w.Start+k, the recorded window's end: Sync takes it as the
//     expected page, moves the window there with NextSize(k) pages and,
//     since the read starts at that window's marker, merges the next one.
//     Either way the stream stays sequential and ramps up from what it read.
//   - w cut to nothing (the read needs none of w and budget <= 0, as for
//     an Async window): the returned window is {w.Start, 0, 0} and s
//     records the pages right before w, as many as w had and not before
//     page 0, as a window the stream has used up:
//     {max(w.Start-w.Size, 0), w.Start-max(w.Start-w.Size, 0), 0}. Its Size
//     is at least 1, as w.Start > 0 here. The stream's next miss at w.Start
//     is that window's end: Sync moves the window to w.Start, ramps it up
//     from that Size (so it does not collapse to zero pages) and merges
//     the next one, as above.
//
// When w is not the window s holds (a random read's window, or an older
// one), Clamp counts the synchronous part of w as needed, cuts the same way
// and leaves s unchanged. A random read's window is all needed pages and
// never changes.
func (s *State) Clamp(w Window, budget int64) Window {
	budget = max(budget, 0)
	own := w == s.window()
	need := w.Size - w.AsyncSize
	if own {
		need = w.Demand(s.reqIndex, s.reqPages)
	}
	if w.Size-need <= budget {
		return w
	}
	k := need + budget
	c := Window{Start: w.Start, Size: k, AsyncSize: max(w.AsyncSize-(w.Size-k), 0)}
	if !own {
		return c
	}
	if k > 0 {
		s.Start, s.Size, s.AsyncSize = c.Start, c.Size, c.AsyncSize
		return c
	}
	from := max(w.Start-w.Size, 0)
	s.Start, s.Size, s.AsyncSize = from, w.Start-from, 0
	return c
}
