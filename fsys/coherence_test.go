package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
	"sluice/internal/loopfs"
)

// coherenceMount mounts with uid 4101 in group "slow", which has a read and
// write limit; root stays unlimited.
func coherenceMount(t *testing.T) (src, mnt string, f *FS) {
	t.Helper()
	return mount(t, Options{AllowOther: true,
		Rules:  []group.Rule{{Group: "slow", UID: new(uint32(4101))}},
		Limits: []group.LimitSpec{limit(t, "slow rbps=100MiB wbps=100MiB")}})
}

// readAs opens and reads path whole as uid 4101 (the limited group).
func readAs(t *testing.T, path string) []byte {
	t.Helper()
	var b []byte
	var err error
	asUser(t, u4101, func() { b, err = os.ReadFile(path) })
	if err != nil {
		t.Fatalf("reading %s as uid 4101: %v", path, err)
	}
	return b
}

// sameBytes fails with where got and want first differ.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: read %d bytes, SOURCE has %d; first difference at byte %d", what, len(got), len(want), i)
}

// sourceWrite writes b at off directly in SOURCE, as root.
func sourceWrite(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestCoherenceSourceChange: after root changes a file directly in SOURCE
// (same size, grown, shrunk), the next open and read by a limited reader
// through the mount sees the new bytes.
func TestCoherenceSourceChange(t *testing.T) {
	src, mnt, _ := coherenceMount(t)
	sp, mp := filepath.Join(src, "f"), filepath.Join(mnt, "f")
	writeRandom(t, sp, 1<<20+333, 21)
	src0, _ := os.ReadFile(sp)
	sameBytes(t, "first read", readAs(t, mp), src0)

	sourceWrite(t, sp, bytes.Repeat([]byte{0x5A}, 5000), 300000)
	want, _ := os.ReadFile(sp)
	sameBytes(t, "after an overwrite in SOURCE (same size)", readAs(t, mp), want)

	sourceWrite(t, sp, bytes.Repeat([]byte{0xC3}, 70000), int64(len(want)))
	want, _ = os.ReadFile(sp)
	sameBytes(t, "after SOURCE grew by 70000 bytes", readAs(t, mp), want)

	if err := os.Truncate(sp, 500000); err != nil {
		t.Fatal(err)
	}
	sourceWrite(t, sp, bytes.Repeat([]byte{0x3C}, 1000), 499000)
	want, _ = os.ReadFile(sp)
	sameBytes(t, "after SOURCE shrank to 500000 bytes", readAs(t, mp), want)
}

// TestCoherenceKernelCacheKept: a file read whole through the kernel's page
// cache and opened again unchanged is served from that cache, no read
// reaching sluice, both for a group without a limit (uid 4102) and for a
// limited one whose limit is high enough for the page cache (uid 4101,
// rbps=100MiB); once it has changed in SOURCE, the next open reads it from
// sluice again and sees the new bytes.
func TestCoherenceKernelCacheKept(t *testing.T) {
	src, mnt, f := coherenceMount(t)
	os.Chmod(src, 0o755)
	for _, c := range []struct {
		name  string
		who   ucred
		group string
	}{{"unlimited", u4102, "default"}, {"limited", u4101, "slow"}} {
		t.Run(c.name, func(t *testing.T) {
			sp, mp := filepath.Join(src, c.name), filepath.Join(mnt, c.name)
			want := writeRandom(t, sp, 4<<20, 29)
			os.Chmod(sp, 0o644)
			// read opens and reads the file whole as c.who and returns
			// how many reads reached sluice.
			read := func(what string) int64 {
				t.Helper()
				before := groupMetrics(t, f, c.group).AppReads
				var b []byte
				var err error
				asUser(t, c.who, func() { b, err = os.ReadFile(mp) })
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				sameBytes(t, what, b, want)
				return groupMetrics(t, f, c.group).AppReads - before
			}
			// By passthrough, the kernel reads SOURCE itself: no read
			// reaches sluice, and only the bytes can be checked.
			passed := *passthroughAll && c.group == "default"
			if n := read("first read"); n == 0 && !passed {
				t.Fatalf("the first read of %s reached sluice with no read: the count cannot tell", mp)
			}
			if n := read("read again, unchanged"); n != 0 {
				t.Errorf("reading %s again unchanged sent %d reads to sluice, want none (the kernel's cache kept)", mp, n)
			}
			sourceWrite(t, sp, bytes.Repeat([]byte{0xA5}, 8192), 1<<20)
			want, _ = os.ReadFile(sp)
			if n := read("read after a change in SOURCE"); n == 0 && !passed {
				t.Errorf("after %s changed in SOURCE, reading it sent no read to sluice", sp)
			}
		})
	}
}

// loopExt4 makes an ext4 file system of 8 MiB with the given number of
// inodes in a file, mounts it on a loop device and returns its root. It is
// unmounted when the test ends, after what later cleanups undo (a FUSE
// mount of a directory on it). Skips when loop mounting is not possible.
func loopExt4(t *testing.T, inodes int) string {
	t.Helper()
	return loopFS(t, 8<<20, "-N", strconv.Itoa(inodes))
}

// loopFS makes an ext4 image of size bytes with mkfs.ext4 args, mounts it
// on a loop device and returns where; it is unmounted when the test ends.
func loopFS(t *testing.T, size int64, args ...string) string {
	t.Helper()
	return loopfs.Ext4(t, size, loopfs.Options{Mkfs: args})
}

// heldFDs counts this process's descriptors of path (also once deleted):
// O_PATH ones, which only reach the file, and open ones.
func heldFDs(path string) (opath, open int) {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if l != path && l != path+" (deleted)" {
			continue
		}
		info, _ := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				if flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64); err == nil && flags&unix.O_PATH != 0 {
					opath++
				} else {
					open++
				}
			}
		}
	}
	return opath, open
}

// TestCoherenceInodeReuse: a file that replaces a deleted one in SOURCE and
// gets its inode number is read through the mount with its own bytes,
// never the deleted file's, even while the kernel still holds the deleted
// file's FUSE inode; and a descriptor opened through the mount before the
// deletion goes on reading the deleted file's bytes, as on SOURCE.
//
// SOURCE is a small ext4 file system on a loop device, which hands a
// freed inode number to the next file created.
func TestCoherenceInodeReuse(t *testing.T) {
	needFUSE(t)
	src := filepath.Join(loopExt4(t, 64), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// sluice keeps at most maxOpen descriptors of objects not in use; more
	// lookups than that of other files make it close the deleted file's.
	const maxOpen = 16
	const others = maxOpen + 8
	for i := 0; i < others; i++ {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("c%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, mnt, _ := mount(t, Options{AllowOther: true, Source: src, MaxOpen: maxOpen,
		Rules:  []group.Rule{{Group: "slow", UID: new(uint32(4101))}},
		Limits: []group.LimitSpec{limit(t, "slow rbps=100MiB wbps=100MiB")}})
	inode := func(path string) uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	newBytes := bytes.Repeat([]byte("new file "), (256<<10)/9+1)[:256<<10]

	// An open file keeps its inode: a descriptor opened through the mount
	// before the file is deleted in SOURCE reads the deleted file's bytes,
	// and the number is not handed out again meanwhile.
	bsp, bmp := filepath.Join(src, "b"), filepath.Join(mnt, "b")
	oldB := writeRandom(t, bsp, 256<<10, 32)
	var bf *os.File
	var err error
	asUser(t, u4101, func() { bf, err = os.Open(bmp) })
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	preadAs := func() []byte {
		t.Helper()
		b := make([]byte, len(oldB)+1)
		var n int
		asUser(t, u4101, func() { n, err = bf.ReadAt(b, 0) })
		if err != nil && err != io.EOF {
			t.Fatalf("pread of b as uid 4101: %v", err)
		}
		return b[:n]
	}
	sameBytes(t, "first read of b", preadAs(), oldB)
	inoB := inode(bsp)
	if err := os.Remove(bsp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bsp, newBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	if ino := inode(bsp); ino == inoB {
		t.Errorf("a file created in SOURCE took inode %d of b, deleted but open through the mount: sluice does not keep the open file open in SOURCE", ino)
	}
	sameBytes(t, "pread through a descriptor opened before b was deleted in SOURCE", preadAs(), oldB)
	bf.Close()

	// The deleted file's FUSE inode stays in the kernel while a descriptor
	// holds it, and with it sluice's object for it (its file handle).
	sp, mp := filepath.Join(src, "a"), filepath.Join(mnt, "a")
	old := writeRandom(t, sp, 256<<10, 31)
	sameBytes(t, "first read of a", readAs(t, mp), old)
	// Root has no limit: its reads go through the kernel's page cache of
	// the FUSE inode.
	if b, err := os.ReadFile(mp); err != nil {
		t.Fatal(err)
	} else {
		sameBytes(t, "first read of a by root", b, old)
	}
	// The server is this process. Wait for the kernel's asynchronous
	// releases of the reads' opens: an object in use when the lookups
	// below run would join sluice's descriptor cache afterwards, as its
	// newest entry, and stay there.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, n := heldFDs(sp); n == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("5s after the reads of a through the mount closed, sluice still holds %d open descriptors of it", n)
		}
	}
	time.Sleep(50 * time.Millisecond) // the object's release follows the descriptor's close
	oldFd, err := unix.Open(mp, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(oldFd)
	ino := inode(sp)
	if err := os.Remove(sp); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < others; i++ {
		if _, err := os.Lstat(filepath.Join(mnt, fmt.Sprintf("c%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if opath, open := heldFDs(sp); opath+open > 0 {
		t.Fatalf("after lookups of %d other files through the mount (MaxOpen %d), sluice still holds %d O_PATH and %d open descriptors of a, deleted in SOURCE: its inode cannot be reused", others, maxOpen, opath, open)
	}
	var np string
	for i := 0; i < 8 && np == ""; i++ {
		p := filepath.Join(src, fmt.Sprintf("new%d", i))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if inode(p) == ino {
			np = p
		}
	}
	if np == "" {
		t.Fatalf("SOURCE's ext4 did not hand inode %d of the deleted a to any of 8 new files, though nothing holds it", ino)
	}
	// Same size, other bytes: only the contents can tell the files apart.
	sourceWrite(t, np, newBytes, 0)
	nmp := filepath.Join(mnt, filepath.Base(np))
	got := readAs(t, nmp)
	if bytes.Equal(got, old) {
		t.Fatalf("a new file with the inode number (%d) of a deleted one, whose FUSE inode the kernel still holds, read through the mount as the deleted file's bytes", ino)
	}
	sameBytes(t, fmt.Sprintf("new file %s reusing inode %d of the deleted a", filepath.Base(np), ino), got, newBytes)
	if got, err = os.ReadFile(nmp); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, old) {
		t.Fatalf("a new file with the inode number (%d) of a deleted one, whose FUSE inode the kernel still holds, read through the mount by root as the deleted file's bytes", ino)
	}
	sameBytes(t, fmt.Sprintf("root's read of new file %s reusing inode %d of the deleted a", filepath.Base(np), ino), got, newBytes)

	// The deleted file's FUSE inode must not have become the new file.
	var f *os.File
	asUser(t, u4101, func() { f, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", oldFd)) })
	if err == nil {
		var b []byte
		asUser(t, u4101, func() { b, err = io.ReadAll(f) })
		f.Close()
		if err == nil && bytes.Equal(b, newBytes) {
			t.Errorf("the deleted a, reopened through a descriptor of the mount taken before its deletion, reads as the new file that reused its inode number %d", ino)
		}
	}
	t.Logf("reopening the deleted a through the mount: %v", err)

	// The new file under the deleted one's name, once the kernel's entry
	// for the name has expired.
	if err := os.Rename(np, sp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 500*time.Millisecond)
	got = readAs(t, mp)
	if bytes.Equal(got, old) {
		t.Fatalf("a new file named a with the inode number (%d) of the deleted a read through the mount as the deleted file's bytes", ino)
	}
	sameBytes(t, fmt.Sprintf("new file a reusing inode %d", ino), got, newBytes)
}

// TestCoherenceWriteThenPread: once a limited writer's write() has returned,
// an unlimited reader's next pread on a descriptor it had open and had
// read through the kernel's page cache returns the new bytes.
func TestCoherenceWriteThenPread(t *testing.T) {
	src, mnt, _ := coherenceMount(t)
	sp, mp := filepath.Join(src, "f"), filepath.Join(mnt, "f")
	want := writeRandom(t, sp, 1<<20, 41)
	if err := os.Chmod(sp, 0o666); err != nil {
		t.Fatal(err)
	}
	rf, err := os.Open(mp)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	got := make([]byte, len(want))
	if _, err := rf.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "unlimited reader's first read", got, want)

	var wf *os.File
	asUser(t, u4101, func() { wf, err = os.OpenFile(mp, os.O_WRONLY, 0) })
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	for i := 0; i < 64; i++ {
		off := int64(i*16384 + (i%3)*1000)
		patch := bytes.Repeat([]byte{byte(i + 1)}, 3000+i*37)
		var werr error
		asUser(t, u4101, func() { _, werr = wf.WriteAt(patch, off) })
		if werr != nil {
			t.Fatal(werr)
		}
		copy(want[off:], patch)
		// Whole pages around the write, as the page cache holds them.
		lo, hi := off&^4095, min((off+int64(len(patch))+4095)&^4095, int64(len(want)))
		buf := make([]byte, hi-lo)
		n, err := rf.ReadAt(buf, lo)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:n], want[lo:hi]) {
			t.Fatalf("write %d (%d bytes at %d) by the limited uid 4101 had returned, yet the unlimited reader's pread of [%d, %d) returned stale bytes", i, len(patch), off, lo, hi)
		}
	}
}

// fallocate modes the kernel's FUSE client may not pass on.
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocCollapse  = 0x08
	fallocZeroRange = 0x10
	fallocInsert    = 0x20
)

// TestCoherenceFallocate: after fallocate through the mount (collapse,
// insert, punch, zero, extend), a limited reader that had read the file
// reads what SOURCE has.
func TestCoherenceFallocate(t *testing.T) {
	src, mnt, _ := coherenceMount(t)
	for _, tc := range []struct {
		name      string
		mode      uint32
		off, size int64
	}{
		{"collapse range", fallocCollapse, 64 << 10, 64 << 10},
		{"insert range", fallocInsert, 64 << 10, 64 << 10},
		{"punch hole", fallocPunchHole | fallocKeepSize, 40 << 10, 100 << 10},
		{"zero range", fallocZeroRange, 40 << 10, 100 << 10},
		{"zero range past the end", fallocZeroRange, 1<<20 - 8192, 64 << 10},
		{"allocate past the end", 0, 1 << 20, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("f%x-%d", tc.mode, tc.off)
			sp, mp := filepath.Join(src, name), filepath.Join(mnt, name)
			want := writeRandom(t, sp, 1<<20, 51)
			os.Chmod(sp, 0o666)
			sameBytes(t, "first read", readAs(t, mp), want)

			// Does SOURCE's file system do it at all?
			probe := filepath.Join(src, name+".probe")
			writeRandom(t, probe, 1<<20, 52)
			pf, err := os.OpenFile(probe, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			perr := unix.Fallocate(int(pf.Fd()), tc.mode, tc.off, tc.size)
			pf.Close()
			os.Remove(probe)
			if errors.Is(perr, syscall.EOPNOTSUPP) {
				t.Skipf("skipping: SOURCE's file system does not support this fallocate mode: %v", perr)
			}
			if perr != nil {
				t.Fatalf("fallocate on SOURCE: %v", perr)
			}

			var ferr error
			asUser(t, u4101, func() {
				f, err := os.OpenFile(mp, os.O_RDWR, 0)
				if err != nil {
					ferr = err
					return
				}
				defer f.Close()
				ferr = unix.Fallocate(int(f.Fd()), tc.mode, tc.off, tc.size)
			})
			if errors.Is(ferr, syscall.EOPNOTSUPP) && tc.mode&(fallocCollapse|fallocInsert) != 0 {
				t.Skipf("skipping: the kernel's FUSE client does not pass this fallocate mode on: %v", ferr)
			}
			if ferr != nil {
				t.Fatalf("fallocate through the mount as uid 4101: %v (SOURCE takes it)", ferr)
			}
			now, _ := os.ReadFile(sp)
			sameBytes(t, "limited read after fallocate through the mount", readAs(t, mp), now)
		})
	}
}

// TestCoherenceGrowAfterShortRead: a limited reader that saw the file end
// in the middle of a page sees the whole file after root extends it in
// SOURCE, by a reopen and by preads inside and beyond the old end.
func TestCoherenceGrowAfterShortRead(t *testing.T) {
	src, mnt, _ := coherenceMount(t)
	sp, mp := filepath.Join(src, "f"), filepath.Join(mnt, "f")
	first := writeRandom(t, sp, 10000, 61)
	sameBytes(t, "first read", readAs(t, mp), first)
	sourceWrite(t, sp, bytes.Repeat([]byte{0x77}, 40000), 10000)
	want, _ := os.ReadFile(sp)
	sameBytes(t, "reopen and read after SOURCE grew from 10000 to 50000 bytes", readAs(t, mp), want)
	var res string
	asUser(t, u4101, func() {
		f, err := os.Open(mp)
		if err != nil {
			res = err.Error()
			return
		}
		defer f.Close()
		for _, off := range []int64{8192, 12288, 40960} {
			buf := make([]byte, 8192)
			n, err := f.ReadAt(buf, off)
			end := min(off+8192, int64(len(want)))
			if int64(n) != end-off || !bytes.Equal(buf[:n], want[off:end]) {
				res += fmt.Sprintf("pread of 8192 at %d: %d bytes (%v), want %d identical to SOURCE; ", off, n, err, end-off)
			}
		}
	})
	if res != "" {
		t.Errorf("after SOURCE grew from 10000 to 50000 bytes: %s", res)
	}
}
