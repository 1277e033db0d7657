package backing

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"sluice/mirror"
)

// A read of a mirror set goes to the mirror the policy picks. If the
// policy hedges (mirror.Hedger) and another mirror could serve it, a read
// still running after the policy's delay goes to the mirror the policy
// would pick now too, unless that is the one it waits on, and the first
// answer serves the caller (the other finishes in the background and is
// reported to the policy like any read). A read whose caller can be
// answered early runs on the caller's goroutine and is hedged by the
// set's watchdog (answer.go); any other hedged read runs into a buffer of
// its own, through an io_uring (readRing) or on a goroutine (readHedged).
// A read that fails is tried on the next mirror at once. A policy that
// probes (mirror.Prober) gets its background reads started here too.

// started is one read sent to a mirror.
type started struct {
	i, k  int // mirror, and its index in the policy's live list
	gen   int
	start int64
}

// pick chooses the mirror for r among those not tried and reports the
// read started; ok is false when none is left. hedge is how long the read
// may run before it is hedged (0: never).
func (s *fileSet) pick(r mirror.Read, tried []bool) (st started, hedge int64, ok bool) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.pickLocked(r, tried)
}

// pickLocked is pick with m.mu held.
func (s *fileSet) pickLocked(r mirror.Read, tried []bool) (st started, hedge int64, ok bool) {
	m := s.m
	i, k := -1, -1
	if len(m.live) > 0 {
		k = m.policy.Pick(m.now(), r)
		i = m.live[k]
	}
	if i < 0 || !s.free(i, tried) {
		// The policy's pick is out: the next healthy mirror not tried.
		if k = s.untried(tried); k < 0 {
			return st, 0, false
		}
		i = m.live[k]
	}
	return s.send(r, tried, i, k)
}

// free reports whether mirror i is open and not tried. Called with m.mu
// held.
func (s *fileSet) free(i int, tried []bool) bool { return !tried[i] && s.files[i] != nil }

// untried returns the policy index of the first healthy mirror free for
// another try, -1 for none. Called with m.mu held.
func (s *fileSet) untried(tried []bool) int {
	for k, i := range s.m.live {
		if s.free(i, tried) {
			return k
		}
	}
	return -1
}

// send reports r started on mirror i (policy index k) and returns how
// long it may run before it is hedged. Called with m.mu held.
func (s *fileSet) send(r mirror.Read, tried []bool, i, k int) (st started, hedge int64, ok bool) {
	m := s.m
	tried[i] = true
	s.busy++
	st = m.begin(i, k, r)
	if h, isH := m.policy.(mirror.Hedger); isH && s.untried(tried) >= 0 {
		hedge = h.HedgeAfter(st.start, k)
	}
	return st, hedge, true
}

// begin reports a read of r sent to mirror i (policy index k). Called
// with m.mu held.
func (m *Mirror) begin(i, k int, r mirror.Read) started {
	st := started{i: i, k: k, gen: m.gen, start: m.now()}
	m.policy.Started(st.start, k, r)
	m.stats[i].Inflight++
	return st
}

// endLocked reports a read's outcome to the counters and to the policy it
// was started with. Called with m.mu held.
func (m *Mirror) endLocked(st started, n int, err error) {
	now := m.now()
	c := &m.stats[st.i]
	c.Inflight--
	c.Reads++
	c.Bytes += int64(n)
	c.ReadTime += now - st.start
	m.decay(st.i, now, now-st.start)
	if m.gen == st.gen {
		m.policy.Done(now, st.k, st.start, err)
	}
	if err != nil {
		c.Errors++
		if c.Errors&(c.Errors-1) == 0 {
			m.log("mirror %s: read failed (%v), served by another; %d failures so far", m.dirs[st.i], err, c.Errors)
		}
	}
}

// hedgeTo starts the hedge of r, sent as from and still in flight past
// its delay, on the mirror the policy names (mirror.Hedger's HedgeTo),
// and counts it. When ok is false, wait reports that a mirror not tried
// is left, for a later try.
func (s *fileSet) hedgeTo(r mirror.Read, tried []bool, from started) (st started, hedge int64, ok, wait bool) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.hedgeToLocked(r, tried, from)
}

// hedgeToLocked is hedgeTo with m.mu held.
func (s *fileSet) hedgeToLocked(r mirror.Read, tried []bool, from started) (st started, hedge int64, ok, wait bool) {
	m := s.m
	allowed := func(k int) bool { return s.free(m.live[k], tried) }
	h, isH := m.policy.(mirror.Hedger)
	switch {
	case isH && from.gen == m.gen:
		if k, yes := h.HedgeTo(m.now(), from.k, from.start, allowed); yes {
			st, hedge, ok = s.send(r, tried, m.live[k], k)
		}
	default:
		// The policy changed meanwhile: the mirror it picks, or the next.
		st, hedge, ok = s.pickLocked(r, tried)
	}
	if ok {
		m.stats[from.i].Hedged++
		return st, hedge, true, false
	}
	return st, 0, false, s.untried(tried) >= 0
}

// probeLocked starts the background read the policy asks for, if any,
// and returns it for the caller to run (probe) once m.mu is released.
// Called with m.mu held.
func (s *fileSet) probeLocked(r mirror.Read) (st started, ok bool) {
	m := s.m
	pr, isP := m.policy.(mirror.Prober)
	if !isP {
		return st, false
	}
	k, ok := pr.Probe(m.now())
	if !ok || s.files[m.live[k]] == nil {
		return st, false
	}
	s.busy++
	return m.begin(m.live[k], k, r), true
}

// probe runs the background read st of r.
func (s *fileSet) probe(r mirror.Read, st started) {
	f := s.files[st.i]
	go func() {
		buf := getBuf(int(r.Len))
		n, err := f.ReadAt(buf.b, r.Off)
		putBuf(buf)
		s.finish(st, n, err)
	}()
}

// first picks the mirror of r's first read, and under the same lock
// starts the policy's probe and, when the read may be hedged and its
// caller answered early (answer), watches it (w).
func (s *fileSet) first(r mirror.Read, tried []bool, unique uint64, answer Answer) (st started, hedge int64, ok bool, w *watched) {
	m := s.m
	m.mu.Lock()
	st, hedge, ok = s.pickLocked(r, tried)
	var pst started
	var probe bool
	if ok {
		pst, probe = s.probeLocked(r)
		if hedge > 0 && answer != nil {
			w = s.watched(r, unique, answer, st, hedge, tried)
			m.watch(w)
		}
	}
	m.mu.Unlock()
	if probe {
		s.probe(r, pst)
	}
	return st, hedge, ok, w
}

// finish reports a read's end, and closes the files when it was the last
// read of a set closed meanwhile.
func (s *fileSet) finish(st started, n int, err error) {
	m := s.m
	m.mu.Lock()
	m.endLocked(st, n, err)
	last := s.idle()
	m.mu.Unlock()
	if last {
		s.closeFiles()
	}
}

// done ends what kept the set's files open without being a read (a
// rescue), closing them if the set was closed meanwhile.
func (s *fileSet) done() {
	s.m.mu.Lock()
	last := s.idle()
	s.m.mu.Unlock()
	if last {
		s.closeFiles()
	}
}

// idle counts one read of the set's out and reports whether the set was
// closed and that was its last. Called with m.mu held.
func (s *fileSet) idle() bool {
	s.busy--
	return s.closing && s.busy == 0
}

type answer struct {
	n   int
	err error
	buf *readBuf
}

func (s *fileSet) readAt(pid int, p []byte, off int64) (int, error) {
	n, _, err := s.read(pid, 0, p, off)
	return n, err
}

// read is a read for the request tagged unique (0: none; see
// ReadAtAnswering).
func (s *fileSet) read(pid int, unique uint64, p []byte, off int64) (int, bool, error) {
	r := mirror.Read{PID: pid, File: s.n, Off: off, Len: int64(len(p))}
	var few [8]bool
	tried := few[:]
	if len(s.files) > len(few) {
		tried = make([]bool, len(s.files))
	}
	err := error(syscall.EIO)
	var answer Answer
	if a := s.m.answer.Load(); a != nil && unique != 0 {
		answer = *a
	}
	st, hedge, ok, w := s.first(r, tried, unique, answer)
	for ok {
		var n int
		var rerr error
		switch {
		case hedge <= 0:
			n, rerr = s.files[st.i].ReadAt(p, off)
			s.finish(st, n, rerr)
		case answer != nil:
			var answered bool
			if w == nil {
				s.m.mu.Lock()
				w = s.watched(r, unique, answer, st, hedge, tried)
				s.m.watch(w)
				s.m.mu.Unlock()
			}
			if n, answered, rerr = s.readWatched(w, p, st, tried); answered {
				return n, true, nil
			}
			w = nil
		default:
			// Hedged: every read into a buffer of its own.
			if rg := getRing(); rg != nil {
				n, rerr = s.readRing(rg, r, p, st, hedge, tried)
			} else {
				n, rerr = s.readHedged(r, p, st, hedge, tried)
			}
			return n, false, rerr
		}
		if rerr == nil {
			return n, false, nil
		}
		err = rerr
		st, hedge, ok = s.pick(r, tried)
	}
	return 0, false, err
}

// readHedged is a hedged read with a goroutine per mirror read, where
// io_uring is not available.
func (s *fileSet) readHedged(r mirror.Read, p []byte, st started, hedge int64, tried []bool) (int, error) {
	off := r.Off
	err := error(syscall.EIO)
	ok := true
	answers := make(chan answer, len(s.files))
	launch := func(st started) {
		f := s.files[st.i]
		go func() {
			buf := getBuf(len(p))
			n, err := f.ReadAt(buf.b, off)
			s.finish(st, n, err)
			answers <- answer{n, err, buf}
		}()
	}
	launch(st)
	pending := 1
	timer := time.NewTimer(time.Duration(hedge))
	defer timer.Stop()
	for pending > 0 {
		select {
		case a := <-answers:
			pending--
			if a.err == nil {
				n := copy(p, a.buf.b[:a.n])
				putBuf(a.buf)
				if pending > 0 {
					go func(left int) {
						for ; left > 0; left-- {
							putBuf((<-answers).buf)
						}
					}(pending)
				}
				return n, nil
			}
			err = a.err
			putBuf(a.buf)
			if pending == 0 {
				if st, _, ok = s.pick(r, tried); ok {
					launch(st)
					pending++
				}
			}
		case <-timer.C:
			next, h, now, wait := s.hedgeTo(r, tried, st)
			switch {
			case now:
				st, hedge = next, h
				launch(st)
				pending++
				if hedge > 0 {
					timer.Reset(time.Duration(hedge))
				}
			case wait:
				timer.Reset(time.Duration(hedge))
			}
		}
	}
	return 0, err
}

// readRing is a hedged read through rg: the caller submits each mirror's
// read and waits for the first answer or the hedge delay in one system
// call, with no other goroutine involved. Reads still in flight when it
// returns finish in the background.
func (s *fileSet) readRing(rg *ring, r mirror.Read, p []byte, st started, hedge int64, tried []bool) (int, error) {
	defer putRing(rg)
	err := error(syscall.EIO)
	pending, deadline := 0, int64(0)
	ok := true
	var got *ringOp
	gotN := 0
	for {
		// Send st: an injected error without a delay fails it at once.
		if ok {
			f := s.files[st.i]
			op := &ringOp{s: s, st: st, fd: f.fd, buf: getBuf(len(p)), off: r.Off}
			var delay time.Duration
			if f.faults != nil {
				delay, op.fault = f.faults.readPlan()
			}
			if delay == 0 && op.fault != nil {
				s.finish(st, 0, op.fault)
				putBuf(op.buf)
				err = op.fault
				st, hedge, ok = s.pick(r, tried)
				if ok || pending > 0 {
					continue
				}
				return 0, err
			}
			rg.start(op, delay)
			pending++
			deadline = 0
			if hedge > 0 {
				deadline = monoNow() + hedge
			}
			ok = false
		}
		late := rg.enter(true, deadline)
		rg.reap(func(op *ringOp, n int, e error) {
			pending--
			if e == nil && got == nil {
				got, gotN = op, n
				return
			}
			if e != nil {
				err = e
			}
			putBuf(op.buf)
		})
		if got != nil {
			n := copy(p, got.buf.b[:gotN])
			putBuf(got.buf)
			return n, nil
		}
		switch {
		case pending == 0:
			// All failed: the next mirror, if any.
			if st, hedge, ok = s.pick(r, tried); !ok {
				return 0, err
			}
		case late && deadline > 0:
			// Still running after the delay: the next mirror too, if
			// the policy would send it there now, or a try later.
			next, h, now, wait := s.hedgeTo(r, tried, st)
			switch {
			case now:
				st, hedge, ok = next, h, true
			case wait:
				deadline = monoNow() + hedge
			default:
				deadline = 0
			}
		}
	}
}

// readBuf is a buffer aligned for O_DIRECT.
type readBuf struct {
	raw, b []byte
}

var readBufs sync.Pool

func getBuf(n int) *readBuf {
	if v, ok := readBufs.Get().(*readBuf); ok && cap(v.raw)-4096 >= n {
		v.b = v.b[:n]
		return v
	}
	raw := make([]byte, max(n, 64<<10)+4096)
	off := (4096 - int(uintptrOf(raw)%4096)) % 4096
	return &readBuf{raw: raw, b: raw[off : off+n : off+max(n, 64<<10)]}
}

func putBuf(b *readBuf) { readBufs.Put(b) }

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
