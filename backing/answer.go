package backing

import (
	"sync"
	"syscall"
	"time"

	"sluice/mirror"
)

// Answering reads. A hedged read costs its caller a hand-off (to a
// goroutine, or to an io_uring) on every read, though few reads are ever
// hedged. When the layer above can answer the read's caller itself, by
// the request's tag (the FUSE request's unique), the read instead runs on
// the caller's goroutine like one that is never hedged, and a watchdog of
// the set, waking only at the earliest hedge deadline of the reads in
// flight, sends a read still running at its deadline to another mirror.
// If that answer comes first it goes to the caller through the Answer
// function, and the read still stuck returns later, reporting that its
// caller has been answered. The watchdog wakes at most once per
// mirror.HedgeMin while reads flow, not once a read.

// Answer sends p as the answer to the request tagged unique, before the
// read serving it has returned.
type Answer func(unique uint64, p []byte) error

// SetAnswer makes reads through ReadAtAnswering answerable early through
// a; nil turns it off.
func (m *Mirror) SetAnswer(a Answer) {
	if a == nil {
		m.answer.Store(nil)
		return
	}
	m.answer.Store(&a)
}

// ReadAtAnswering is ReadAtFor for the request tagged unique (0: none).
// answered reports that the request has been answered with n bytes
// through the mirror set's Answer (see SetAnswer), read from another
// mirror while this read was stuck; p holds nothing then.
func (f *File) ReadAtAnswering(pid int, unique uint64, p []byte, off int64) (n int, answered bool, err error) {
	if f.set == nil || unique == 0 {
		n, err = f.ReadAtFor(pid, p, off)
		return n, false, err
	}
	return f.set.read(pid, unique, p, off)
}

// watched is a read in flight on its caller's goroutine that the
// watchdog hedges at its deadline. Its fields are guarded by m.mu; rerr
// and answered are written before end is closed.
type watched struct {
	s        *fileSet
	r        mirror.Read
	unique   uint64
	answer   Answer
	deadline int64
	every    int64   // the hedge delay
	from     started // the caller's own read
	idx      int     // in m.watchdog.list; -1 when out
	few      [8]bool
	tried    []bool // the mirrors tried, for the rescue
	hedged   bool   // the watchdog has sent it to another mirror
	over     bool   // the caller's own read answered first
	claimed  bool   // the rescue is answering the caller
	end      chan struct{}
	answered bool
	n        int // bytes answered
	rerr     error
}

// watches holds watched records for reuse: one per read otherwise.
var watches sync.Pool

// watchdog is a mirror set's list of watched reads. Guarded by m.mu.
type watchdog struct {
	list    []*watched
	next    int64 // when the loop wakes next; 0: not before a kick
	running bool
	kick    chan struct{}
	quit    chan struct{}
}

// watch adds w to the watchdog, starting it or waking it earlier as
// needed. Called with m.mu held.
func (m *Mirror) watch(w *watched) {
	d := &m.watchdog
	w.idx = len(d.list)
	d.list = append(d.list, w)
	if !d.running {
		d.running = true
		d.kick = make(chan struct{}, 1)
		d.quit = make(chan struct{})
		go m.watchLoop(d.kick, d.quit)
	}
	if d.next == 0 || w.deadline < d.next {
		d.next = w.deadline
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// unwatch removes w from the watchdog, if there. Called with m.mu held.
func (m *Mirror) unwatch(w *watched) {
	if w.idx < 0 {
		return
	}
	l := m.watchdog.list
	last := l[len(l)-1]
	l[w.idx], last.idx = last, w.idx
	l[len(l)-1] = nil
	m.watchdog.list = l[:len(l)-1]
	w.idx = -1
}

// stopWatch ends the watchdog's loop (Close).
func (m *Mirror) stopWatch() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watchdog.running {
		close(m.watchdog.quit)
		m.watchdog.running = false
	}
}

func (m *Mirror) watchLoop(kick, quit chan struct{}) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		m.mu.Lock()
		now := m.now()
		next := int64(0)
		d := &m.watchdog
		for i := 0; i < len(d.list); {
			w := d.list[i]
			if w.deadline <= now {
				st, _, ok, wait := w.s.hedgeToLocked(w.r, w.tried, w.from)
				switch {
				case ok:
					m.unwatch(w)
					w.hedged = true
					w.end = make(chan struct{})
					// The rescue keeps the set's files open as a read does.
					w.s.busy++
					go w.s.rescue(w, st)
					continue
				case !wait:
					// No mirror is left to hedge on.
					m.unwatch(w)
					continue
				}
				// The read's own mirror is still the best bet: look
				// again a hedge delay later.
				w.deadline = now + w.every
			}
			if next == 0 || w.deadline < next {
				next = w.deadline
			}
			i++
		}
		d.next = next
		m.mu.Unlock()
		if next > 0 {
			t.Reset(time.Duration(next - now))
		}
		select {
		case <-t.C:
		case <-kick:
			t.Stop()
		case <-quit:
			t.Stop()
			return
		}
	}
}

// rescue serves w's read from st, then from the other mirrors not tried,
// one after another while they fail, and answers the caller unless its
// own read has.
func (s *fileSet) rescue(w *watched, st started) {
	m := s.m
	buf := getBuf(int(w.r.Len))
	defer putBuf(buf)
	w.rerr = syscall.EIO
	for ok := true; ok; st, _, ok = s.pick(w.r, w.tried) {
		n, err := s.files[st.i].ReadAt(buf.b, w.r.Off)
		s.finish(st, n, err)
		if err != nil {
			w.rerr = err
			continue
		}
		m.mu.Lock()
		over := w.over
		w.claimed = !over
		m.mu.Unlock()
		if !over {
			w.rerr = w.answer(w.unique, buf.b[:n])
			w.answered, w.n = w.rerr == nil, n
		}
		break
	}
	close(w.end)
	s.done()
}

// watched returns the watch of r sent as st. Called with m.mu held.
func (s *fileSet) watched(r mirror.Read, unique uint64, answer Answer, st started, hedge int64, tried []bool) *watched {
	w, _ := watches.Get().(*watched)
	if w == nil {
		w = new(watched)
	}
	*w = watched{s: s, r: r, unique: unique, answer: answer, deadline: st.start + hedge, every: hedge, from: st}
	w.tried = w.few[:0]
	if len(tried) > len(w.few) {
		w.tried = make([]bool, 0, len(tried))
	}
	w.tried = append(w.tried, tried...)
	return w
}

// readWatched is the read of w from the mirror st, on the caller's
// goroutine, watched (m.watch) for its hedge deadline.
func (s *fileSet) readWatched(w *watched, p []byte, st started, tried []bool) (n int, answered bool, err error) {
	m := s.m
	r := w.r
	n, err = s.files[st.i].ReadAt(p, r.Off)
	m.mu.Lock()
	m.endLocked(st, n, err)
	last := s.idle()
	hedged, claimed := w.hedged, w.claimed
	switch {
	case !hedged:
		m.unwatch(w) // unless the watchdog found no mirror to hedge on
	case err == nil && !claimed:
		w.over = true
	}
	m.mu.Unlock()
	if last {
		s.closeFiles()
	}
	if !hedged {
		// Nothing else refers to w: it is used again.
		watches.Put(w)
		return n, false, err
	}
	if err == nil && !claimed {
		return n, false, err
	}
	// The rescue is answering, or is the caller's only hope.
	<-w.end
	copy(tried, w.tried)
	switch {
	case w.answered:
		return w.n, true, nil
	case err == nil:
		return n, false, nil
	}
	return 0, false, w.rerr
}
