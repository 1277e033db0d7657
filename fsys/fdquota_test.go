package fsys

import "testing"

// TestOpenQuota: a group at its bound is refused until one of its handles
// is released; other groups are not counted against it; a handle
// released twice, or never bound, gives nothing back.
func TestOpenQuota(t *testing.T) {
	q := newOpenQuota(2)
	for fh := uint64(1); fh <= 2; fh++ {
		if !q.take("a") {
			t.Fatalf("a's open %d refused under its bound", fh)
		}
		q.bind(q.files, fh, "a")
	}
	if q.take("a") {
		t.Fatal("a's third open admitted at a bound of 2")
	}
	if !q.take("b") {
		t.Fatal("b refused while only a is at its bound")
	}
	q.bind(q.dirs, 1, "b") // directory handle 1 is not file handle 1
	q.unbind(q.files, 1)
	q.unbind(q.files, 1)
	q.unbind(q.files, 99)
	if !q.take("a") {
		t.Fatal("a refused after releasing one of its two")
	}
	if q.take("a") {
		t.Fatal("a admitted past its bound: a double release gave a place back")
	}
	if q.take("b"); q.take("b") {
		t.Fatal("b admitted past its bound")
	}
	q.give("b")
	q.unbind(q.dirs, 1)
	if q.held["b"] != 0 {
		t.Errorf("b holds %d after giving all back", q.held["b"])
	}
}
