package backing

import (
	"sync"
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

// watched is a caller's read that runs on the caller's goroutine and
// that the watchdog hedges at its Wake. Its fields are guarded by m.mu;
// n, answered and err are written before delivered is set and end, if
// made, closed.
type watched struct {
	s        *fileSet
	fl       mirror.Flight
	unique   uint64
	answer   Answer
	deadline int64 // the flight's Wake
	idx      int   // in m.watchdog.list; -1 when out
	// hedged says the watchdog sent a read of it to another mirror: a
	// rescue goroutine refers to it.
	hedged bool
	// Once a rescue decides the answer: the caller's answer, delivered
	// (through answer, unless err), and end, made by a caller waiting
	// for it, closed.
	delivered bool
	end       chan struct{}
	answered  bool
	n         int
	err       error
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

// rewatch puts w on the watchdog at the flight's wake after step st, or
// takes it off when it has none. Called with m.mu held.
func (m *Mirror) rewatch(w *watched, st mirror.Step) {
	if st.Wake == 0 {
		m.unwatch(w)
		return
	}
	w.deadline = st.Wake
	if w.idx < 0 {
		m.watch(w)
		return
	}
	m.wake(w.deadline)
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
	m.wake(w.deadline)
}

// wake makes the watchdog wake by t. Called with m.mu held.
func (m *Mirror) wake(t int64) {
	d := &m.watchdog
	if d.next == 0 || t < d.next {
		d.next = t
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
				st := m.set.Timer(now, &w.fl)
				w.s.sent(st)
				if st.Sending {
					w.hedged = true
					go w.s.rescue(w, st.Send)
				}
				if st.Wake == 0 {
					m.unwatch(w)
					continue
				}
				w.deadline = st.Wake
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

// deliver records the caller's answer decided by a rescue and wakes the
// caller if it waits. Called with m.mu held.
func (w *watched) deliver(n int, answered bool, err error) {
	w.n, w.answered, w.err, w.delivered = n, answered, err, true
	if w.end != nil {
		close(w.end)
	}
}

// rescue reads w's flight from the mirror sn, off the caller's
// goroutine, then from the mirrors the flight goes on to while they
// fail; if its read is the first answer, it answers the caller.
func (s *fileSet) rescue(w *watched, sn mirror.Send) {
	m := s.m
	r := w.fl.Read()
	buf := getBuf(int(r.Len))
	defer putBuf(buf)
	for {
		n, err := s.files[sn.Mirror].ReadAt(buf.b, r.Off)
		st := s.finished(&w.fl, w, sn, n, err)
		switch {
		case st.Done && st.Err == nil:
			aerr := w.answer(w.unique, buf.b[:n])
			m.mu.Lock()
			w.deliver(n, aerr == nil, aerr)
			m.mu.Unlock()
		case st.Done:
			m.mu.Lock()
			w.deliver(0, false, st.Err)
			m.mu.Unlock()
		case st.Sending:
			sn = st.Send
			continue
		}
		return
	}
}

// readAnswering is a read whose caller can be answered early: it runs on
// the caller's goroutine, watched by the watchdog, which sends it to
// another mirror at its hedge time (rescue). answered reports that a
// rescue answered the caller.
func (s *fileSet) readAnswering(r mirror.Read, unique uint64, answer Answer, p []byte) (n int, answered bool, err error) {
	m := s.m
	w, _ := watches.Get().(*watched)
	if w == nil {
		w = new(watched)
	}
	*w = watched{s: s, unique: unique, answer: answer, idx: -1}
	_, st := s.begin(r, w)
	hedged := false
	for st.Sending {
		sn := st.Send
		n, err = s.files[sn.Mirror].ReadAt(p, r.Off)
		st, hedged = s.finishedWatched(&w.fl, w, sn, n, err)
	}
	if st.Done {
		// Decided here: by this goroutine's read, or by its failure
		// ending the last read of the flight. Once decided, the flight
		// is off the watchdog: hedged stays as it was.
		if !hedged {
			// Nothing else refers to w: it is used again.
			watches.Put(w)
		}
		if st.Err != nil {
			return 0, false, st.Err
		}
		return n, false, nil
	}
	// A rescue decides, or has decided, the answer.
	m.mu.Lock()
	if !w.delivered {
		w.end = make(chan struct{})
		end := w.end
		m.mu.Unlock()
		<-end
		m.mu.Lock()
	}
	got, ok, rerr := w.n, w.answered, w.err
	m.mu.Unlock()
	switch {
	case ok:
		return got, true, nil
	case err == nil:
		// The rescue could not answer, but this goroutine's own read
		// succeeded after the rescue's had: serve it.
		return n, false, nil
	}
	return 0, false, rerr
}
