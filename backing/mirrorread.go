package backing

import (
	"sync"
	"time"
	"unsafe"

	"sluice/mirror"
)

// Reads of a mirror set. Where each read goes, when it is hedged and on
// which mirror, and what a failure leads to are decided by the set's core
// (mirror.Set), under m.mu; what is here only does what it says: reads a
// mirror, wakes at the time it gives, and hands it each read's end. A
// read that is never hedged runs on its caller's goroutine. One that may
// be hedged runs there too when its caller can be answered early
// (answer.go: the set's watchdog hedges it); otherwise each of its reads
// goes into a buffer of its own, through an io_uring (readRing) or on a
// goroutine (readHedged), and the first answer serves the caller. A
// policy's probes (mirror.Prober) run on goroutines of their own.

// closed returns the mirrors whose file is not open, which no read of s
// can go to. Called with m.mu held.
func (s *fileSet) closed() uint64 {
	var c uint64
	for i, f := range s.files[:s.m.set.Mirrors()] {
		if f == nil {
			c |= 1 << i
		}
	}
	return c
}

// sent counts the reads a step starts: the set's files stay open until
// they end. Called with m.mu held.
func (s *fileSet) sent(st mirror.Step) {
	if st.Sending {
		s.busy++
	}
	if st.Probing {
		s.busy++
	}
}

// begin starts a caller's read r, watched by the watchdog (w, when not
// nil) if it may be hedged, and starts the probe the policy asks for.
func (s *fileSet) begin(r mirror.Read, w *watched) (fl mirror.Flight, st mirror.Step) {
	m := s.m
	m.mu.Lock()
	fl, st = m.set.Begin(m.now(), r, s.closed())
	s.sent(st)
	if w != nil {
		w.fl = fl
		m.rewatch(w, st)
	}
	m.mu.Unlock()
	if st.Probing {
		s.probe(r, st.Probe)
	}
	return fl, st
}

// finished hands the end of a read sent as sn, of flight fl (nil: a
// probe, or a read whose caller has gone), to the core and returns what
// to do next; w, when not nil, is fl's watch. The files are closed when
// this was the last read of a set closed meanwhile.
func (s *fileSet) finished(fl *mirror.Flight, w *watched, sn mirror.Send, n int, err error) mirror.Step {
	st, _ := s.finishedWatched(fl, w, sn, n, err)
	return st
}

// finishedWatched is finished, also reporting whether the watchdog has
// sent a read of w's flight elsewhere (watched.hedged) by then.
func (s *fileSet) finishedWatched(fl *mirror.Flight, w *watched, sn mirror.Send, n int, err error) (mirror.Step, bool) {
	m := s.m
	m.mu.Lock()
	var st mirror.Step
	if fl != nil {
		st = m.set.Finished(m.now(), fl, sn, n, err)
	} else {
		st.Report = m.set.Done(m.now(), sn, n, err)
	}
	s.sent(st)
	hedged := false
	if w != nil {
		m.rewatch(w, st)
		hedged = w.hedged
	}
	var errs int64
	var dir string
	if st.Report {
		errs, dir = m.set.Stat(sn.Mirror).Errors, m.dirs[sn.Mirror]
	}
	last := s.idle()
	m.mu.Unlock()
	if st.Report {
		m.log("mirror %s: read failed (%v), served by another; %d failures so far", dir, err, errs)
	}
	if last {
		s.closeFiles()
	}
	return st, hedged
}

// timer is the core's Timer for fl: the hedge of a read running long.
func (s *fileSet) timer(fl *mirror.Flight) mirror.Step {
	m := s.m
	m.mu.Lock()
	st := m.set.Timer(m.now(), fl)
	s.sent(st)
	m.mu.Unlock()
	return st
}

// until is how long from now the set's clock reaches t.
func (m *Mirror) until(t int64) time.Duration { return time.Duration(t - m.now()) }

// probe runs the background read sn of r.
func (s *fileSet) probe(r mirror.Read, sn mirror.Send) {
	f := s.files[sn.Mirror]
	go func() {
		buf := getBuf(int(r.Len))
		n, err := f.ReadAt(buf.b, r.Off)
		putBuf(buf)
		s.finished(nil, nil, sn, n, err)
	}()
}

// idle counts one read of the set's out and reports whether the set was
// closed and that was its last. Called with m.mu held.
func (s *fileSet) idle() bool {
	s.busy--
	return s.closing && s.busy == 0
}

func (s *fileSet) readAt(pid int, p []byte, off int64) (int, error) {
	n, _, err := s.read(pid, 0, p, off)
	return n, err
}

// read is a read for the request tagged unique (0: none; see
// ReadAtAnswering).
func (s *fileSet) read(pid int, unique uint64, p []byte, off int64) (int, bool, error) {
	r := mirror.Read{PID: pid, File: s.n, Off: off, Len: int64(len(p))}
	if a := s.m.answer.Load(); a != nil && unique != 0 {
		return s.readAnswering(r, unique, *a, p)
	}
	fl, st := s.begin(r, nil)
	for st.Sending && st.Wake == 0 {
		// Never hedged: on this goroutine.
		sn := st.Send
		n, err := s.files[sn.Mirror].ReadAt(p, off)
		if st = s.finished(&fl, nil, sn, n, err); st.Done && st.Err == nil {
			return n, false, nil
		}
	}
	if st.Done {
		return 0, false, st.Err
	}
	// Hedged: every read into a buffer of its own, the flight shared
	// with the reads that outlive the caller.
	h := new(mirror.Flight)
	*h = fl
	if rg := getRing(); rg != nil {
		n, err := s.readRing(rg, h, p, st)
		return n, false, err
	}
	n, err := s.readHedged(h, p, st)
	return n, false, err
}

// merge folds a later step of the same flight into st: its wake replaces
// st's, and a read to send or an answer decided is kept.
func merge(st *mirror.Step, next mirror.Step) {
	st.Wake = next.Wake
	if next.Sending {
		st.Send, st.Sending = next.Send, true
	}
	if next.Done {
		st.Done, st.Served, st.Err = true, next.Served, next.Err
	}
}

// readHedged is a hedged read with a goroutine per mirror read, where
// io_uring is not available.
func (s *fileSet) readHedged(fl *mirror.Flight, p []byte, st mirror.Step) (int, error) {
	type result struct {
		st  mirror.Step
		n   int
		buf *readBuf // the served read's; nil for the others
	}
	off := fl.Read().Off
	// One slot per mirror: a flight reads each at most once, and the
	// reads that end after the caller has gone never wait.
	results := make(chan result, fl.Most())
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	wake := int64(0)
	for {
		if st.Sending {
			sn := st.Send
			f := s.files[sn.Mirror]
			go func() {
				buf := getBuf(len(p))
				n, err := f.ReadAt(buf.b, off)
				st := s.finished(fl, nil, sn, n, err)
				if !st.Done || st.Err != nil {
					putBuf(buf)
					buf = nil
				}
				results <- result{st, n, buf}
			}()
			st.Sending = false
		}
		if st.Done {
			return 0, st.Err
		}
		if st.Wake != wake {
			if wake = st.Wake; wake > 0 {
				timer.Reset(s.m.until(wake))
			} else {
				timer.Stop()
			}
		}
		select {
		case res := <-results:
			if res.buf != nil {
				n := copy(p, res.buf.b[:res.n])
				putBuf(res.buf)
				return n, nil
			}
			merge(&st, res.st)
		case <-timer.C:
			wake = 0
			merge(&st, s.timer(fl))
		}
	}
}

// readRing is a hedged read through rg: the caller submits each mirror's
// read and waits for the first answer or the hedge time in one system
// call, with no other goroutine involved. Reads still in flight when it
// returns finish in the background.
func (s *fileSet) readRing(rg *ring, fl *mirror.Flight, p []byte, st mirror.Step) (int, error) {
	defer putRing(rg)
	off := fl.Read().Off
	var served *ringOp
	servedN := 0
	for {
		for st.Sending {
			// Send it: an injected error without a delay fails it at once.
			sn := st.Send
			st.Sending = false
			f := s.files[sn.Mirror]
			op := &ringOp{s: s, fl: fl, st: sn, fd: f.fd, buf: getBuf(len(p)), off: off}
			var delay time.Duration
			if f.faults != nil {
				delay, op.fault = f.faults.readPlan()
			}
			if delay == 0 && op.fault != nil {
				putBuf(op.buf)
				merge(&st, s.finished(fl, nil, sn, 0, op.fault))
				continue
			}
			rg.start(op, delay)
		}
		switch {
		case served != nil:
			n := copy(p, served.buf.b[:servedN])
			putBuf(served.buf)
			return n, nil
		case st.Done:
			return 0, st.Err
		}
		deadline := int64(0)
		if st.Wake > 0 {
			deadline = monoNow() + int64(s.m.until(st.Wake))
		}
		late := rg.enter(true, deadline)
		rg.reap(func(op *ringOp, n int, err error) {
			next := s.finished(op.fl, nil, op.st, n, err)
			if next.Done && next.Err == nil {
				served, servedN = op, n
			} else {
				putBuf(op.buf)
			}
			merge(&st, next)
		})
		if late && served == nil && !st.Done && !st.Sending {
			merge(&st, s.timer(fl))
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
