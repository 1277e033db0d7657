package throttle

import (
	"testing"
	"time"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

// sim drives a Queue the way a shell does: Release, act on what came out,
// jump the synthetic clock to the returned wake-up. It checks on every
// step that the queue never hangs and never wakes the shell for nothing.
type sim struct {
	tb   testing.TB
	tree *Tree
	q    *Queue
	now  int64
	out  []*Request
	got  map[string]int64 // bytes released per group path
	// keep lists the groups kept backlogged: each release is replaced by
	// a copy pushed at the release time.
	keep map[*Group]bool
}

func newSim(tb testing.TB, cfg Config) *sim {
	tree := New(cfg)
	return &sim{tb: tb, tree: tree, q: NewQueue(tree), got: map[string]int64{}, keep: map[*Group]bool{}}
}

func (s *sim) limit(path string, l Limits) { s.tree.SetLimits(s.now, path, l) }

func (s *sim) push(path string, d Dir, bytes int64, c Class) *Request {
	r := &Request{Group: s.tree.Group(path), Dir: d, Bytes: bytes, IOs: 1, Class: c}
	s.q.Push(s.now, r)
	return r
}

// backlog keeps depth requests of the given size queued for path.
func (s *sim) backlog(path string, d Dir, bytes int64, depth int) {
	s.keep[s.tree.Group(path)] = true
	for range depth {
		s.push(path, d, bytes, Demand)
	}
}

// stop ends the backlog of path (its queued requests stay).
func (s *sim) stop(path string) { delete(s.keep, s.tree.Group(path)) }

// run releases and refills until the clock would pass until, and leaves
// the clock at until.
func (s *sim) run(until int64) {
	s.tb.Helper()
	woke := false
	for {
		var next int64
		s.out, next = s.q.Release(s.now, s.out[:0])
		if woke && len(s.out) == 0 {
			s.tb.Fatalf("t=%d: woken at the returned time but nothing released", s.now)
		}
		woke = false
		switch {
		case s.q.Len() == 0 && next != -1:
			s.tb.Fatalf("t=%d: empty queue, next=%d; want -1", s.now, next)
		case s.q.Len() > 0 && next <= s.now:
			s.tb.Fatalf("t=%d: %d queued, next=%d not in the future", s.now, s.q.Len(), next)
		}
		for _, r := range s.out {
			if r.Queued() {
				s.tb.Fatalf("released request still queued")
			}
			s.got[r.Group.Path()] += r.Bytes
			if s.keep[r.Group] {
				s.q.Push(s.now, &Request{Group: r.Group, Dir: r.Dir, Bytes: r.Bytes, IOs: r.IOs, Class: r.Class})
			}
		}
		if len(s.out) > 0 {
			continue
		}
		if next < 0 || next > until {
			s.now = until
			return
		}
		s.now, woke = next, true
	}
}

// within fails unless got is within tol of want.
func within(tb testing.TB, what string, got, want, tol int64) {
	tb.Helper()
	if got < want-tol || got > want+tol {
		tb.Errorf("%s = %d, want %d ± %d (off by %d)", what, got, want, tol, got-want)
	}
}
