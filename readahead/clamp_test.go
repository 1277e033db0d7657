package readahead

import "testing"

// seq returns a State and cache after a 4 KiB reader read page 0: the
// recorded window is {0, 4, 3}, marker on page 1.
func seq() (*State, *pageCache) {
	c := newPageCache()
	st := &State{}
	w := st.Sync(0, 1, 32, c)
	c.fill(w)
	st.Accessed(PageSize)
	return st, c
}

func wantState(t *testing.T, st *State, want Window) {
	t.Helper()
	if got := st.window(); got != want {
		t.Errorf("state %v, want %v", got, want)
	}
}

// TestClampBudgetAboveAsync: a budget of at least the asynchronous part
// changes neither the window nor the state.
func TestClampBudgetAboveAsync(t *testing.T) {
	for _, b := range []int64{3, 4, 1000} {
		st, _ := seq()
		if w := st.Clamp(Window{0, 4, 3}, b); w != (Window{0, 4, 3}) {
			t.Errorf("budget %d: %v, want {0 4 3}", b, w)
		}
		wantState(t, st, Window{0, 4, 3})
	}
}

// TestClampBudgetBelowAsync: a smaller budget shrinks the asynchronous
// part; the demanded page stays, the marker stays on page 1, and the
// recorded window is the shrunk one.
func TestClampBudgetBelowAsync(t *testing.T) {
	st := &State{}
	w := st.Clamp(st.Sync(0, 1, 32, newPageCache()), 1)
	if w != (Window{0, 2, 1}) || w.Marker() != 1 {
		t.Errorf("got %v marker %d, want {0 2 1} marker 1", w, w.Marker())
	}
	wantState(t, st, Window{0, 2, 1})

	// A 64 KiB read: {0, 32, 16}; budget 5 keeps the 16 demanded pages.
	st = &State{}
	w = st.Clamp(st.Sync(0, 16, 32, newPageCache()), 5)
	if w != (Window{0, 21, 5}) || w.Marker() != 16 {
		t.Errorf("got %v marker %d, want {0 21 5} marker 16", w, w.Marker())
	}
	wantState(t, st, Window{0, 21, 5})
}

// TestClampZeroNextMissSequential: budget 0 leaves only the demanded page
// and records {0, 1, 0}; the next miss, at that window's end, is the
// expected page: the window moves forward and ramps (NextSize(1)=4, and
// the read is at its start, so 4+NextSize(4)=12 with 8 asynchronous),
// rather than a random read of one page.
func TestClampZeroNextMissSequential(t *testing.T) {
	st := &State{}
	c := newPageCache()
	w := st.Clamp(st.Sync(0, 1, 32, c), 0)
	if w != (Window{0, 1, 0}) {
		t.Fatalf("got %v, want {0 1 0}", w)
	}
	wantState(t, st, Window{0, 1, 0})
	c.fill(w)
	st.Accessed(PageSize)
	if w := st.Sync(1, 1, 32, c); w != (Window{1, 12, 8}) {
		t.Errorf("next miss: %v, want {1 12 8}", w)
	}
	// A negative budget is budget 0.
	st = &State{}
	if w := st.Clamp(st.Sync(0, 1, 32, c), -7); w != (Window{0, 1, 0}) {
		t.Errorf("budget -7: %v, want {0 1 0}", w)
	}
}

// TestClampAsyncToNothing: a window that is all readahead (an Async) cut
// with budget 0 reads nothing; the state records the used-up pages right
// before it with its size, so the miss at its start is the expected page
// and ramps from there instead of collapsing to a zero-page window.
func TestClampAsyncToNothing(t *testing.T) {
	st, c := seq()
	w, ok := st.Async(1, 1, 32, c)
	if !ok || w != (Window{4, 8, 8}) {
		t.Fatalf("Async = %v %v, want {4 8 8}", w, ok)
	}
	if w := st.Clamp(w, 0); w != (Window{4, 0, 0}) || w.Marker() != -1 {
		t.Errorf("got %v, want {4 0 0}", w)
	}
	// 8 pages before page 4 would start before page 0: {0, 4, 0}.
	wantState(t, st, Window{0, 4, 0})
	// Miss at 4 = 0+4: forward to 4, NextSize(4)=8, merged with
	// NextSize(8)=16: {4, 24, 16}.
	if w := st.Sync(4, 1, 32, c); w != (Window{4, 24, 16}) {
		t.Errorf("miss at 4: %v, want {4 24 16}", w)
	}

	// At full size: state {124,32,32} after the stream's marker at 92 ...
	st = &State{Start: 92, Size: 32, AsyncSize: 32}
	w, _ = st.Async(92, 1, 32, c)
	if w != (Window{124, 32, 32}) {
		t.Fatalf("Async = %v, want {124 32 32}", w)
	}
	st.Clamp(w, 0)
	wantState(t, st, Window{92, 32, 0})
	// ... the miss at 124 moves forward with NextSize(32)=32, merged and
	// capped: {124, 32, 16}.
	if w := st.Sync(124, 1, 32, c); w != (Window{124, 32, 16}) {
		t.Errorf("miss at 124: %v, want {124 32 16}", w)
	}
}

// TestClampKeepsDemandedPages: the asynchronous pages that the current
// read itself needs are never dropped. A 1 MiB read hits the marker at 16
// of {0, 32, 16} wanting 240 more pages; the next window {32, 32, 32} is
// all needed, so even budget 0 keeps it.
func TestClampKeepsDemandedPages(t *testing.T) {
	st := &State{}
	c := newPageCache()
	c.fill(st.Sync(0, 256, 32, c))
	w, _ := st.Async(16, 240, 32, c)
	if got := st.Clamp(w, 0); got != (Window{32, 32, 32}) {
		t.Errorf("got %v, want {32 32 32}", got)
	}
	// Later in the same read the stream is one window ahead: marker 208
	// of {208, 32, 32}, the read wanting pages up to 256, gets {240, 32,
	// 32}, of which the read needs 16; budget 0 keeps those, all still
	// asynchronous with the marker on 240.
	st = &State{Start: 208, Size: 32, AsyncSize: 32}
	w, _ = st.Async(208, 48, 32, c)
	if got := st.Clamp(w, 0); got != (Window{240, 16, 16}) {
		t.Errorf("got %v, want {240 16 16}", got)
	}
	wantState(t, st, Window{240, 16, 16})
	// Its marker hit moves the window to 256, which the read (ending at
	// 256) does not need: cut to nothing, the 32 pages before 256 recorded.
	w, _ = st.Async(240, 16, 32, c)
	if got := st.Clamp(w, 0); got != (Window{256, 0, 0}) {
		t.Errorf("got %v, want {256 0 0}", got)
	}
	wantState(t, st, Window{224, 32, 0})
}

// TestClampSyncReadahead: windows whose synchronous part holds readahead
// (merged at a sequential miss, or built from cached history) have it
// counted against the budget, trimmed after the asynchronous part.
func TestClampSyncReadahead(t *testing.T) {
	// State {0,1,0}: the miss at 1 gets {1, 12, 8}; page 1 is needed, 11
	// pages are readahead.
	for _, c := range []struct {
		budget int64
		want   Window
	}{
		{11, Window{1, 12, 8}},
		{8, Window{1, 9, 5}}, // marker stays on page 5
		{3, Window{1, 4, 0}},
		{0, Window{1, 1, 0}},
	} {
		st := &State{Start: 0, Size: 1, PrevPos: PageSize}
		w := st.Clamp(st.Sync(1, 1, 32, newPageCache()), c.budget)
		if w != c.want {
			t.Errorf("budget %d: %v, want %v", c.budget, w, c.want)
		}
		wantState(t, st, c.want)
	}
	// Context: pages 90..99 cached, a miss at 100 from elsewhere gets
	// {100, 11, 1}; budget 0 reads only page 100.
	pc := newPageCache()
	pc.fill(Window{90, 10, 0})
	st := &State{PrevPos: 5000 * PageSize}
	if w := st.Clamp(st.Sync(100, 1, 32, pc), 0); w != (Window{100, 1, 0}) {
		t.Errorf("context, budget 0: %v, want {100 1 0}", w)
	}
}

// TestClampForeignWindow: a window that is not the recorded one (here a
// random read's) is clamped on its own terms and the state is left alone.
func TestClampForeignWindow(t *testing.T) {
	st, c := seq()
	before := *st
	w := st.Sync(5000, 2, 32, c)
	if got := st.Clamp(w, 0); got != (Window{5000, 2, 0}) {
		t.Errorf("random window: %v", got)
	}
	if got := st.Clamp(Window{9000, 8, 6}, 1); got != (Window{9000, 3, 1}) {
		t.Errorf("other window: %v, want {9000 3 1}", got)
	}
	if *st != before {
		t.Errorf("state changed: %+v, was %+v", *st, before)
	}
}

// TestClampAlternatingBudget: a 4 KiB sequential reader whose budget
// alternates 0, 16, 0, 16, ... per window. The windows, worked by hand:
//
//	S0   {0,4,3}   budget 0  -> {0,1,0}     state {0,1,0}
//	S1   {1,12,8}  budget 16 -> unchanged   forward from the end: NextSize(1)=4, merged +8
//	A5   {13,24,24} budget 0 -> {13,0,0}    state {0,13,0}
//	S13  {13,32,16} budget 16 -> {13,17,1}  forward: NextSize(13)=26, merged, capped
//	A29  {30,32,32} budget 0 -> {30,0,0}    state {0,30,0}
//	S30  {30,32,16} budget 16 -> {30,17,1}
//	A46  {47,32,32} budget 0 -> {47,0,0}    state {15,32,0}
//	S47  {47,32,16} budget 16 -> {47,17,1}
//
// and so on with a period of 17 pages: the demanded page and 16 pages of
// readahead per cycle, never a random read, never single pages only.
func TestClampAlternatingBudget(t *testing.T) {
	r := newReader(&State{}, newPageCache(), 32)
	n := 0
	r.budget = func() int64 {
		n++
		if n%2 == 1 {
			return 0
		}
		return 16
	}
	r.readPages(0, 98)
	mustEvents(t, r.events, []event{
		evS(0, 1, 0, 1, 0),
		evS(1, 1, 1, 12, 8),
		evA(5, 1, 13, 0, 0),
		evS(13, 1, 13, 17, 1),
		evA(29, 1, 30, 0, 0),
		evS(30, 1, 30, 17, 1),
		evA(46, 1, 47, 0, 0),
		evS(47, 1, 47, 17, 1),
		evA(63, 1, 64, 0, 0),
		evS(64, 1, 64, 17, 1),
		evA(80, 1, 81, 0, 0),
		evS(81, 1, 81, 17, 1),
		evA(97, 1, 98, 0, 0),
	}, true)
	wantState(t, r.st, Window{66, 32, 0})
}

// TestClampZeroThenRestored: with budget 0 every read is a sequential miss
// that reads only its page; when budget returns, the stream is still
// sequential and ramps to the maximum.
func TestClampZeroThenRestored(t *testing.T) {
	r := newReader(&State{}, newPageCache(), 32)
	budget := int64(0)
	r.budget = func() int64 { return budget }
	r.readPages(0, 10)
	budget = 1 << 20
	r.readPages(10, 40)
	var want []event
	for i := int64(0); i < 10; i++ {
		want = append(want, evS(i, 1, i, 1, 0))
	}
	want = append(want,
		evS(10, 1, 10, 12, 8),  // forward from {9,1,0}: 4, merged +8
		evA(14, 1, 22, 24, 24), // marker 14 = 10+12-8: NextSize(12)=24
		evA(22, 1, 46, 32, 32), // NextSize(24)=32
		evA(46, 1, 78, 32, 32),
	)
	mustEvents(t, r.events, want, true)
}
