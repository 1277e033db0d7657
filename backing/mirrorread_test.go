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
			faults := []*Faults{{}, {}}
			dirs := mirrorDirs(t, 2, map[string]string{"f": string(content)})
			m, err := NewMirror(dirs, MirrorOptions{Policy: "adaptive", Now: monoNow, Faults: faults})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			e, err := m.Lookup(RootID, "f")
			if err != nil {
				t.Fatal(err)
			}
			f, err := m.Open(e.ID, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
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
