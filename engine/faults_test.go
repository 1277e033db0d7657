package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"sluice/backing"
	"sluice/stack"
	"sluice/throttle"
)

// faultFile creates file name holding data in a fault tree over memory
// with rules, and returns the tree and the file opened through it.
func faultFile(t *testing.T, name string, data []byte, rules ...backing.FaultRule) (*backing.FaultTree, *backing.File) {
	t.Helper()
	ft, err := backing.NewFaultTree(backing.NewMemTree(backing.MemOptions{}), backing.FaultOptions{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	_, f, err := ft.Create(&backing.Cred{}, backing.RootID, name, syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return ft, f
}

// TestFaultRefund: device reads and write pieces that fail mid-request
// (8 calls in a row, from the backing file's 9th read, its 5th write) give
// the caller the backing file's EIO, and their bytes back to the group:
// on virtual time, the group then moves what it has left to move at its
// full limit, so that from the start the whole run took the bytes that
// reached the device over the rate, to 1 %. Charged for the failed I/Os
// too, it would take longer (a second for the reads).
func TestFaultRefund(t *testing.T) {
	for _, d := range []throttle.Dir{throttle.Read, throttle.Write} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				data := randomData(4*MiB, 9)
				op, after, limit := backing.OpRead, 8, 8
				if d == throttle.Write {
					op, after, limit = backing.OpWrite, 4, 2
				}
				ft, f := faultFile(t, "f", data, backing.FaultRule{Ops: op, Err: syscall.EIO, After: after, Limit: limit})
				e := newEngine(t, noReadahead, func(o *Options) { o.MaxIO = 128 << 10 })
				e.SetLimits("default", throttle.SetAll(throttle.Limits{RBPS: MiB, WBPS: MiB}))
				g := e.Group("default")
				h := &stack.Handle{Ino: 1, File: f}
				io := func(off int64) (int, error) {
					n := min(MiB, 4*MiB-off)
					if d == throttle.Read {
						return e.Read(context.Background(), h, g, make([]byte, n), off)
					}
					return e.Write(context.Background(), h, g, f, data[off:off+n], off)
				}
				start := time.Now()
				var moved int64
				var failed error
				for off := int64(0); off < 4*MiB; {
					n, err := io(off)
					moved += int64(n)
					off += int64(n)
					if err != nil {
						failed = err
						off += MiB - off%MiB // past the failed range
					}
				}
				fired := ft.Fired()[0]
				ft.SetRules()
				// A probe: the group is free again once the run is paid for.
				probe := &stack.Handle{Ino: 2, File: f}
				var err error
				if d == throttle.Read {
					_, err = e.Read(context.Background(), probe, g, make([]byte, 1), 0)
				} else {
					_, err = e.Write(context.Background(), probe, g, f, data[:1], 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if !errors.Is(failed, syscall.EIO) {
					t.Fatalf("%s of 4 MiB with the backing file failing %d calls from its %dth: error %v, want EIO", d, limit, after+1, failed)
				}
				if fired != limit {
					t.Fatalf("the fault fired %d times, want %d", fired, limit)
				}
				// What reached the device: for a write, what the caller
				// was told of (and the probe's byte), the pieces after a
				// failed one withdrawn.
				c := e.Metrics().Groups[0].Counters
				dev := c.RBytes
				if d == throttle.Write {
					dev = c.WBytes
					if dev != moved+1 {
						t.Fatalf("%d bytes written to the device, the caller told of %d: pieces after a failed one were written", dev, moved)
					}
				}
				want := time.Duration(dev * int64(time.Second) / MiB)
				t.Logf("%s: %d KiB told moved, %d KiB reached the device, EIO (%v) in between, in %v", d, moved>>10, dev>>10, failed, took)
				if moved >= 4*MiB || moved < 2*MiB {
					t.Fatalf("%d bytes moved, want 2 to 4 MiB: all but what the failed calls held", moved)
				}
				if took < want*99/100 || took > want*101/100 {
					t.Fatalf("the run took %v for %d KiB that reached the device at 1 MiB/s: want %v ± 1 %% (failed I/Os refunded)", took, dev>>10, want)
				}
			})
		})
	}
}
