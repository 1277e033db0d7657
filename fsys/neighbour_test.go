package fsys

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// TestNeighbourStall: a limited tenant that keeps 128 asynchronous direct
// reads queued in its throttle does not slow an unlimited tenant reading
// a file from SOURCE's disk. The kernel's slots for background requests
// (asynchronous direct I/O and every tenant's readahead) are shared by the
// mount: held throttled reads must leave them free. The unlimited reader
// must take at most twice its time alone.
func TestNeighbourStall(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	rules := []group.Rule{{Group: "lim", UID: new(uint32(4101))}}
	src, mnt, _ := mount(t, Options{AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "lim rbps=64KiB")}})
	for _, d := range []string{"lim", "free"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeRandom(t, filepath.Join(src, "lim", "f"), 16<<20, 1)
	writeRandom(t, filepath.Join(src, "free", "f"), 64<<20, 2)
	os.Chown(filepath.Join(src, "lim"), 4101, 4101)
	os.Chown(filepath.Join(src, "lim", "f"), 4101, 4101)

	// read reads the unlimited tenant's file through the mount as uid
	// 4102, its pages dropped from SOURCE's cache first, and returns the
	// time it took.
	read := func() time.Duration {
		t.Helper()
		// From the mount's page cache and SOURCE's both.
		dropCache(t, filepath.Join(mnt, "free", "f"))
		dropCache(t, filepath.Join(src, "free", "f"))
		var took time.Duration
		var err error
		if e := runAsGroups(4102, 4102, nil, func() {
			var f *os.File
			start := time.Now()
			if f, err = os.Open(filepath.Join(mnt, "free", "f")); err != nil {
				return
			}
			defer f.Close()
			var n int64
			if n, err = io.Copy(io.Discard, f); err == nil && n != 64<<20 {
				err = io.ErrUnexpectedEOF
			}
			took = time.Since(start)
		}); e != nil {
			t.Fatal(e)
		}
		if err != nil {
			t.Fatal(err)
		}
		return took
	}
	// The median of three, alone and beside the limited tenant.
	median := func() time.Duration {
		var d [3]time.Duration
		for i := range d {
			d[i] = read()
		}
		return min(max(d[0], d[1]), max(d[0], d[2]), max(d[1], d[2]))
	}
	alone := median()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fio := exec.CommandContext(ctx, "fio", "--name=lim", "--filename="+filepath.Join(mnt, "lim", "f"),
		"--thread", "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=128",
		"--time_based", "--runtime=60", "--size=16M", "--output-format=terse")
	fio.Dir = t.TempDir()
	os.Chmod(fio.Dir, 0o777)
	fio.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4101}}
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	defer fio.Wait()
	defer cancel()
	// Until the limited tenant's reads are queued: its burst is spent in
	// a moment, then each 4 KiB read waits 1/16 s behind the others. (The
	// kernel's count of waiting requests stops at the connection's
	// background slots, 64 once, and the submitter then waits for one.)
	waitQueued(t, mnt, 60, 10*time.Second)
	beside := median()
	t.Logf("64 MiB read by an unlimited tenant: %v alone, %v beside a tenant with 128 throttled reads queued (%.2fx)",
		alone, beside, float64(beside)/float64(alone))
	if beside > 2*alone {
		t.Errorf("the unlimited tenant took %v beside the limited one, %.1fx its %v alone; want at most 2x",
			beside, float64(beside)/float64(alone), alone)
	}
}

// dropCache drops path's pages from the page cache, so that the next read
// goes to the disk.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// waitQueued waits until the mount's FUSE connection has at least n
// background requests outstanding, as its control directory tells.
func waitQueued(t *testing.T, mnt string, n int, within time.Duration) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, "..", "connections")); err == nil {
		// Mounted where it is not yet; EBUSY when it is.
		unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	dir := filepath.Join(ctl, strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10))
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "waiting"))
		if err != nil {
			t.Skipf("skipping: no FUSE control file system to tell queued requests: %v", err)
		}
		w, _ := strconv.Atoi(string(b[:len(b)-1]))
		if w >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the limited tenant has %d requests waiting after %v, want %d", w, within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
