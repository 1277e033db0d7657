package fsys

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sluice/backing"
	"sluice/group"
	"sluice/stack"
)

// writeSmall writes data through path in writes of bs bytes as uid,
// then closes the file; it returns the first error of a write or of the
// close.
func writeSmall(t *testing.T, uid int, path string, data []byte, bs int) (err error) {
	t.Helper()
	runAs(uid, func() {
		f, oerr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if oerr != nil {
			err = oerr
			return
		}
		for off := 0; off < len(data) && err == nil; off += bs {
			_, err = f.Write(data[off:min(off+bs, len(data))])
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// TestWriteCacheSmallWrites: with the write cache, 4 KiB write()s of a
// group with no write limit reach sluice as a few large writes, not one
// round trip each, and the file on SOURCE holds every byte once it is
// closed. Without it each write() is a request of its own.
func TestWriteCacheSmallWrites(t *testing.T) {
	const size, bs = 2 << 20, 4096
	for _, wc := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[wc], func(t *testing.T) {
			src, mnt, f := mount(t, Options{AllowOther: true, WriteCache: wc})
			os.Chmod(src, 0o777)
			data := writeRandom(t, filepath.Join(t.TempDir(), "want"), size, 11)
			if err := writeSmall(t, 1001, filepath.Join(mnt, "f"), data, bs); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(src, "f"))
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "SOURCE after close", got, data)
			writes := groupMetrics(t, f, "default").AppWrites
			t.Logf("%d write() calls of %d bytes reached sluice as %d writes", size/bs, bs, writes)
			switch {
			case wc && writes > size/bs/8:
				t.Errorf("with the write cache %d writes reached sluice for %d write() calls, want at most %d", writes, size/bs, size/bs/8)
			case !wc && writes < size/bs:
				t.Errorf("without the write cache %d writes reached sluice for %d write() calls, want one each", writes, size/bs)
			}
		})
	}
}

// TestWriteCacheWriteOnly: a file its owner may write but not read, written
// in part through the write cache (the kernel reads the rest of each page
// it fills in part), ends as the same writes leave a copy on SOURCE, and
// the owner still cannot read it through the mount.
func TestWriteCacheWriteOnly(t *testing.T) {
	src, mnt, _ := mount(t, Options{AllowOther: true, WriteCache: true})
	orig := writeRandom(t, filepath.Join(src, "w"), 300000, 12)
	if err := os.WriteFile(filepath.Join(src, "ref"), orig, 0o200); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"w", "ref"} {
		os.Chmod(filepath.Join(src, p), 0o200)
		os.Chown(filepath.Join(src, p), 1001, 1001)
	}
	edit := func(path string) (err error) {
		runAs(1001, func() {
			f, oerr := os.OpenFile(path, os.O_WRONLY, 0)
			if oerr != nil {
				err = oerr
				return
			}
			defer func() {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}()
			for i, off := range []int64{5000, 10000, 299990, 123456} {
				if _, err = f.WriteAt(bytes.Repeat([]byte{byte(0xA0 + i)}, 100+i*1000), off); err != nil {
					return
				}
			}
		})
		return err
	}
	if err := edit(filepath.Join(mnt, "w")); err != nil {
		t.Fatalf("writing through the mount: %v", err)
	}
	if err := edit(filepath.Join(src, "ref")); err != nil {
		t.Fatalf("writing on SOURCE: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(src, "w"))
	want, _ := os.ReadFile(filepath.Join(src, "ref"))
	sameBytes(t, "write-only file written in part through the mount", got, want)
	var rerr error
	runAs(1001, func() { _, rerr = os.ReadFile(filepath.Join(mnt, "w")) })
	if !errors.Is(rerr, syscall.EACCES) {
		t.Errorf("its owner read the write-only file through the mount: %v, want EACCES", rerr)
	}
}

// writeLimited writes data to f in the mount in writes of bs as uid 1002,
// of group t, checks that SOURCE then holds it, and returns how long the
// writes and the close took and t's counters.
func writeLimited(t *testing.T, f *FS, src, mnt string, data []byte, bs int) (time.Duration, stack.GroupMetrics) {
	t.Helper()
	start := time.Now()
	if err := writeSmall(t, 1002, filepath.Join(mnt, "f"), data, bs); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	got, _ := os.ReadFile(filepath.Join(src, "f"))
	sameBytes(t, "SOURCE after close", got, data)
	return took, groupMetrics(t, f, "t")
}

// TestWriteCacheLimitedPaced: with the write cache, a group with a write
// limit below the rule's (writesCached) still writes through direct I/O,
// even in CacheKernel mode: each write() reaches sluice and waits for its
// budget, so 4 MiB at wbps=4MiB take about a second.
func TestWriteCacheLimitedPaced(t *testing.T) {
	const size, bs = 4 << 20, 64 << 10
	rules := []group.Rule{{Group: "t", UID: new(uint32(1002))}}
	src, mnt, f := mount(t, Options{AllowOther: true, WriteCache: true, CacheMode: CacheKernel, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t wbps=4MiB")}})
	os.Chmod(src, 0o777)
	data := writeRandom(t, filepath.Join(t.TempDir(), "want"), size, 13)
	took, m := writeLimited(t, f, src, mnt, data, bs)
	rate := float64(size) / took.Seconds() / (4 << 20)
	t.Logf("4 MiB in 64 KiB writes at wbps=4MiB: %v (%.3f of the limit), %d writes reached sluice, throttled %v",
		took, rate, m.AppWrites, time.Duration(m.WThrottledNs))
	if m.AppWrites != size/bs {
		t.Errorf("%d writes reached sluice for %d write() calls, want one each (paced at write())", m.AppWrites, size/bs)
	}
	if rate > 1.1 {
		t.Errorf("the limited writer wrote at %.2f of its limit, want at most 1.1", rate)
	}
}

// TestWriteCacheDurable: with the write cache, fsync puts what was written
// in the backing file before it returns, with the file still open; and a
// backing file system that fills up fails the writer's fsync or close
// with ENOSPC, never all of them in silence.
func TestWriteCacheDurable(t *testing.T) {
	root := loopFS(t, 8<<20, "-m", "0")
	os.Chmod(root, 0o777)
	_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, WriteCache: true})
	data := writeRandom(t, filepath.Join(t.TempDir(), "want"), 1<<20, 14)
	var err error
	var got []byte
	runAs(1001, func() {
		var f *os.File
		if f, err = os.Create(filepath.Join(mnt, "synced")); err != nil {
			return
		}
		defer f.Close()
		for off := 0; off < len(data) && err == nil; off += 4096 {
			_, err = f.Write(data[off : off+4096])
		}
		if err == nil {
			err = f.Sync()
		}
		got, _ = os.ReadFile(filepath.Join(root, "synced"))
	})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "SOURCE after fsync, file still open", got, data)

	var werr, serr, cerr error
	var written int
	runAs(1001, func() {
		f, err := os.Create(filepath.Join(mnt, "fill"))
		if err != nil {
			werr = err
			return
		}
		buf := make([]byte, 64<<10)
		for written < 16<<20 {
			var n int
			if n, werr = f.Write(buf); werr != nil {
				break
			}
			written += n
		}
		serr = f.Sync()
		cerr = f.Close()
	})
	t.Logf("16 MiB into 8 MiB through the write cache: %d bytes taken by write(), then write %v, fsync %v, close %v", written, werr, serr, cerr)
	if !errors.Is(werr, syscall.ENOSPC) && !errors.Is(serr, syscall.ENOSPC) {
		t.Errorf("neither write() nor fsync reported ENOSPC on a full backing file system (close: %v)", cerr)
	}
}

// TestWriteCacheSharedFile: an unlimited writer's cached pages that the
// kernel writes back through a limited group's later open of the same file
// (the open for writing made last) are counted to the unlimited writer's
// group, not charged to the limited one.
func TestWriteCacheSharedFile(t *testing.T) {
	rules := []group.Rule{{Group: "t", UID: new(uint32(1002))}}
	src, mnt, f := mount(t, Options{AllowOther: true, WriteCache: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t wbps=1MiB")}})
	path := filepath.Join(src, "shared")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o666)
	data := writeRandom(t, filepath.Join(t.TempDir(), "want"), 1<<20, 15)
	var err error
	runAs(1001, func() {
		var w *os.File
		if w, err = os.OpenFile(filepath.Join(mnt, "shared"), os.O_WRONLY, 0); err != nil {
			return
		}
		// The limited group opens the file for writing after it.
		var other *os.File
		runAs(1002, func() { other, err = os.OpenFile(filepath.Join(mnt, "shared"), os.O_WRONLY, 0) })
		if err != nil {
			w.Close()
			return
		}
		defer other.Close()
		for off := 0; off < len(data) && err == nil; off += 4096 {
			_, err = w.Write(data[off : off+4096])
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	sameBytes(t, "SOURCE after close", got, data)
	d, lim := groupMetrics(t, f, "default"), groupMetrics(t, f, "t")
	t.Logf("default: %d bytes written; t: %d bytes written, %d by the kernel's writeback", d.AppWBytes, lim.AppWBytes, lim.WritebackBytes)
	if d.AppWBytes < int64(len(data)) || lim.AppWBytes != 0 {
		t.Errorf("the unlimited writer's 1 MiB was counted %d bytes to its group and %d to the limited group that opened the file after it; want all to its own", d.AppWBytes, lim.AppWBytes)
	}
}

// TestWriteCacheReserved: a user's pages that the kernel writes back
// through root's open of the same file do not take the blocks the backing
// file system keeps for root, as the user's own writes to SOURCE do not.
func TestWriteCacheReserved(t *testing.T) {
	root := loopFS(t, 16<<20, "-m", "50")
	os.Chmod(root, 0o777)
	_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, WriteCache: true})
	data := make([]byte, 10<<20)
	// On SOURCE directly the user runs out of room.
	direct := writeSmall(t, 1001, filepath.Join(root, "direct"), data, 1<<20)
	os.Remove(filepath.Join(root, "direct"))
	if !errors.Is(direct, syscall.ENOSPC) {
		t.Skipf("writing 10 MiB as uid 1001 on SOURCE gave %v, not ENOSPC: the reserve does not bind here", direct)
	}
	var w *os.File
	var err error
	runAs(1001, func() { w, err = os.OpenFile(filepath.Join(mnt, "big"), os.O_WRONLY|os.O_CREATE, 0o666) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Root opens the file for writing after the user: the kernel's
	// writeback goes through root's open.
	r, err := os.OpenFile(filepath.Join(mnt, "big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runAs(1001, func() {
		for off := 0; off < len(data) && err == nil; off += 1 << 20 {
			_, err = w.Write(data[off : off+1<<20])
		}
		if err == nil {
			err = w.Sync()
		}
	})
	t.Logf("10 MiB on a file system of 16 MiB, half of it kept for root: on SOURCE %v; through the mount, via root's open, %v", direct, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("the user's 10 MiB written back through root's open: %v, want ENOSPC as on SOURCE", err)
	}
}

// TestWriteCacheLimitedCached: with the write cache in CacheKernel mode, a
// group whose write limit writes back the mount's dirty bound within
// stack.WriteCacheDrain writes into the kernel's cache: its 4 KiB
// write()s reach sluice as a few large writes, and its writeback is
// paced, so the kernel holds the writer at the limit over the run, close
// included. The least bound the rule assumes (64 MiB, so 640 MiB/s) is
// lowered to the mount's 1 MiB here, so that wbps=16MiB qualifies and
// binds.
func TestWriteCacheLimitedCached(t *testing.T) {
	const size, bs, bps = 32 << 20, 4096, 16 << 20
	defer func(b int64) { stack.MinDrainBytes = b }(stack.MinDrainBytes)
	stack.MinDrainBytes = 1 << 20
	rules := []group.Rule{{Group: "t", UID: new(uint32(1002))}}
	src, mnt, f := mount(t, Options{AllowOther: true, WriteCache: true, MapDirty: 1 << 20, CacheMode: CacheKernel,
		Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=16MiB")}})
	os.Chmod(src, 0o777)
	if d := f.dirty.Load(); d <= 0 || d > 1<<20 {
		t.Skipf("the mount's dirty bound is %d, not about the 1 MiB asked (kernel before 6.2?)", d)
	}
	data := writeRandom(t, filepath.Join(t.TempDir(), "want"), size, 16)
	took, m := writeLimited(t, f, src, mnt, data, bs)
	rate := float64(size) / took.Seconds() / bps
	t.Logf("32 MiB in 4 KiB writes at wbps=16MiB through the cache: %v (%.3f of the limit), %d writes reached sluice, throttled %v",
		took, rate, m.AppWrites, time.Duration(m.WThrottledNs))
	if m.AppWrites > size/bs/8 {
		t.Errorf("%d writes reached sluice for %d write() calls, want at most %d (through the cache)", m.AppWrites, size/bs, size/bs/8)
	}
	if rate < 0.9 || rate > 1.1 {
		t.Errorf("the writer wrote at %.3f of its limit, want 0.9 to 1.1", rate)
	}

	// While the limited writer holds the mount's dirty bound, the kernel
	// slows the mount's other cached writers toward its rate, not far below.
	errc := make(chan error, 1)
	waited := m.WThrottledNs
	go func() { errc <- writeSmall(t, 1002, filepath.Join(mnt, "f"), data, bs) }()
	// Once its writeback waits, the limited writer has filled the bound.
	for deadline := time.Now().Add(10 * time.Second); groupMetrics(t, f, "t").WThrottledNs == waited; {
		if time.Now().After(deadline) {
			t.Fatal("the limited writer's writeback never waited")
		}
		time.Sleep(time.Millisecond)
	}
	other := data[:8<<20]
	start := time.Now()
	if err := writeSmall(t, 1001, filepath.Join(mnt, "other"), other, bs); err != nil {
		t.Fatal(err)
	}
	beside := float64(len(other)) / time.Since(start).Seconds() / bps
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Logf("an unlimited writer beside it: 8 MiB at %.3f of the limited group's rate", beside)
	if beside < 0.5 {
		t.Errorf("an unlimited writer beside the limited one wrote at %.3f of the limited group's rate, want at least 0.5", beside)
	}
}

// TestWriteCacheRule: which limited groups' write()s the write cache takes
// with the default 64 MiB bound: in CacheKernel mode those whose limits
// write it back within stack.WriteCacheDrain, none below 640 MiB/s even with a
// smaller bound; in CacheAuto mode none.
func TestWriteCacheRule(t *testing.T) {
	for _, c := range []struct {
		mode  CacheMode
		dirty int64
	}{{CacheKernel, 64 << 20}, {CacheKernel, 1 << 20}, {CacheAuto, 64 << 20}} {
		_, _, f := mount(t, Options{WriteCache: true, MapDirty: c.dirty, CacheMode: c.mode,
			Limits: []group.LimitSpec{limit(t, "a wbps=640MiB"), limit(t, "b wbps=639MiB"),
				limit(t, "c wiops=5120"), limit(t, "d wiops=5119"), limit(t, "e rbps=1GiB"), limit(t, "f wbps=10GiB wiops=100000")}})
		for name, want := range map[string]bool{"a": true, "b": false, "c": true, "d": false, "e": true, "f": true} {
			want = want && c.mode == CacheKernel
			if got := stack.ServeOpen(f.openOf(f.group(name), syscall.O_WRONLY, &backing.File{})).CachedWrites; got != want {
				t.Errorf("mode %d, bound %d (in force %d): group %s: writes cached %v, want %v", c.mode, c.dirty, f.dirty.Load(), name, got, want)
			}
		}
	}
}
