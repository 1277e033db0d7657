package readahead

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// mustEvents fails t unless got starts with want (all of got when full).
func mustEvents(t *testing.T, got, want []event, full bool) {
	t.Helper()
	if full && len(got) != len(want) || len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("windows:\n got %s\nwant %s", fmtEvents(got), fmtEvents(want))
	}
}

// TestSizes checks InitSize and NextSize against get_init_ra_size and
// get_next_ra_size worked out by hand.
func TestSizes(t *testing.T) {
	for _, c := range []struct{ req, max, want int64 }{
		// max 32: 1-2 pages -> 4, 3-4 -> 8, 5-8 -> 16, more -> 32.
		{1, 32, 4}, {2, 32, 4}, {3, 32, 8}, {4, 32, 8}, {5, 32, 16}, {8, 32, 16},
		{9, 32, 32}, {16, 32, 32}, {100, 32, 32}, {0, 32, 4},
		// max 256: x4 up to 8, x2 up to 64.
		{1, 256, 4}, {8, 256, 32}, {9, 256, 32}, {16, 256, 32}, {64, 256, 128},
		{65, 256, 256}, {256, 256, 256},
	} {
		if got := InitSize(c.req, c.max); got != c.want {
			t.Errorf("InitSize(%d, %d) = %d, want %d", c.req, c.max, got, c.want)
		}
	}
	for _, c := range []struct{ cur, max, want int64 }{
		// max 32: x4 below 2, x2 up to 16, else 32.
		{0, 32, 0}, {1, 32, 4}, {2, 32, 4}, {4, 32, 8}, {8, 32, 16}, {9, 32, 18},
		{16, 32, 32}, {17, 32, 32}, {32, 32, 32},
		// max 256: x4 below 16, x2 up to 128.
		{15, 256, 60}, {16, 256, 32}, {128, 256, 256}, {129, 256, 256},
	} {
		if got := NextSize(c.cur, c.max); got != c.want {
			t.Errorf("NextSize(%d, %d) = %d, want %d", c.cur, c.max, got, c.want)
		}
	}
}

// TestRamp4K: 4 KiB sequential reads from offset 0 with a 128 KiB maximum
// get windows of 4, 8, 16 and 32 pages (16 to 128 KiB), then 32 pages on,
// each marker on the first page of the newest window's asynchronous part,
// and only the first page misses.
func TestRamp4K(t *testing.T) {
	c := newPageCache()
	r := newReader(&State{}, c, 32)
	r.readPages(0, 200)
	mustEvents(t, r.events, []event{
		evS(0, 1, 0, 4, 3),    // InitSize(1)=4, 3 pages past the read; marker 1
		evA(1, 1, 4, 8, 8),    // marker 1 = 0+4-3: forward to 4, NextSize(4)=8
		evA(4, 1, 12, 16, 16), // marker 4 = 4+8-8
		evA(12, 1, 28, 32, 32),
		evA(28, 1, 60, 32, 32), // NextSize(32)=32 from here on
		evA(60, 1, 92, 32, 32),
		evA(92, 1, 124, 32, 32),
		evA(124, 1, 156, 32, 32),
		evA(156, 1, 188, 32, 32),
		evA(188, 1, 220, 32, 32),
	}, true)
	if c.fetched != 252 {
		t.Errorf("fetched %d pages, want 252 (pages 0..251)", c.fetched)
	}
	if got, want := r.st.window(), (Window{220, 32, 32}); got != want {
		t.Errorf("state %v, want %v", got, want)
	}
}

// TestLargeReads: reads of 64 KiB and 1 MiB.
func TestLargeReads(t *testing.T) {
	t.Run("64KiB/max32", func(t *testing.T) {
		r := newReader(&State{}, newPageCache(), 32)
		for i := int64(0); i < 8; i++ {
			r.read(i*16*PageSize, 16*PageSize)
		}
		mustEvents(t, r.events, []event{
			evS(0, 16, 0, 32, 16), // InitSize(16)=32, 16 pages past the read; marker 16
			evA(16, 16, 32, 32, 32),
			evA(32, 16, 64, 32, 32),
			evA(64, 16, 96, 32, 32),
			evA(96, 16, 128, 32, 32),
		}, true)
	})
	t.Run("1MiB/max32", func(t *testing.T) {
		// The first read is larger than the maximum: the initial window is
		// 32 pages, all asynchronous, and the read starts at its marker, so
		// the merge caps it at 32 with 16 asynchronous. Each marker then
		// moves a 32-page window forward while the read is still going.
		r := newReader(&State{}, newPageCache(), 32)
		r.read(0, 1<<20)
		r.read(1<<20, 1<<20)
		want := []event{evS(0, 256, 0, 32, 16), evA(16, 240, 32, 32, 32)}
		for m := int64(32); m < 512; m += 32 {
			// Marker m is hit by the read that covers it, with the pages
			// up to that read's end (256 or 512) still wanted.
			readEnd := (m/256 + 1) * 256
			want = append(want, evA(m, readEnd-m, m+32, 32, 32))
		}
		mustEvents(t, r.events, want, true)
	})
	t.Run("1MiB/max256", func(t *testing.T) {
		r := newReader(&State{}, newPageCache(), 256)
		for i := int64(0); i < 3; i++ {
			r.read(i<<20, 1<<20)
		}
		mustEvents(t, r.events, []event{
			// InitSize(256, 256)=256, none past the read, so all
			// asynchronous; merged: 256+256 > 256 -> {0, 256, 128}.
			evS(0, 256, 0, 256, 128),
			evA(128, 128, 256, 256, 256), // marker 128 = 0+256-128
			evA(256, 256, 512, 256, 256),
			evA(512, 256, 768, 256, 256),
		}, true)
	})
	t.Run("1MiB/max256/mid-file", func(t *testing.T) {
		// A fresh open reading from page 1000: nothing says sequential,
		// nothing is cached before it, the read is not over the maximum:
		// a random read of exactly 256 pages. The next read starts where
		// that one ended: an initial window, merged as above.
		r := newReader(&State{}, newPageCache(), 256)
		for i := int64(0); i < 3; i++ {
			r.read((1000+256*i)*PageSize, 1<<20)
		}
		mustEvents(t, r.events, []event{
			evS(1000, 256, 1000, 256, 0),
			evS(1256, 256, 1256, 256, 128),
			evA(1384, 128, 1512, 256, 256),
			evA(1512, 256, 1768, 256, 256),
		}, true)
	})
	t.Run("1MiB/max32/mid-file", func(t *testing.T) {
		// Over the maximum: an initial window even with no history.
		r := newReader(&State{}, newPageCache(), 32)
		r.read(1000*PageSize, 1<<20)
		mustEvents(t, r.events, []event{
			evS(1000, 256, 1000, 32, 16),
			evA(1016, 240, 1032, 32, 32),
			evA(1032, 224, 1064, 32, 32),
		}, false)
		if len(r.events) != 9 {
			t.Errorf("%d windows for 256 pages, want 9: %s", len(r.events), fmtEvents(r.events))
		}
	})
}

// TestRandomReadExact: a miss in the middle of the file, away from the
// stream and with nothing cached before it, reads exactly the request and
// leaves the state as it was.
func TestRandomReadExact(t *testing.T) {
	c := newPageCache()
	r := newReader(&State{}, c, 32)
	r.readPages(0, 50)
	before := *r.st
	if w := r.st.Sync(10000, 3, 32, c); w != (Window{10000, 3, 0}) {
		t.Errorf("Sync(10000, 3) = %v, want {10000 3 0}", w)
	}
	if *r.st != before {
		t.Errorf("state changed: %+v, was %+v", *r.st, before)
	}
}

// TestRandomReadsNoReadahead: a seeded sequence of random reads of 1 to 8
// pages, each in its own 64-page slot so that no read starts where one
// ended or right after cached pages, reads exactly what it asks for.
func TestRandomReadsNoReadahead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := newPageCache()
	r := newReader(&State{}, c, 32)
	for _, slot := range rng.Perm(10000)[:500] {
		idx := int64(slot+1) * 64
		n := 1 + rng.Int64N(8)
		r.read(idx*PageSize+rng.Int64N(PageSize), (n-1)*PageSize+1)
	}
	for _, e := range r.events {
		if e.kind != 'S' || e.w != (Window{e.index, e.req, 0}) {
			t.Fatalf("random read got readahead: %v", e)
		}
	}
	if c.fetched != r.pages {
		t.Errorf("fetched %d pages for %d asked", c.fetched, r.pages)
	}
	if *r.st != (State{PrevPos: r.st.PrevPos}) {
		t.Errorf("random reads changed the window: %+v", *r.st)
	}
}

// TestRandomInterruptsStream: one random read through the same open in
// the middle of a 4 KiB stream does not disturb it: the stream goes on
// with the same 32-page windows as without the interruption.
func TestRandomInterruptsStream(t *testing.T) {
	plain := newReader(&State{}, newPageCache(), 32)
	plain.readPages(0, 200)

	r := newReader(&State{}, newPageCache(), 32)
	r.readPages(0, 100)
	n := len(r.events)
	r.read(10000*PageSize, PageSize)
	r.readPages(100, 100)
	mustEvents(t, r.events[n:], []event{evS(10000, 1, 10000, 1, 0)}, false)
	got := slices.Delete(slices.Clone(r.events), n, n+1)
	mustEvents(t, got, plain.events, true)
}

// interleave runs readers round-robin, one 4 KiB read each per round; reader
// k reads pages base[k], base[k]+1, ...
func interleave(rs []*reader, base []int64, rounds int64) {
	for i := int64(0); i < rounds; i++ {
		for k, r := range rs {
			r.read((base[k]+i)*PageSize, PageSize)
		}
	}
}

// checkStreams checks that each of the interleaved streams got few windows
// that ramp up to max, and that the pages read from the device are the
// pages asked for plus a bounded readahead.
func checkStreams(t *testing.T, rs []*reader, c *pageCache, rounds, maxPages int64) {
	t.Helper()
	var asked int64
	for k, r := range rs {
		asked += r.pages
		full := 0
		for _, e := range r.events {
			if e.w.Size == maxPages {
				full++
			}
		}
		// 1 window per maxPages pages once ramped, plus the ramp.
		if limit := int(rounds/maxPages) + 8; len(r.events) > limit {
			t.Errorf("reader %d: %d windows for %d pages, want at most %d", k, len(r.events), rounds, limit)
		}
		if full < int(rounds/maxPages)-2 {
			t.Errorf("reader %d: only %d full windows: %s", k, full, fmtEvents(r.events))
		}
	}
	// Each stream is at most two windows ahead of its reader.
	if extra := c.fetched - asked; extra < 0 || extra > int64(len(rs))*2*maxPages {
		t.Errorf("fetched %d pages for %d asked", c.fetched, asked)
	}
}

// TestInterleavedSharedState: four readers of one open file (one State)
// at 0, 100, 200 and 300 MiB, round-robin, each reading 4 KiB
// sequentially. They overwrite each other's state, yet every stream gets
// ramping windows up to the maximum: marker hits without a matching state
// find the stream's readahead end in the cache, and misses find the
// stream's cached history.
func TestInterleavedSharedState(t *testing.T) {
	const rounds = 3000
	c := newPageCache()
	st := &State{}
	var rs []*reader
	var base []int64
	for k := int64(0); k < 4; k++ {
		rs = append(rs, newReader(st, c, 32))
		base = append(base, k*100<<20/PageSize)
	}
	interleave(rs, base, rounds)
	// Worked by hand from the rules (round by round, the state is the
	// last reader's):
	mustEvents(t, rs[0].events, []event{
		evS(0, 1, 0, 4, 3),
		evA(1, 1, 4, 8, 8),
		// The state is reader 3's {76802,3,1}. Pages 5..11 are cached,
		// 12 is not: old async size 8, +1 requested, NextSize(9)=18.
		evA(4, 1, 12, 18, 18),
		// Pages 13..29 cached: 18+1 -> NextSize(19)=32.
		evA(12, 1, 30, 32, 32),
		evA(30, 1, 62, 32, 32), // 32+1 -> 32
	}, false)
	mustEvents(t, rs[1].events, []event{
		// Nothing before it is cached: random.
		evS(25600, 1, 25600, 1, 0),
		// One cached page before it, not more than the request: random.
		evS(25601, 1, 25601, 1, 0),
		// Two cached pages: context readahead of 2+1 pages.
		evS(25602, 1, 25602, 3, 1),
		// Marker 25604, state reader 0's {12,18,18}: first miss 25605,
		// NextSize(1+1)=4.
		evA(25604, 1, 25605, 4, 4),
		evA(25605, 1, 25609, 10, 10), // NextSize(4+1)
		evA(25609, 1, 25619, 22, 22), // NextSize(10+1)
		evA(25619, 1, 25641, 32, 32), // NextSize(22+1)
	}, false)
	checkStreams(t, rs, c, rounds, 32)
}

// TestInterleavedOwnStates: the same four streams, each through its own
// open (own State) on one shared cache. Reader 0 ramps from page 0; the
// others start with one random read (a fresh open in the middle of the
// file) and ramp from their second read, which is sequential.
func TestInterleavedOwnStates(t *testing.T) {
	const rounds = 3000
	c := newPageCache()
	var rs []*reader
	var base []int64
	for k := int64(0); k < 4; k++ {
		rs = append(rs, newReader(&State{}, c, 32))
		base = append(base, k*100<<20/PageSize)
	}
	interleave(rs, base, rounds)
	mustEvents(t, rs[0].events, []event{
		evS(0, 1, 0, 4, 3), evA(1, 1, 4, 8, 8), evA(4, 1, 12, 16, 16), evA(12, 1, 28, 32, 32),
	}, false)
	b := base[2]
	mustEvents(t, rs[2].events, []event{
		evS(b, 1, b, 1, 0),
		evS(b+1, 1, b+1, 4, 3),
		evA(b+2, 1, b+5, 8, 8),
		evA(b+5, 1, b+13, 16, 16),
		evA(b+13, 1, b+29, 32, 32),
	}, false)
	checkStreams(t, rs, c, rounds, 32)
}

// TestOversize: a read larger than the maximum gets an initial window of
// the maximum, half of it asynchronous (the read starts at its marker, so
// the merge caps it), wherever it is.
func TestOversize(t *testing.T) {
	st := &State{PrevPos: -1}
	if w := st.Sync(500, 100, 32, newPageCache()); w != (Window{500, 32, 16}) {
		t.Errorf("Sync(500, 100, 32) = %v, want {500 32 16}", w)
	}
}

// TestIndexZero: page 0 always starts a stream, whatever the request.
func TestIndexZero(t *testing.T) {
	for _, c := range []struct {
		req, max int64
		want     Window
	}{
		{1, 32, Window{0, 4, 3}},
		{1000, 32, Window{0, 32, 16}}, // all async, merged and capped
		{16, 256, Window{0, 32, 16}},  // InitSize(16, 256)=32
		{0, 32, Window{0, 4, 3}},      // req < 1 counts as 1
	} {
		st := &State{Start: 7000, Size: 32, AsyncSize: 32, PrevPos: 1 << 30}
		if w := st.Sync(0, c.req, c.max, newPageCache()); w != c.want {
			t.Errorf("Sync(0, %d, %d) = %v, want %v", c.req, c.max, w, c.want)
		}
	}
}

// TestAccessedSequential: a miss counts as sequential when it is on the
// page where the previous read ended (difference 0: the previous read
// ended inside that page or at its start) or on the next page
// (difference 1); otherwise it is random here (nothing cached).
func TestAccessedSequential(t *testing.T) {
	for _, c := range []struct {
		prevPos, index int64
		want           Window
	}{
		{10*PageSize + 100, 10, Window{10, 4, 3}}, // unaligned: 0
		{10 * PageSize, 10, Window{10, 4, 3}},     // aligned end: 0
		{10*PageSize - 1, 10, Window{10, 4, 3}},   // ended on page 9: 1
		{10*PageSize + 100, 11, Window{11, 4, 3}}, // 1
		{10*PageSize + 100, 12, Window{12, 1, 0}}, // 2: random
		{10*PageSize + 100, 9, Window{9, 1, 0}},   // backwards: random
		{-1, 1, Window{1, 1, 0}},                  // no previous read
		{0, 1, Window{1, 4, 3}},                   // zero value: ended at 0
	} {
		st := &State{}
		st.Accessed(c.prevPos)
		if w := st.Sync(c.index, 1, 32, newPageCache()); w != c.want {
			t.Errorf("PrevPos %d, Sync(%d) = %v, want %v", c.prevPos, c.index, w, c.want)
		}
	}
}

// TestUnalignedStream: 1000-byte reads from the middle of the file. The
// first read is random; the read that crosses into the next page misses
// there with the previous read ending in the page before it, and becomes
// a stream.
func TestUnalignedStream(t *testing.T) {
	r := newReader(&State{}, newPageCache(), 32)
	for pos := int64(100 * PageSize); pos < 110*PageSize; pos += 1000 {
		r.read(pos, 1000)
	}
	mustEvents(t, r.events, []event{
		evS(100, 1, 100, 1, 0),
		evS(101, 1, 101, 4, 3),
		evA(102, 1, 105, 8, 8),
		evA(105, 1, 113, 16, 16),
	}, true)
}

// TestReadaheadOff: max <= 0 reads exactly what was asked, never
// asynchronously, and leaves the state alone.
func TestReadaheadOff(t *testing.T) {
	st, c := seq()
	before := *st
	if w := st.Sync(0, 5, 0, c); w != (Window{0, 5, 0}) {
		t.Errorf("Sync = %v, want {0 5 0}", w)
	}
	if w, ok := st.Async(1, 1, 0, c); ok {
		t.Errorf("Async = %v, want nothing", w)
	}
	if *st != before {
		t.Errorf("state changed: %+v, was %+v", *st, before)
	}
}

// TestContextReadahead: a miss away from the previous read with cached
// pages right before it is taken as a stream: history plus request, twice
// the history when it reaches page 0, at most the maximum, AsyncSize 1.
func TestContextReadahead(t *testing.T) {
	for _, c := range []struct {
		cached     Window
		index, req int64
		want       Window
	}{
		{Window{5, 5, 0}, 10, 1, Window{10, 6, 1}},      // 5 pages: 5+1
		{Window{0, 10, 0}, 10, 1, Window{10, 21, 1}},    // from page 0: 2*10+1
		{Window{0, 100, 0}, 100, 1, Window{100, 32, 1}}, // counted up to 32, capped
		{Window{8, 2, 0}, 10, 2, Window{10, 2, 0}},      // 2 pages, not more than req: random
	} {
		pc := newPageCache()
		pc.fill(c.cached)
		st := &State{PrevPos: -1}
		if w := st.Sync(c.index, c.req, 32, pc); w != c.want {
			t.Errorf("cached %v, Sync(%d, %d) = %v, want %v", c.cached, c.index, c.req, w, c.want)
		}
	}
}

// TestAsyncInterleavedMarker: a marker hit that the state does not expect
// looks for the first missing page after it; none within max pages means
// nothing to read.
func TestAsyncInterleavedMarker(t *testing.T) {
	pc := newPageCache()
	pc.fill(Window{0, 101, 0})
	st := &State{}
	if w, ok := st.Async(50, 1, 32, pc); ok {
		t.Errorf("Async(50) = %v, want nothing (51..82 cached)", w)
	}
	if *st != (State{}) {
		t.Errorf("state changed: %+v", *st)
	}
	// Pages up to 100 cached: at 80, first miss 101; 21+1 -> NextSize(22)=32.
	if w, ok := st.Async(80, 1, 32, pc); !ok || w != (Window{101, 32, 32}) {
		t.Errorf("Async(80) = %v %v, want {101 32 32}", w, ok)
	}
}

// TestSyncMissingMarker: the recorded window's marker page is missing
// (dropped from the cache). As in the kernel the miss counts as the
// expected page and the window moves forward past the recorded one, so it
// does not cover the page; the reader reads that page on its own.
func TestSyncMissingMarker(t *testing.T) {
	st, c := seq()
	delete(c.pages, 1)
	w := st.Sync(1, 1, 32, c)
	if w != (Window{4, 8, 8}) {
		t.Fatalf("Sync(1) = %v, want {4 8 8}", w)
	}
	if d := w.Demand(1, 1); d != 0 {
		t.Errorf("Demand(1, 1) = %d, want 0", d)
	}
}

// TestWindow checks End, Marker and Demand.
func TestWindow(t *testing.T) {
	w := Window{10, 8, 3}
	if w.End() != 18 || w.Marker() != 15 {
		t.Errorf("End %d Marker %d, want 18 15", w.End(), w.Marker())
	}
	if m := (Window{10, 8, 0}).Marker(); m != -1 {
		t.Errorf("Marker without async part = %d, want -1", m)
	}
	for _, c := range []struct{ index, req, want int64 }{
		{10, 1, 1}, {10, 20, 8}, {8, 4, 2}, {0, 5, 0}, {17, 5, 1}, {18, 5, 0},
	} {
		if got := w.Demand(c.index, c.req); got != c.want {
			t.Errorf("Demand(%d, %d) = %d, want %d", c.index, c.req, got, c.want)
		}
	}
}
