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
