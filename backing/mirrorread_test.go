package backing

import (
	"bytes"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestUringLayout: the io_uring structures have the kernel's sizes.
func TestUringLayout(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"io_uring_params", unsafe.Sizeof(uringParams{}), 120},
		{"io_uring_sqe", unsafe.Sizeof(uringSQE{}), 64},
		{"io_uring_cqe", unsafe.Sizeof(uringCQE{}), 16},
		{"io_uring_getevents_arg", unsafe.Sizeof(uringWaitArg{}), 24},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, want %d", c.name, c.got, c.want)
		}
	}
}

// TestHedgedRead: under the adaptive policy a read stuck on a hung mirror
// is answered by the other, and a read that fails on one mirror is served
// by the other, with io_uring and with goroutines.
func TestHedgedRead(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for _, c := range []struct {
		name string
		off  bool
	}{{"io_uring", false}, {"goroutines", true}} {
		t.Run(c.name, func(t *testing.T) {
			rings.Lock()
			was := rings.off
			rings.off = was || c.off
			rings.Unlock()
			defer func() {
				rings.Lock()
				rings.off = was
				rings.Unlock()
			}()
			if !c.off && getRingOrSkip(t) {
				return
			}
			m, f, faults := adaptivePair(t, content)
			read := func(what string) {
				t.Helper()
				for i := range 16 {
					p := make([]byte, 4096)
					off := int64(i%16) * 4096
					start := time.Now()
					n, err := f.ReadAt(p, off)
					if err != nil || n != len(p) || !bytes.Equal(p, content[off:off+4096]) {
						t.Fatalf("%s: read %d at %d: %d bytes, %v", what, i, off, n, err)
					}
					if d := time.Since(start); d > 5*time.Second {
						t.Fatalf("%s: read %d took %v", what, i, d)
					}
				}
			}
			// Mirror 0 hangs: the reads sent to it are hedged on mirror 1.
			faults[0].SetRead(time.Minute, nil)
			read("mirror 0 hung")
			if s := m.Stats(); s[0].Inflight == 0 {
				t.Errorf("no read in flight on the hung mirror: %+v", s)
			}
			// Mirror 0 recovers, mirror 1 fails: no read fails.
			faults[0].SetRead(0, nil)
			faults[1].SetRead(0, syscall.EIO)
			read("mirror 1 failing")
			if r, _ := faults[1].Failed(); r == 0 {
				t.Error("no read was sent to the failing mirror")
			}
			if s := m.Stats(); s[1].Errors == 0 {
				t.Errorf("the failing mirror's errors are not counted: %+v", s)
			}
			if !c.off {
				rings.Lock()
				idle := len(rings.free)
				rings.Unlock()
				if idle == 0 {
					t.Error("no ring went back to the pool")
				}
			}
		})
	}
}

// getRingOrSkip skips the test where io_uring is not available, and
// empties the pool of idle rings.
func getRingOrSkip(t *testing.T) bool {
	r := getRing()
	if r == nil {
		t.Skip("io_uring is not available here")
		return true
	}
	r.close()
	// Empty the pool, so that the test sees the rings it used go back.
	rings.Lock()
	for _, r := range rings.free {
		r.close()
	}
	rings.free = nil
	rings.Unlock()
	return false
}

// TestAnsweredRead: a read that can be answered early runs on its
// caller's goroutine; stuck on a hung mirror past the hedge delay, it is
// read from the other mirror and answered through the set's Answer while
// it is still stuck, and when the mirror recovers the stuck read returns
// saying its caller was answered. Reads not stuck return their own data.
func TestAnsweredRead(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	m, f, faults := adaptivePair(t, content)
	type early struct {
		unique uint64
		p      []byte
	}
	answers := make(chan early, 64)
	m.SetAnswer(func(unique uint64, p []byte) error {
		answers <- early{unique, bytes.Clone(p)}
		return nil
	})
	type result struct {
		unique   uint64
		n        int
		answered bool
		err      error
		p        []byte
	}
	results := make(chan result, 64)
	want := func(u uint64) []byte { off := int64(u%16) * 4096; return content[off : off+4096] }
	faults[0].SetRead(time.Minute, nil)
	stuck := map[uint64]bool{}
	for u := uint64(1); u <= 16; u++ {
		go func() {
			p := make([]byte, 4096)
			n, answered, err := f.ReadAtAnswering(0, u, p, int64(u%16)*4096)
			results <- result{u, n, answered, err, p}
		}()
		select {
		case r := <-results:
			if r.err != nil || r.answered || r.unique != u || !bytes.Equal(r.p[:r.n], want(u)) {
				t.Fatalf("read %d: %d bytes, answered %v, %v", r.unique, r.n, r.answered, r.err)
			}
		case a := <-answers:
			if a.unique != u || !bytes.Equal(a.p, want(u)) {
				t.Fatalf("read %d answered early as %d with %d bytes", u, a.unique, len(a.p))
			}
			stuck[u] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("read %d neither returned nor was answered in 5 s", u)
		}
	}
	if len(stuck) == 0 {
		t.Fatal("no read was stuck on the hung mirror and answered early")
	}
	if s := m.Stats(); s[0].Inflight != len(stuck) {
		t.Errorf("%d reads in flight on the hung mirror, want the %d answered early: %+v", s[0].Inflight, len(stuck), s)
	}
	// The hung mirror recovers: the stuck reads return, answered.
	faults[0].SetRead(0, nil)
	for range stuck {
		select {
		case r := <-results:
			if !stuck[r.unique] || !r.answered || r.err != nil || r.n != 4096 {
				t.Errorf("stuck read %d returned %d bytes, answered %v, %v", r.unique, r.n, r.answered, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stuck reads did not return after the mirror recovered")
		}
	}
	if s := m.Stats(); s[0].Inflight != 0 || s[1].Inflight != 0 {
		t.Errorf("reads left in flight: %+v", s)
	}
}

// adaptivePair returns a two-way mirror set under the adaptive policy
// holding content as "f", that file open, and each mirror's faults; all
// are closed when the test ends.
func adaptivePair(t *testing.T, content []byte) (*Mirror, *File, []*Faults) {
	t.Helper()
	faults := []*Faults{{}, {}}
	m, f := mirrorPair(t, MirrorOptions{Policy: "adaptive", Faults: faults}, content)
	return m, f, faults
}

// mirrorPair returns a two-way mirror set made with opts (on the monotonic
// clock) holding content as "f", and that file open; both are closed when
// the test ends.
func mirrorPair(t testing.TB, opts MirrorOptions, content []byte) (*Mirror, *File) {
	t.Helper()
	dirs := mirrorDirs(t, 2, map[string]string{"f": string(content)})
	opts.Now = monoNow
	m, err := NewMirror(dirs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e, err := m.Lookup(RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Open(e.ID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return m, f
}

// TestMirrorReadTime: each mirror's ReadTime adds up the time its reads
// took, at least what the faults made each wait.
func TestMirrorReadTime(t *testing.T) {
	faults := []*Faults{{}, {}}
	m, f := mirrorPair(t, MirrorOptions{Policy: "roundrobin", Faults: faults}, bytes.Repeat([]byte("x"), 8192))
	const wait, reads = 5 * time.Millisecond, 6
	for _, fl := range faults {
		fl.SetRead(wait, nil)
	}
	p := make([]byte, 4096)
	for i := range reads {
		if n, err := f.ReadAt(p, int64(i%2)*4096); err != nil || n != len(p) {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
	}
	var n, took int64
	for _, s := range m.Stats() {
		n += s.Reads
		took += s.ReadTime
		if s.Reads > 0 && s.ReadTime < s.Reads*int64(wait) {
			t.Errorf("mirror %s: %d reads took %v in all, each waited at least %v", s.Dir, s.Reads, time.Duration(s.ReadTime), wait)
		}
	}
	if n != reads {
		t.Errorf("%d reads counted, want %d", n, reads)
	}
}
