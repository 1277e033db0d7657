package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"sluice/device"
	"sluice/stack"
	"sluice/throttle"
)

const MiB = 1 << 20

// memFile is a backing file in memory.
type memFile struct {
	mu    sync.Mutex
	data  []byte
	reads int
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	return bytes.NewReader(m.data).ReadAt(p, off)
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end := int(off) + len(p); end > len(m.data) {
		m.data = append(m.data, make([]byte, end-len(m.data))...)
	}
	return copy(m.data[off:], p), nil
}

func randomData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newEngine returns an engine with the stack's default options, changed by
// each of set.
func newEngine(t *testing.T, set ...func(*Options)) *Engine {
	t.Helper()
	opts := Options{Options: stack.DefaultOptions(), GoTimer: true} // virtual time
	for _, f := range set {
		f(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func noReadahead(o *Options) { o.Readahead = 0 }

// readAll reads the whole file in reads of size bs and checks the bytes.
func readAll(t *testing.T, e *Engine, h *stack.Handle, g *throttle.Group, want []byte, bs int) {
	t.Helper()
	buf := make([]byte, bs)
	for off := 0; off < len(want); {
		n, err := e.Read(context.Background(), h, g, buf, int64(off))
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if n == 0 {
			t.Fatalf("read at %d: unexpected end of file", off)
		}
		if !bytes.Equal(buf[:n], want[off:off+n]) {
			t.Fatalf("read at %d: wrong data", off)
		}
		off += n
	}
}

// TestReadRate: 10 MiB at 1 MiB/s takes 10 s ± 1 %, for small and large
// reads, with the readahead budget on and off.
func TestReadRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bs     int
		budget bool
	}{
		{"4k budget", 4096, true},
		{"4k no budget", 4096, false},
		{"1M budget", MiB, true},
		{"48k budget", 48 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				data := randomData(10*MiB, 1)
				e := newEngine(t, func(o *Options) { o.ReadaheadBudget = tc.budget })
				e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB}))
				g := e.Group("default")
				h := &stack.Handle{Ino: 1, File: &memFile{data: data}}
				start := time.Now()
				readAll(t, e, h, g, data, tc.bs)
				// Admission is by debt: the last request goes before its
				// bytes are paid for. The group is free again, and the
				// transfer's cost paid, when a further read gets through.
				probe := &stack.Handle{Ino: 2, File: &memFile{data: data}}
				if _, err := e.Read(context.Background(), probe, g, make([]byte, 1), 0); err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if took < 9900*time.Millisecond || took > 10100*time.Millisecond {
					t.Fatalf("10 MiB at 1 MiB/s took %v, want 10s ± 1%%", took)
				}
				m := e.Metrics()
				if got := m.Groups[0].RBytes; got < 10*MiB || got > 10*MiB+128<<10 {
					t.Fatalf("device read %d bytes, want 10 MiB plus at most one readahead window", got)
				}
			})
		})
	}
}

// TestHierarchyShare: two tenants under a parent limited to 2 MiB/s, one
// reading 4 KiB at a time and one 1 MiB at a time, share it by bytes.
func TestHierarchyShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, noReadahead)
		e.SetLimits("tenants", throttle.SetAll(throttle.Limits{RBPS: 2 * MiB}))
		a, b := e.Group("tenants/a"), e.Group("tenants/b")
		data := randomData(64*MiB, 2)
		f := &memFile{data: data}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for i, tc := range []struct {
			g  *throttle.Group
			bs int
			qd int
		}{{a, 4096, 8}, {b, MiB, 2}} {
			for j := 0; j < tc.qd; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := &stack.Handle{Ino: uint64(10*i + j), File: f}
					buf := make([]byte, tc.bs)
					for off := int64(0); ; off = (off + int64(tc.bs)) % int64(len(data)) {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := e.Read(context.Background(), h, tc.g, buf, off); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		time.Sleep(20 * time.Second)
		var got [2]int64
		for _, m := range e.Metrics().Groups {
			switch m.Group {
			case "tenants/a":
				got[0] = m.RBytes
			case "tenants/b":
				got[1] = m.RBytes
			}
		}
		close(stop)
		e.SetLimits("tenants", throttle.SetAll(throttle.Limits{})) // let the readers finish
		wg.Wait()
		total := got[0] + got[1]
		if want := int64(40 * MiB); total < want*99/100 || total > want*101/100 {
			t.Fatalf("tenants read %d bytes in 20 s, want about %d (2 MiB/s)", total, want)
		}
		if ratio := float64(got[0]) / float64(got[1]); ratio < 0.9 || ratio > 1.1 {
			t.Fatalf("4 KiB reader got %d bytes, 1 MiB reader %d: ratio %.2f, want ~1 (fair by bytes)", got[0], got[1], ratio)
		}
	})
}

// TestSetLimitLive: a reader crawling at 64 KiB/s is released at once when
// the limit is lifted, and slowed again when it returns.
func TestSetLimitLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(4*MiB, 3)
		e := newEngine(t)
		e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: 64 << 10}))
		g := e.Group("default")
		h := &stack.Handle{Ino: 1, File: &memFile{data: data}}
		start := time.Now()
		go func() {
			time.Sleep(3 * time.Second)
			e.SetLimits("default", throttle.SetAll(throttle.Limits{}))
		}()
		readAll(t, e, h, g, data, MiB)
		took := time.Since(start)
		if took > 3*time.Second+10*time.Millisecond {
			t.Fatalf("read finished %v after start, want right after the limit was lifted at 3s", took)
		}
		if took < 2900*time.Millisecond {
			t.Fatalf("read finished %v after start, before the limit was lifted at 3s: the limit was not in force", took)
		}
		// Set again, the limit holds again: of four 64 KiB reads at 64 KiB/s
		// the first goes at once and each next one a second later. The
		// first reader's device reads, still in flight, finish first.
		synctest.Wait()
		e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: 64 << 10}))
		start = time.Now()
		h2 := &stack.Handle{Ino: 2, File: &memFile{data: data}}
		readAll(t, e, h2, g, data[:256<<10], 64<<10)
		if took := time.Since(start); took < 2900*time.Millisecond || took > 3100*time.Millisecond {
			t.Fatalf("256 KiB at 64 KiB/s after the limit was set again took %v, want 3s", took)
		}
	})
}

// TestSetLimitsChange: a change sets the keys it names and keeps the
// others, reports the limits before and after, and changes of different
// keys from many goroutines at once all hold in the end.
func TestSetLimitsChange(t *testing.T) {
	e := newEngine(t)
	was, is, _ := e.SetLimits("a/b", throttle.LimitChange{Keys: throttle.KeyRBPS | throttle.KeyWIOPS, To: throttle.Limits{RBPS: MiB, WBPS: 7, WIOPS: 100}})
	if want := (throttle.Limits{RBPS: MiB, WIOPS: 100}); was != (throttle.Limits{}) || is != want {
		t.Fatalf("first change: %v → %v, want %v → %v", was, is, throttle.Limits{}, want)
	}
	was, is, _ = e.SetLimits("a/b", throttle.LimitChange{Keys: throttle.KeyRBPS | throttle.KeyRIOPS, To: throttle.Limits{RIOPS: 5}})
	if want := (throttle.Limits{RIOPS: 5, WIOPS: 100}); was != (throttle.Limits{RBPS: MiB, WIOPS: 100}) || is != want {
		t.Fatalf("second change: %v → %v, want rbps to max, riops=5, wiops kept: %v", was, is, want)
	}
	if got := e.Group("a/b").Limits(); got != is {
		t.Fatalf("group's limits %v, want %v", got, is)
	}
	var wg sync.WaitGroup
	for _, k := range []throttle.Keys{throttle.KeyRBPS, throttle.KeyWBPS, throttle.KeyRIOPS, throttle.KeyWIOPS} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range int64(100) {
				e.SetLimits("c", throttle.LimitChange{Keys: k, To: throttle.Limits{RBPS: i + 1, WBPS: i + 1, RIOPS: i + 1, WIOPS: i + 1}})
			}
		}()
	}
	wg.Wait()
	if got, want := e.Group("c").Limits(), (throttle.Limits{RBPS: 100, WBPS: 100, RIOPS: 100, WIOPS: 100}); got != want {
		t.Fatalf("after concurrent changes of each key: %v, want %v", got, want)
	}
}

// TestInterrupt: an interrupted read returns EINTR at once and its queued
// I/O is withdrawn, so the next reader is not charged for it.
func TestInterrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(4*MiB, 4)
		e := newEngine(t, noReadahead)
		e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB}))
		g := e.Group("default")
		f := &memFile{data: data}
		h := &stack.Handle{Ino: 1, File: f}
		buf := make([]byte, MiB)
		if _, err := e.Read(context.Background(), h, g, buf, 0); err != nil {
			t.Fatal(err) // admitted at once: the group owes 1 s
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() {
			_, err := e.Read(ctx, h, g, buf, MiB)
			errc <- err
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-errc; !errors.Is(err, syscall.EINTR) {
			t.Fatalf("interrupted read: %v, want EINTR", err)
		}
		if q := e.Metrics().Queued; q != 0 {
			t.Fatalf("%d I/Os still queued after the interrupt", q)
		}
		// The next reader pays only the first read's debt (until 1 s), not
		// the withdrawn read's MiB as well (which would be 2 s).
		start := time.Now()
		if _, err := e.Read(context.Background(), h, g, buf, 2*MiB); err != nil {
			t.Fatal(err)
		}
		if at := time.Since(start) + 100*time.Millisecond; at > 1100*time.Millisecond {
			t.Fatalf("the next read went at %v, want at 1s: it paid for the interrupted read", at)
		}
	})
}

// TestMaxWait: eight readers (or writers) of 1 MiB at 1 MiB/s under a
// wait cap: no call waits past the cap, and over a minute the group moves
// its limit, not eight requests per cap (the forced pages are debt that
// later requests pay).
func TestMaxWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write bool
		cap   time.Duration
		bs    int
	}{
		{"read/1s/1MiB", false, time.Second, MiB},
		{"read/100ms/128KiB", false, 100 * time.Millisecond, 128 << 10},
		{"write/1s/1MiB", true, time.Second, MiB},
		{"write/100ms/64KiB", true, 100 * time.Millisecond, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const run = 60 * time.Second
				data := randomData(16*MiB, 5)
				e := newEngine(t, func(o *Options) { o.MaxWait = tc.cap })
				if tc.write {
					e.SetLimits("default", throttle.SetAll(throttle.Limits{WBPS: MiB}))
				} else {
					e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB}))
				}
				g := e.Group("default")
				start := time.Now()
				var mu sync.Mutex
				var moved int64
				var calls, short int
				var longest time.Duration
				var wg sync.WaitGroup
				for j := range 8 {
					wg.Go(func() {
						f := &memFile{data: bytes.Clone(data)}
						h := &stack.Handle{Ino: uint64(j + 1), File: f}
						buf := make([]byte, tc.bs)
						for off := int64(0); time.Since(start) < run; {
							t0 := time.Now()
							var n int
							var err error
							if tc.write {
								n, err = e.Write(context.Background(), h, g, f, buf, off)
							} else {
								n, err = e.Read(context.Background(), h, g, buf, off)
							}
							took := time.Since(t0)
							if err != nil || n == 0 {
								t.Errorf("reader %d at %d: %d bytes, %v", j, off, n, err)
								return
							}
							if !tc.write && !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
								t.Errorf("reader %d at %d: wrong data", j, off)
								return
							}
							off += int64(n)
							mu.Lock()
							moved += int64(n)
							calls++
							if n < tc.bs {
								short++
							}
							longest = max(longest, took)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				ratio := float64(moved) / elapsed.Seconds() / MiB
				t.Logf("%d calls (%d short), %.3f of the limit over %v, longest wait %v\n%v", calls, short, ratio, elapsed, longest, e.Metrics())
				// The callers never get more than the limit; the device moves
				// the limit (reads ahead of a cut request stay cached for the
				// caller's next call, so the callers' figure may trail it).
				if ratio > 1.02 {
					t.Errorf("callers moved %.3f of the limit over %v; want at most 1.02", ratio, elapsed)
				}
				m := e.Metrics().Groups[0]
				dev := float64(m.RBytes+m.WBytes) / elapsed.Seconds() / MiB
				if dev > 1.02 || dev < 0.97 {
					t.Errorf("device moved %.3f of the limit over %v; want 0.97-1.02", dev, elapsed)
				}
				if longest > tc.cap {
					t.Errorf("a call waited %v, past the %v cap", longest, tc.cap)
				}
				if short == 0 {
					t.Errorf("no call was cut short: the cap was never reached, the test shows nothing")
				}
			})
		})
	}
}

// TestWriteSplitIOPS: 1 MiB writes under wiops=100 with 128 KiB pieces reach
// the device at 100 I/Os per second, and the data lands intact.
func TestWriteSplitIOPS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t)
		e.SetLimits("default", throttle.SetAll(throttle.Limits{WIOPS: 100}))
		g := e.Group("default")
		f := &memFile{}
		h := &stack.Handle{Ino: 1, File: f}
		data := randomData(50*MiB, 6)
		start := time.Now()
		for off := 0; off < len(data); off += MiB {
			if _, err := e.Write(context.Background(), h, g, f, data[off:off+MiB], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		m := e.Metrics().Groups[0]
		if m.WIOs != 400 || m.WBytes != 50*MiB || m.AppWrites != 50 {
			t.Fatalf("wios %d wbytes %d app writes %d, want 400, 50 MiB, 50", m.WIOs, m.WBytes, m.AppWrites)
		}
		// 400 pieces at 100/s: the last is admitted 3.99 s after the first.
		if iops := float64(m.WIOs-1) / took.Seconds(); iops < 99 || iops > 101 {
			t.Fatalf("device write IOPS %.2f over %v, want 100 ± 1", iops, took)
		}
		if !bytes.Equal(f.data, data) {
			t.Fatal("written data differs")
		}
	})
}

// TestWriteInvalidatesCache: a read after a write sees the new bytes.
func TestWriteInvalidatesCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(MiB, 7)
		f := &memFile{data: append([]byte(nil), data...)}
		e := newEngine(t)
		e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: 100 * MiB}))
		g := e.Group("default")
		h := &stack.Handle{Ino: 1, File: f}
		readAll(t, e, h, g, data, 64<<10)
		patch := randomData(10000, 8)
		if _, err := e.Write(context.Background(), h, g, f, patch, 5000); err != nil {
			t.Fatal(err)
		}
		copy(data[5000:], patch)
		readAll(t, e, h, g, data, 4096)
		// Growing the file past a cached partial last page.
		small := randomData(6000, 9)
		f2 := &memFile{data: append([]byte(nil), small...)}
		h2 := &stack.Handle{Ino: 2, File: f2}
		readAll(t, e, h2, g, small, 4096)
		more := randomData(5000, 10)
		e.Write(context.Background(), h2, g, f2, more, 9000)
		want := append(append(small, make([]byte, 3000)...), more...)
		readAll(t, e, h2, g, want, 8192)
	})
}

// TestInterruptSurvivable: an interrupt for a signal the caller survives
// does not fail its read: the read waits its turn and returns the data. If
// the caller is then being killed, the read ends with EINTR at the next
// check.
func TestInterruptSurvivable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(4*MiB, 6)
		var killed atomic.Bool
		e := newEngine(t, noReadahead, func(o *Options) {
			o.Dying = func(context.Context) bool { return killed.Load() }
		})
		e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB}))
		g := e.Group("default")
		h := &stack.Handle{Ino: 1, File: &memFile{data: data}}
		buf := make([]byte, MiB)
		if _, err := e.Read(context.Background(), h, g, buf, 0); err != nil {
			t.Fatal(err) // admitted at once: the group owes 1 s
		}
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // interrupted before it even waits
		n, err := e.Read(ctx, h, g, buf, MiB)
		if err != nil || n != MiB || !bytes.Equal(buf, data[MiB:2*MiB]) {
			t.Fatalf("read interrupted by a survivable signal: %d bytes, %v; want the data", n, err)
		}
		if waited := time.Since(start); waited < 900*time.Millisecond {
			t.Fatalf("the interrupted read waited %v, want its turn (about 1 s)", waited)
		}

		errc := make(chan error)
		go func() {
			_, err := e.Read(ctx, h, g, buf, 2*MiB)
			errc <- err
		}()
		time.Sleep(300 * time.Millisecond)
		killed.Store(true)
		start = time.Now()
		if err := <-errc; !errors.Is(err, syscall.EINTR) {
			t.Fatalf("read of a caller being killed: %v, want EINTR", err)
		}
		if waited := time.Since(start); waited > DyingPoll {
			t.Fatalf("the killed caller's read ended %v after the kill, want within %v", waited, DyingPoll)
		}
		if q := e.Metrics().Queued; q != 0 {
			t.Fatalf("%d I/Os still queued after the kill", q)
		}
	})
}

// TestWriteErrorPrefix: a write whose third piece fails on the device
// returns the bytes of the pieces before it, as a short write; a write
// whose first piece fails returns the device's error.
func TestWriteErrorPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("injected")
		f := &device.Faulty{File: device.NewMem(0), Fail: func(op device.Op, off, n int64) error {
			if op == device.Write && off >= 256<<10 {
				return boom
			}
			return nil
		}}
		e := newEngine(t, func(o *Options) { o.MaxIO = 128 << 10 })
		e.SetLimits("default", throttle.SetAll(throttle.Limits{WIOPS: 10})) // pieces 100 ms apart: one call each
		g := e.Group("default")
		h := &stack.Handle{Ino: 1, File: f}
		n, err := e.Write(context.Background(), h, g, f, make([]byte, MiB), 0)
		if n != 256<<10 || err != nil {
			t.Fatalf("write: %d bytes, %v; want the 256 KiB before the failed piece", n, err)
		}
		n, err = e.Write(context.Background(), h, g, f, make([]byte, 4096), 512<<10)
		if n != 0 || err != boom {
			t.Fatalf("write at the failing offset: %d, %v; want the device's error", n, err)
		}
	})
}

// gatedFile is a memFile whose read at one offset waits for a gate.
type gatedFile struct {
	*memFile
	at   int64
	gate chan struct{}
}

func (g *gatedFile) ReadAt(p []byte, off int64) (int, error) {
	if off == g.at {
		<-g.gate
	}
	return g.memFile.ReadAt(p, off)
}

// TestInterruptHandedRead: device reads handed to a waiting request are
// performed even when that request is interrupted first, so another reader
// waiting for the same pages gets them. Request A reads two MaxIO pieces:
// the first is handed to it and held on the device, the second is handed
// to it meanwhile, then A is interrupted; when the first read returns, A
// sees the interrupt and the second piece together. Reader B waits for a
// page of the second piece. Run many times: which of the two A takes first
// varies.
func TestInterruptHandedRead(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			data := randomData(4*MiB, 5)
			e := newEngine(t, noReadahead)
			e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB}))
			g := e.Group("default")
			piece := e.Options().MaxIO
			f := &gatedFile{memFile: &memFile{data: data}, at: 2 * MiB, gate: make(chan struct{})}
			h := &stack.Handle{Ino: 1, File: f}
			if _, err := e.Read(context.Background(), h, g, make([]byte, MiB), 0); err != nil {
				t.Fatal(err) // the group owes 1 s
			}
			ctx, cancel := context.WithCancel(context.Background())
			errA := make(chan error, 1)
			go func() {
				_, err := e.Read(ctx, h, g, make([]byte, 2*piece), 2*MiB)
				errA <- err
			}()
			synctest.Wait()
			bufB := make([]byte, 4096)
			nB := make(chan int, 1)
			go func() {
				n, err := e.Read(context.Background(), h, g, bufB, 2*MiB+piece)
				if err != nil {
					t.Error(err)
				}
				nB <- n
			}()
			// The first piece goes at 1 s and waits on the gate; the second
			// goes a piece's time later, handed to A while it waits.
			time.Sleep(time.Second + 2*time.Duration(piece)*time.Second/MiB)
			synctest.Wait()
			cancel()
			close(f.gate)
			if err := <-errA; err != nil && !errors.Is(err, syscall.EINTR) {
				t.Fatalf("interrupted read: %v", err)
			}
			if n := <-nB; n != len(bufB) || !bytes.Equal(bufB, data[2*MiB+piece:2*MiB+piece+4096]) {
				t.Fatalf("the other reader got %d bytes, or the wrong ones", n)
			}
		})
	}
}

// TestNotifyQueued: the engine tells a watcher when a read waits for its
// group's throttle, and says nothing of reads that never wait.
func TestNotifyQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(MiB, 3)
		e := newEngine(t, noReadahead)
		ch := make(chan struct{}, 1)
		e.NotifyQueued(ch)
		e.SetLimits("slow", throttle.SetAll(throttle.Limits{RBPS: 64 << 10}))
		free := &stack.Handle{Ino: 1, File: &memFile{data: data}}
		readAll(t, e, free, e.Group("free"), data, 64<<10)
		select {
		case <-ch:
			t.Fatal("a token for reads of a group with no limit, which never wait")
		default:
		}
		// 256 KiB at 64 KiB/s: the reads after the first wait.
		slow := &stack.Handle{Ino: 2, File: &memFile{data: data}}
		done := make(chan struct{})
		go func() {
			readAll(t, e, slow, e.Group("slow"), data[:256<<10], 64<<10)
			close(done)
		}()
		synctest.Wait()
		select {
		case <-ch:
		default:
			t.Fatal("no token while a read of the limited group waits for its throttle")
		}
		e.NotifyQueued(nil)
		<-done
		select {
		case <-ch:
			t.Fatal("a token after NotifyQueued(nil)")
		default:
		}
	})
}
