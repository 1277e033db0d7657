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
	// The first windows of each stream, worked by hand, are traced in
	// testdata/interleaved.
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
