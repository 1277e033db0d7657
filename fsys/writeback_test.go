package fsys

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// TestMmapWritebackNotQueued: pages a limited tenant writes through mmap
// reach sluice as the kernel's writeback, with no caller to pace. They are
// written at once, charged to the tenant's group as debt, so msync returns
// with the data in the backing file instead of holding the kernel's
// writeback (and every sync behind it) for 2 s at wbps=1MiB. (2 MiB is
// less than Options.MapDirty: the writer itself is not paced here, see
// TestMmapWriterPaced.)
func TestMmapWritebackNotQueued(t *testing.T) {
	const size = 2 << 20
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=1MiB")}})
	path := filepath.Join(src, "m")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, 1001, 1001)
	want := mmapPattern(size)
	// In a process of its own: a page fault on the mount blocks its thread
	// in the kernel, where the Go runtime cannot stop it for a collection,
	// and a collection would then stop the server that the fault waits on.
	out, err := helper("mmapwrite", "1:"+filepath.Join(mnt, "m")).CombinedOutput()
	if err != nil {
		t.Fatalf("mmap writer: %v: %s", err, out)
	}
	_, took := mmapTimes(t, string(out))
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
	t.Logf("msync of 2 MiB at wbps=1MiB took %v; writeback without a caller %d bytes, writes throttled %v",
		took, m.WritebackBytes, time.Duration(m.WThrottledNs))
	if m.WritebackBytes < size {
		t.Errorf("writeback without a caller counted %d bytes, want at least %d", m.WritebackBytes, size)
	}
	if m.WThrottledNs != 0 {
		t.Errorf("the kernel's writeback waited %v in the throttle; want it written at once", time.Duration(m.WThrottledNs))
	}
}

// TestWritesLeaveLittleDirty: what a limited tenant writes does not stay
// in the backing page cache for a later sync to wait on: sluice starts its
// writeback every 100 ms of the group's rate (at least 256 KiB), so after
// 4 MiB at wbps=8MiB no more than 800 KiB is left dirty by sluice's count,
// and the backing file holds the data.
func TestWritesLeaveLittleDirty(t *testing.T) {
	const size = 4 << 20
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=8MiB")}})
	os.Chmod(src, 0o777)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>13)
	}
	runAs(1001, func() {
		fh, err := os.OpenFile(filepath.Join(mnt, "w"), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer fh.Close()
		for off := 0; off < size; off += 64 << 10 {
			if _, err := fh.Write(want[off : off+64<<10]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	got, err := os.ReadFile(filepath.Join(src, "w"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("backing file: %d bytes, %v; want the %d written", len(got), err, size)
	}
	m := groupMetrics(t, f, "t")
	t.Logf("4 MiB at wbps=8MiB: writeback started early for %d bytes, %d left dirty, writers paused %v",
		m.WritebackEarly, m.Dirty, time.Duration(m.WThrottledNs))
	if threshold := int64(8<<20) / 10; m.Dirty > threshold || m.WritebackEarly < size-threshold {
		t.Errorf("left %d bytes dirty and started writeback of %d; want at most %d dirty", m.Dirty, m.WritebackEarly, threshold)
	}
	if m.WThrottledNs == 0 {
		t.Error("writers at 8 MiB/s writing 4 MiB at once were never paused")
	}
}

func mmapPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>12)
	}
	return b
}

// mmapWrite (helper process "mmapwrite", argument PASSES:PATH) writes
// mmapPattern over the whole file at PATH through a shared mapping PASSES
// times, 1 MiB at a time, as uid 1001, msyncs it and prints how long it
// all took and how long msync took.
func mmapWrite(arg string) int {
	passes, path, ok := numArg(arg)
	if !ok {
		return 2
	}
	runtime.LockOSThread()
	unix.Setfsuid(1001)
	unix.Setfsgid(1001)
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	m, err := unix.Mmap(int(fh.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap:", err)
		return 1
	}
	defer unix.Munmap(m)
	want := mmapPattern(len(m))
	start := time.Now()
	for range passes {
		for off := 0; off < len(m); off += 1 << 20 {
			copy(m[off:min(off+1<<20, len(m))], want[off:])
		}
	}
	synced := time.Now()
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		fmt.Println("msync:", err)
		return 1
	}
	fmt.Println(time.Since(start), time.Since(synced))
	return 0
}

// TestFsyncThroughMount: fsync and fdatasync of a file and fsync of a
// directory succeed through the mount for a limited tenant, and the file's
// bytes are in the backing file when they return.
func TestFsyncThroughMount(t *testing.T) {
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, _ := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=8MiB")}})
	os.Chmod(src, 0o777)
	want := mmapPattern(1 << 20)
	runAs(1001, func() {
		fh, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer fh.Close()
		if _, err := fh.Write(want); err != nil {
			t.Error(err)
		}
		if err := fh.Sync(); err != nil {
			t.Errorf("fsync: %v", err)
		}
		if err := unix.Fdatasync(int(fh.Fd())); err != nil {
			t.Errorf("fdatasync: %v", err)
		}
		d, err := os.Open(mnt)
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		if err := d.Sync(); err != nil {
			t.Errorf("fsync of the directory: %v", err)
		}
	})
	if got, err := os.ReadFile(filepath.Join(src, "f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("backing file after fsync: %d bytes, %v; want the %d written", len(got), err, len(want))
	}
}

// TestDirectOpenWrites: an O_DIRECT open through the mount opens the
// backing file O_DIRECT too, so a limited tenant's O_DIRECT writes bypass
// SOURCE's page cache as they would on SOURCE; each write() returns once
// its data is written, paced at the group's rate (measured over the run:
// the 1.75 MiB after the first write take 438 ms at wbps=4MiB).
func TestDirectOpenWrites(t *testing.T) {
	const size, chunk = 2 << 20, 256 << 10
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=4MiB")}})
	os.Chmod(src, 0o777)
	// A page-aligned buffer, as O_DIRECT wants.
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	want := mmapPattern(size)
	var took time.Duration
	var flags string
	var werr error
	runAs(1001, func() {
		fd, err := unix.Open(filepath.Join(mnt, "d"), unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT, 0o644)
		if err != nil {
			werr = err
			return
		}
		defer unix.Close(fd)
		flags = backingFlags(t, filepath.Join(src, "d"))
		var start time.Time
		for off := 0; off < size; off += chunk {
			copy(buf, want[off:])
			if n, err := unix.Pwrite(fd, buf, int64(off)); err != nil || n != chunk {
				werr = fmt.Errorf("pwrite at %d: %d, %v", off, n, err)
				return
			}
			if off == 0 {
				// The first write is paid from the idle group's credit:
				// the rate is measured over the writes after it.
				start = time.Now()
			}
		}
		took = time.Since(start)
	})
	if werr != nil {
		t.Fatal(werr)
	}
	rate := float64(size-chunk) / took.Seconds() / (4 << 20)
	resident := residentPages(t, filepath.Join(src, "d"))
	t.Logf("2 MiB of O_DIRECT writes at wbps=4MiB: %v (achieved/limit %.3f); backing descriptor flags %s; %d pages of the backing file in its page cache",
		took, rate, flags, resident)
	if !strings.Contains(flags, "O_DIRECT") {
		t.Errorf("the backing file of an O_DIRECT open is open with %s, want O_DIRECT", flags)
	}
	if rate > 1.05 {
		t.Errorf("O_DIRECT writes achieved %.3f of wbps=4MiB, want at most 1.05", rate)
	}
	if resident != 0 {
		t.Errorf("%d pages of the O_DIRECT written file are in SOURCE's page cache, want none", resident)
	}
	got, err := os.ReadFile(filepath.Join(src, "d"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("backing file after the O_DIRECT writes: %v, equal: %v", err, bytes.Equal(got, want))
	}
	if m := groupMetrics(t, f, "t"); m.WBytes != size {
		t.Errorf("group t wrote %d bytes to the device, want %d", m.WBytes, size)
	}
}

// backingFlags is the open flags, as names, of the descriptor this process
// (the server) holds open for writing on path.
func backingFlags(t *testing.T, path string) string {
	t.Helper()
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != path {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			v, ok := strings.CutPrefix(line, "flags:")
			if !ok {
				continue
			}
			fl, _ := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if fl&unix.O_ACCMODE == unix.O_RDONLY {
				continue
			}
			s := fmt.Sprintf("%#o", fl)
			if fl&unix.O_DIRECT != 0 {
				s += " (O_DIRECT)"
			}
			return s
		}
	}
	t.Fatalf("no descriptor open for writing on %s in this process", path)
	return ""
}

// residentPages is how many pages of the file at path are in the page
// cache (mincore of a mapping, which faults nothing in).
func residentPages(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestMmapWriterPaced: a limited tenant writing through a shared mapping
// is held near its group's limit though the kernel writes its pages back
// on its own: sluice writes them at once, and the writer waits for that
// debt when it faults the pages in again. 48 MiB written over a 16 MiB
// mapping at wbps=16MiB take about 2.75 s (the last 4 MiB, Options.MapDirty,
// run ahead); unpaced they take milliseconds. A sync meanwhile waits on no
// budget.
func TestMmapWriterPaced(t *testing.T) {
	const size, passes, rate = 16 << 20, 3, 16 << 20
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t wbps=16MiB")}})
	path := filepath.Join(src, "m")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, size)
	os.Chown(path, 1001, 1001)
	cmd := helper("mmapwrite", fmt.Sprintf("%d:%s", passes, filepath.Join(mnt, "m")))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	start := time.Now()
	syscall.Sync()
	synced := time.Since(start)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mmap writer: %v: %s", err, out.String())
	}
	took, _ := mmapTimes(t, out.String())
	achieved := float64(passes*size) / took.Seconds() / rate
	m := groupMetrics(t, f, "t")
	t.Logf("%d MiB through a mapping at wbps=16MiB: %v, achieved/limit %.3f; a sync during it took %v; "+
		"written back without a caller %d MiB, reads that waited for the debt %v",
		passes*size>>20, took, achieved, synced, m.WritebackBytes>>20, time.Duration(m.ThrottledNs))
	if achieved > 1.3 {
		t.Errorf("a writer through a mapping achieved %.3f of its limit, want at most 1.3", achieved)
	}
	if synced > time.Second {
		t.Errorf("a sync while a limited group wrote through a mapping took %v, want at most 1s", synced)
	}
	got, err := os.ReadFile(path)
	if want := mmapPattern(size); err != nil || !bytes.Equal(got, want) {
		t.Errorf("backing file after the mapped writes: %v, equal: %v", err, bytes.Equal(got, want))
	}
}

// mmapTimes parses what mmapWrite printed: how long it all took, and msync.
func mmapTimes(t *testing.T, out string) (all, msync time.Duration) {
	t.Helper()
	f := strings.Fields(out)
	if len(f) == 2 {
		var err1, err2 error
		all, err1 = time.ParseDuration(f[0])
		msync, err2 = time.ParseDuration(f[1])
		if err1 == nil && err2 == nil {
			return all, msync
		}
	}
	t.Fatalf("mmap writer printed %q", out)
	return 0, 0
}
