package fsys

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
	"sluice/stack"
	"sluice/throttle"
)

// TestHandoverSchedule: a group's debt goes with the mount to the process
// that takes it over (here another FS of this process on the same
// connection): a limited group that has just read half a second of its
// rate (a read of 128 KiB at 256 KiB/s, less the burst's credit) is
// still that far ahead of its schedule, less what the handover took, in
// the FS that adopts the mount, and it reads through it.
func TestHandoverSchedule(t *testing.T) {
	opts := Options{AllowOther: true, Rules: []group.Rule{{Group: "t", UID: new(uint32(4101))}}, Limits: limitSpecs(t, []string{"t rbps=256KiB"})}
	opts.Options.Options = stack.DefaultOptions()
	src, mnt, f := mount(t, opts)
	os.WriteFile(filepath.Join(src, "f"), make([]byte, 1<<20), 0o644)
	runAs(4101, func() {
		fd, err := unix.Open(filepath.Join(mnt, "f"), unix.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		buf, _ := unix.Mmap(-1, 0, 128<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		defer unix.Munmap(buf)
		if n, err := unix.Pread(fd, buf, 0); n != len(buf) || err != nil {
			t.Errorf("read %d bytes, %v", n, err)
		}
	})
	debt := func(s map[string]throttle.Schedule) time.Duration {
		return time.Duration(s["t"][throttle.Read][0])
	}
	st, fds, err := f.Handover(HandoverWait)
	if err != nil {
		t.Fatal(err)
	}
	if d := debt(st.Schedules); d < 300*time.Millisecond || d > 500*time.Millisecond {
		t.Fatalf("handed over with %v of read debt, want about 500 ms less the read's own time", d)
	}
	opts.Source, opts.Mountpoint = src, mnt
	g, err := Adopt(opts, st, fds, false)
	if err != nil {
		f.Resume()
		t.Fatal(err)
	}
	f.Release()
	if d := debt(g.Engine().Schedules()); d < 200*time.Millisecond || d > debt(st.Schedules) {
		t.Errorf("adopted with %v of read debt, want the %v handed over less the time since", d, debt(st.Schedules))
	}
	g.Serve()
	done := make(chan struct{})
	go func() { g.Wait(); close(done) }()
	defer func() {
		if err := g.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		<-done
	}()
	var n int
	runAs(4101, func() {
		var file *os.File
		if file, err = os.Open(filepath.Join(mnt, "f")); err == nil {
			n, err = file.Read(make([]byte, 4096))
			file.Close()
		}
	})
	if err != nil || n != 4096 {
		t.Errorf("read through the adopted mount: %d bytes, %v", n, err)
	}
}
