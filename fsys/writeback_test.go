package fsys

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// TestMmapWritebackNotQueued: pages a limited tenant writes through mmap
// reach sluice as the kernel's writeback, with no caller to pace. They are
// written at once, charged to the tenant's group as debt, so msync returns
// with the data in the backing file instead of holding the kernel's
// writeback (and every sync behind it) for 8 s at wbps=1MiB.
func TestMmapWritebackNotQueued(t *testing.T) {
	const size = 8 << 20
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=1MiB")}})
	path := filepath.Join(src, "m")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, 1001, 1001)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*13 + i>>12)
	}
	var took time.Duration
	runAs(1001, func() {
		fh, err := os.OpenFile(filepath.Join(mnt, "m"), os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer fh.Close()
		m, err := unix.Mmap(int(fh.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Munmap(m)
		copy(m, want)
		start := time.Now()
		if err := unix.Msync(m, unix.MS_SYNC); err != nil {
			t.Error(err)
		}
		took = time.Since(start)
	})
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < size && got[i] == want[i] {
			i++
		}
		t.Errorf("backing file differs from what was written through mmap at byte %d, right after msync", i)
	}
	m := groupMetrics(t, f, "t")
	t.Logf("msync of 8 MiB at wbps=1MiB took %v; writeback without a caller %d bytes, throttled %v",
		took, m.WritebackBytes, time.Duration(m.ThrottledNs))
	if m.WritebackBytes < size {
		t.Errorf("writeback without a caller counted %d bytes, want at least %d", m.WritebackBytes, size)
	}
	if m.ThrottledNs != 0 {
		t.Errorf("the kernel's writeback waited %v in the throttle; want it written at once", time.Duration(m.ThrottledNs))
	}
}
