package fsys

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// readBlocksAs reads path whole as uid in reads of bs bytes.
func readBlocksAs(t *testing.T, uid int, path string, bs int) []byte {
	t.Helper()
	var out bytes.Buffer
	readAllAsBy(t, uid, path, bs, &out)
	return out.Bytes()
}

// dropBacking writes path back and drops its pages from the page cache,
// and reports how many stay.
func dropBacking(t *testing.T, path string) uint64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return pagesCached(t, path)
}

// TestColdRead: an unlimited reader of a file that is not in the backing
// file's page cache, reading 1 MiB at a time as a second uid, is served
// past that cache (O_DIRECT) and reads what it reads on the backing
// directory, to the last short page; the backing file's cache stays
// empty. A range dirty in the backing file's cache, written there by
// another process, is read from the cache as it stands.
func TestColdRead(t *testing.T) {
	src, mnt, f := mount(t, Options{})
	os.Chmod(src, 0o755)
	const size = 3<<20 + 123
	want := writeRandom(t, filepath.Join(src, "f"), size, 11)
	if left := dropBacking(t, filepath.Join(src, "f")); left != 0 {
		t.Skipf("%d pages of the backing file stay cached after FADV_DONTNEED (a file system held in memory): nothing to read past", left)
	}
	direct := readBlocksAs(t, 1001, filepath.Join(src, "f"), 1<<20)
	if !bytes.Equal(direct, want) {
		t.Fatalf("uid 1001 read %d bytes of the backing file, not what was written", len(direct))
	}
	dropBacking(t, filepath.Join(src, "f"))

	got := readBlocksAs(t, 1001, filepath.Join(mnt, "f"), 1<<20)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes through the mount; the backing directory gives %d, and they differ", len(got), len(want))
	}
	cold := f.coldReads.Load()
	if cold == 0 {
		t.Errorf("no read went past the backing file's page cache")
	}
	if left := pagesCached(t, filepath.Join(src, "f")); left > 0 {
		t.Errorf("%d pages of the backing file cached after a read past its cache", left)
	}

	// Another process writes the middle MiB on the backing directory and
	// leaves it dirty there.
	fresh := make([]byte, 1<<20)
	for i := range fresh {
		fresh[i] = byte(i*7 + 1)
	}
	w, err := os.OpenFile(filepath.Join(src, "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(fresh, 1<<20); err != nil {
		t.Fatal(err)
	}
	w.Close()
	copy(want[1<<20:], fresh)
	got = readBlocksAs(t, 1001, filepath.Join(mnt, "f"), 1<<20)
	if !bytes.Equal(got, want) {
		t.Fatalf("after a write on the backing directory the mount reads %d bytes that differ from the file's", len(got))
	}
	t.Logf("%d reads past the backing cache in the first pass, %d in the second", cold, f.coldReads.Load()-cold)
}

// pagesCached is how many pages of path are in the page cache; the test
// skips on a kernel without cachestat, where no read goes past it.
func pagesCached(t *testing.T, path string) uint64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Skipf("cachestat: %v (kernel before 6.5): no read goes past the backing cache", err)
	}
	return st.Cache
}
