package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/group"
	"sluice/internal/treetest"
	"sluice/stack"
	"sluice/throttle"
)

// mirrorSet makes n mirror directories holding the same content, and a
// mount point, all reachable by other users: files seed0..seed3 (1 MiB
// each, the same bytes in every mirror), a directory pub writable by all,
// and a file only root may read.
func mirrorSet(t *testing.T, n int) (dirs []string, mnt string, seeds [][]byte) {
	t.Helper()
	dir, _, mnt := mountDirs(t)
	for i := range 4 {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(j*7 + i*13 + j>>12)
		}
		seeds = append(seeds, b)
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("m%d", i))
		if err := os.MkdirAll(filepath.Join(d, "pub"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
		os.Chmod(filepath.Join(d, "pub"), 0o777)
		for k, b := range seeds {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("seed%d", k)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "secret"), []byte("root only"), 0o600); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return dirs, mnt, seeds
}

func mirrorOpts(dirs []string, mnt, policy string, faults []*backing.Faults) Options {
	opts := Options{Mirrors: dirs, Mountpoint: mnt, ReadPolicy: policy, MirrorFaults: faults, AllowOther: true}
	opts.Options.Options = stack.DefaultOptions()
	// uid 1001 is limited, below its limit, and served with direct I/O:
	// its reads are the engine's device reads; root's go straight to the
	// backing files.
	opts.Rules = []group.Rule{{Group: "t", UID: ptr(uint32(1001))}}
	opts.Limits = []group.LimitSpec{{Group: "t", LimitChange: throttle.LimitChange{Keys: throttle.KeyRIOPS, To: throttle.Limits{RIOPS: 10_000_000}}}}
	opts.CacheMode = CacheDirect
	return opts
}

func ptr[T any](v T) *T { return &v }

// newFaults returns a fault injector per mirror, none injecting yet.
func newFaults(n int) []*backing.Faults {
	faults := make([]*backing.Faults, n)
	for i := range faults {
		faults[i] = &backing.Faults{}
	}
	return faults
}

// readWholeAs reads path whole as uid id, with O_DIRECT when direct (so each
// read reaches sluice), returning the bytes and the error.
func readWholeAs(id int, path string, direct bool) (got []byte, err error) {
	runAs(id, func() {
		flags := os.O_RDONLY
		if direct {
			flags |= syscall.O_DIRECT
		}
		var f *os.File
		if f, err = os.OpenFile(path, flags, 0); err != nil {
			return
		}
		defer f.Close()
		// Aligned, as O_DIRECT needs.
		raw := make([]byte, 64<<10+4096)
		off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
		buf := raw[off : off+64<<10]
		for {
			n, rerr := f.Read(buf)
			got = append(got, buf[:n]...)
			if rerr == io.EOF {
				return
			}
			if rerr != nil {
				err = rerr
				return
			}
		}
	})
	return got, err
}

// errnoOf is the errno inside err.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	errors.As(err, &e)
	return e
}

func stateOf(t *testing.T, f *FS) []string {
	t.Helper()
	var out []string
	for _, m := range f.Mirrors().Stats() {
		out = append(out, m.State)
	}
	return out
}

// TestMirrorMount serves two and three mirrors: what a second uid gets is
// what it gets from a mirror directly; writes reach every mirror; a mirror
// failing reads costs the application nothing; a mirror failing writes
// turns stale, is left alone, and stays stale over a restart; the last
// healthy mirror's failures are the application's.
func TestMirrorMount(t *testing.T) {
	needFUSE(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d mirrors", n), func(t *testing.T) {
			dirs, mnt, seeds := mirrorSet(t, n)
			faults := newFaults(n)
			opts := mirrorOpts(dirs, mnt, "roundrobin", faults)
			f, unmount := serve(t, opts)
			defer unmount()

			// Permissions as on a mirror itself.
			_, direct := readWholeAs(1001, filepath.Join(dirs[0], "secret"), false)
			_, through := readWholeAs(1001, filepath.Join(mnt, "secret"), false)
			if direct == nil || !errors.Is(through, errnoOf(direct)) {
				t.Errorf("uid 1001 reading a root-only file: %v through the mount, %v on the mirror", through, direct)
			}
			if _, err := os.Stat(filepath.Join(mnt, backing.StateFile)); !os.IsNotExist(err) {
				t.Errorf("the state file is visible through the mount: %v", err)
			}

			// Reads by a limited and an unlimited uid, spread over every
			// mirror (roundrobin).
			for _, id := range []int{1001, 0} {
				got, err := readWholeAs(id, filepath.Join(mnt, "seed0"), true)
				if err != nil || !bytes.Equal(got, seeds[0]) {
					t.Fatalf("uid %d read seed0: %d bytes, %v; want the mirrors' %d", id, len(got), err, len(seeds[0]))
				}
			}
			for i, m := range f.Mirrors().Stats() {
				if m.Reads == 0 || m.State != backing.Healthy {
					t.Errorf("mirror %d after reading: %+v; want reads, healthy", i, m)
				}
			}

			// A written file lands in every mirror, owned by the writer.
			data := bytes.Repeat([]byte("mirrored "), 100000)
			var werr error
			runAs(1001, func() { werr = os.WriteFile(filepath.Join(mnt, "pub", "w"), data, 0o644) })
			if werr != nil {
				t.Fatal(werr)
			}
			for _, d := range dirs {
				got, err := os.ReadFile(filepath.Join(d, "pub", "w"))
				var st syscall.Stat_t
				syscall.Stat(filepath.Join(d, "pub", "w"), &st)
				if err != nil || !bytes.Equal(got, data) || st.Uid != 1001 {
					t.Errorf("%s/pub/w: %d bytes (%v), uid %d; want %d bytes, uid 1001", d, len(got), err, st.Uid, len(data))
				}
			}

			// Every mirror but the last fails its reads: the application
			// sees none of it.
			for _, fl := range faults[:n-1] {
				fl.SetRead(0, syscall.EIO)
			}
			for _, id := range []int{1001, 0} {
				got, err := readWholeAs(id, filepath.Join(mnt, fmt.Sprintf("seed%d", 1+id%2)), true)
				if err != nil || !bytes.Equal(got, seeds[1+id%2]) {
					t.Errorf("uid %d read with failing mirrors: %d bytes, %v", id, len(got), err)
				}
			}
			for i, fl := range faults[:n-1] {
				fl.SetRead(0, nil)
				r, _ := fl.Failed()
				m := f.Mirrors().Stats()[i]
				if r == 0 || m.Errors < r || m.State != backing.Healthy {
					t.Errorf("mirror %d: %d injected read errors, stats %+v; want them counted, healthy", i, r, m)
				}
			}

			// The last mirror fails writes: the write succeeds on the
			// others, and that mirror turns stale and gets no more.
			faults[n-1].SetWrite(0, syscall.EIO)
			data2 := bytes.Repeat([]byte("after "), 50000)
			runAs(1001, func() { werr = os.WriteFile(filepath.Join(mnt, "pub", "after"), data2, 0o644) })
			if werr != nil {
				t.Fatalf("write with one mirror failing: %v", werr)
			}
			faults[n-1].SetWrite(0, nil)
			if s := stateOf(t, f); s[n-1] != backing.Stale {
				t.Fatalf("mirror states %v: the mirror failing writes is not stale", s)
			}
			runAs(1001, func() { werr = os.WriteFile(filepath.Join(mnt, "pub", "later"), data2, 0o644) })
			if werr != nil {
				t.Fatal(werr)
			}
			if _, err := os.Stat(filepath.Join(dirs[n-1], "pub", "later")); !os.IsNotExist(err) {
				t.Errorf("a stale mirror got a new file: %v", err)
			}
			before := f.Mirrors().Stats()[n-1].Reads
			for k := range 4 {
				got, err := readWholeAs(1001, filepath.Join(mnt, fmt.Sprintf("seed%d", k)), true)
				if err != nil || !bytes.Equal(got, seeds[k]) {
					t.Errorf("read after a mirror went stale: %v", err)
				}
			}
			if after := f.Mirrors().Stats()[n-1].Reads; after != before {
				t.Errorf("a stale mirror served %d reads", after-before)
			}

			// The last healthy mirror is never marked stale.
			if n == 2 {
				faults[0].SetWrite(0, syscall.ENOSPC)
				runAs(1001, func() { werr = os.WriteFile(filepath.Join(mnt, "pub", "none"), data2, 0o644) })
				faults[0].SetWrite(0, nil)
				if werr == nil {
					t.Error("a write failing on the last healthy mirror succeeded")
				}
				if s := stateOf(t, f); s[0] != backing.Healthy {
					t.Errorf("the last healthy mirror was marked stale: %v", s)
				}
			}

			// A restart keeps the stale mirror stale.
			unmount()
			opts.MirrorFaults = nil
			f2, unmount2 := serve(t, opts)
			defer unmount2()
			if s := stateOf(t, f2); s[n-1] != backing.Stale || s[0] != backing.Healthy {
				t.Errorf("after a restart mirror states are %v; want the last stale", s)
			}
			got, err := readWholeAs(1001, filepath.Join(mnt, "pub", "after"), true)
			if err != nil || !bytes.Equal(got, data2) {
				t.Errorf("after a restart: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestMirrorVerify: fio writes and verifies through a mirror set while one
// mirror starts failing writes half-way: no mismatch, no error, and the
// failing mirror ends stale.
func TestMirrorVerify(t *testing.T) {
	needFUSE(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: no fio")
	}
	dirs, mnt, _ := mirrorSet(t, 2)
	faults := []*backing.Faults{{}, {}}
	f, unmount := serve(t, mirrorOpts(dirs, mnt, "adaptive", faults))
	defer unmount()
	work := t.TempDir()
	os.Chmod(work, 0o777)
	cmd := exec.Command("fio", "--name=v", "--filename="+filepath.Join(mnt, "pub", "v"),
		"--size=32M", "--bsrange=4k-256k", "--rw=randwrite", "--verify=crc32c", "--verify_fatal=1",
		"--verify_state_save=0", "--output-format=terse", "--direct=1")
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once a few MiB are written, mirror 1 fails every write.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(filepath.Join(dirs[1], "pub", "v")); err == nil && st.Size() >= 4<<20 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	faults[1].SetWrite(0, syscall.EIO)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fio: %v\n%s", err, out.String())
	}
	if _, w := faults[1].Failed(); w == 0 {
		t.Fatal("fio finished before mirror 1 failed a write; the test did not test")
	}
	if s := stateOf(t, f); s[1] != backing.Stale || s[0] != backing.Healthy {
		t.Errorf("mirror states %v; want healthy, stale", s)
	}
}

// TestMirrorSlow: with the adaptive policy, random reads leave a mirror
// that turned 100× slower, and come back once it has recovered.
func TestMirrorSlow(t *testing.T) {
	needFUSE(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: no fio")
	}
	dirs, mnt, seeds := mirrorSet(t, 2)
	faults := []*backing.Faults{{}, {}}
	opts := mirrorOpts(dirs, mnt, "adaptive", faults)
	var logs syncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	f, unmount := serve(t, opts)
	defer unmount()
	share := func(d time.Duration) float64 {
		before := f.Mirrors().Stats()
		cmd := exec.Command("fio", "--name=r", "--filename="+filepath.Join(mnt, "seed3"), "--rw=randread",
			"--bs=4k", "--direct=1", "--numjobs=4", "--time_based", fmt.Sprintf("--runtime=%dms", d.Milliseconds()),
			"--output-format=terse")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fio: %v\n%s", err, out)
		}
		after := f.Mirrors().Stats()
		r0, r1 := after[0].Reads-before[0].Reads, after[1].Reads-before[1].Reads
		t.Logf("reads: mirror 0 %d, mirror 1 %d", r0, r1)
		return float64(r0) / float64(r0+r1)
	}
	faults[0].SetRead(20*time.Millisecond, nil)
	if s := share(2 * time.Second); s > 0.1 {
		t.Errorf("mirror 0, 20 ms slower per read, served %.2f of the reads; want ≤ 0.10", s)
	}
	faults[0].SetRead(0, nil)
	share(time.Second) // it is probed and found fast again
	if s := share(2 * time.Second); s < 0.3 || s > 0.7 {
		t.Errorf("after mirror 0 recovered it served %.2f of the reads; want 0.5 ± 0.2", s)
	}

	// Mirror 1, 5 ms slower per read, is left to mirror 0.
	faults[1].SetRead(5*time.Millisecond, nil)
	if s := share(500 * time.Millisecond); s < 0.9 {
		t.Errorf("mirror 1, 5 ms slower per read, left mirror 0 %.2f of the reads; want ≥ 0.90", s)
	}
	faults[1].SetRead(0, nil)

	// Mirror 0 hangs (each read would take a minute): reads sent to it
	// are hedged on mirror 1 and answered from there while the read of
	// mirror 0 is still stuck, so the caller never waits for it. The
	// policy starts afresh, knowing neither mirror, so that its first
	// read goes to mirror 0.
	faults[0].SetRead(time.Minute, nil)
	defer faults[0].SetRead(0, nil)
	if err := f.Mirrors().SetPolicy("adaptive"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for k := range 3 {
		got, err := readWholeAs(0, filepath.Join(mnt, fmt.Sprintf("seed%d", k)), true)
		if err != nil || !bytes.Equal(got, seeds[k]) {
			t.Fatalf("read with a hung mirror: %d bytes, %v", len(got), err)
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("reading 3 MiB with mirror 0 hung took %v", d)
	}
	st := f.Mirrors().Stats()[0]
	if st.Inflight == 0 {
		t.Errorf("no read is in flight on the hung mirror (%+v): the test did not hang it", st)
	}
	if st.Hedged == 0 {
		t.Errorf("no read of the hung mirror was hedged: %+v", st)
	}
	// root's reads go straight to the backing files, each answerable
	// early over /dev/fuse: those stuck were answered before they
	// returned. Over io_uring none is (see Options.Transport): their
	// callers waited for the rescue, within the bound above.
	if f.late.Load() == 0 && f.Transport() == TransportDev {
		t.Error("no read stuck on the hung mirror was answered early")
	}
	if n := f.late.Load(); n != 0 && f.Transport() == TransportURing {
		t.Errorf("%d reads answered early over io_uring, where a reply written to /dev/fuse is refused", n)
	}
	// Mirror 0 recovers: the stuck reads return, and the kernel refuses
	// their replies quietly.
	faults[0].SetRead(0, nil)
	for deadline := time.Now().Add(10 * time.Second); f.late.Load() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d replies to requests answered early were not refused by the kernel in 10 s", f.late.Load())
		}
	}
	if strings.Contains(logs.String(), "Write/Writev failed") {
		t.Errorf("the FUSE library's complaints about late replies were logged:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestMirrorResync: a mirror turned stale misses changes of every kind;
// resync, with a writer busy (writing, and making, renaming and removing
// files) and a file held open throughout, makes it
// equal again and returns it to service: later writes, through the file
// held open too, reach it, and a restart finds it healthy.
func TestMirrorResync(t *testing.T) {
	needFUSE(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d mirrors", n), func(t *testing.T) { mirrorResync(t, n) })
	}
}

// mirrorResync runs TestMirrorResync over n mirrors, mirror 1 the one that
// turns stale.
func mirrorResync(t *testing.T, n int) {
	dirs, mnt, _ := mirrorSet(t, n)
	faults := newFaults(n)
	opts := mirrorOpts(dirs, mnt, "adaptive", faults)
	f, unmount := serve(t, opts)
	defer unmount()
	pub := filepath.Join(mnt, "pub")
	as := func(what string, fn func() error) {
		t.Helper()
		var err error
		runAs(1001, func() { err = fn() })
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	faults[1].SetWrite(0, syscall.EIO)
	as("write a", func() error { return os.WriteFile(filepath.Join(pub, "a"), []byte("first"), 0o644) })
	faults[1].SetWrite(0, nil)
	if s := stateOf(t, f); s[1] != backing.Stale {
		t.Fatalf("states %v", s)
	}
	// Changes the stale mirror misses.
	as("mkdir", func() error { return os.Mkdir(filepath.Join(pub, "d"), 0o750) })
	as("write d/f", func() error {
		return os.WriteFile(filepath.Join(pub, "d", "f"), bytes.Repeat([]byte("f"), 3<<20), 0o600)
	})
	as("symlink", func() error { return os.Symlink("d/f", filepath.Join(pub, "l")) })
	as("link", func() error { return os.Link(filepath.Join(pub, "a"), filepath.Join(pub, "h")) })
	as("chmod", func() error { return os.Chmod(filepath.Join(pub, "a"), 0o640) })
	as("xattr", func() error { return unix.Setxattr(filepath.Join(pub, "a"), "user.tag", []byte("v1"), 0) })
	if err := os.Remove(filepath.Join(mnt, "seed3")); err != nil {
		t.Fatal(err)
	}
	var held *os.File
	as("open held", func() (err error) {
		held, err = os.OpenFile(filepath.Join(pub, "held"), os.O_CREATE|os.O_WRONLY, 0o644)
		return err
	})
	defer held.Close()
	if _, err := held.WriteAt([]byte("before "), 0); err != nil {
		t.Fatal(err)
	}

	// A writer busy while the resync runs.
	stop, done := make(chan struct{}), make(chan error)
	go func() {
		var err error
		runAs(1001, func() {
			var w *os.File
			if w, err = os.Create(filepath.Join(pub, "busy")); err != nil {
				return
			}
			defer w.Close()
			chunk := bytes.Repeat([]byte("b"), 64<<10)
			for off := int64(0); ; off = (off + int64(len(chunk))) % (16 << 20) {
				select {
				case <-stop:
					return
				default:
				}
				chunk[0]++
				if _, err = w.WriteAt(chunk, off); err != nil {
					return
				}
				// Names made, renamed and removed meanwhile too.
				if k := int(chunk[0]); k%16 == 0 {
					tmp := filepath.Join(pub, fmt.Sprint("churn-", k))
					if err = os.WriteFile(tmp, chunk[:k+1], 0o644); err != nil {
						return
					}
					if err = os.Rename(tmp, filepath.Join(pub, fmt.Sprint("churned-", k))); err != nil {
						return
					}
					os.Remove(filepath.Join(pub, fmt.Sprint("churned-", (k+256-32)%256)))
				}
			}
		})
		done <- err
	}()
	err := f.Mirrors().Resync(0)
	close(stop)
	if werr := <-done; werr != nil {
		t.Errorf("writer during the resync: %v", werr)
	}
	if err != nil {
		t.Fatalf("resync: %v", err)
	}
	if s := stateOf(t, f); slices.Contains(s, backing.Stale) {
		t.Fatalf("states after the resync: %v", s)
	}
	if st := f.Mirrors().Stats()[1]; st.Resynced < 3<<20 {
		t.Errorf("resync copied %d bytes; want at least the 3 MiB written while stale", st.Resynced)
	}
	// Later changes reach both, through the file held open as well.
	if _, err := held.WriteAt([]byte("after"), 7); err != nil {
		t.Fatal(err)
	}
	as("write after", func() error { return os.WriteFile(filepath.Join(pub, "d", "g"), []byte("g"), 0o644) })
	as("xattr after", func() error { return unix.Setxattr(filepath.Join(pub, "a"), "user.tag", []byte("v2"), 0) })
	for _, d := range dirs[1:] {
		treetest.Same(t, dirs[0], d, backing.StateFile)
	}
	var t0, t1 syscall.Stat_t
	syscall.Lstat(filepath.Join(dirs[0], "pub", "d", "f"), &t0)
	syscall.Lstat(filepath.Join(dirs[1], "pub", "d", "f"), &t1)
	if t0.Mtim != t1.Mtim || t0.Mtim.Sec == 0 {
		t.Errorf("a file written while the mirror was stale: mtime %v, resynced %v", t0.Mtim, t1.Mtim)
	}
	if b, _ := os.ReadFile(filepath.Join(dirs[1], "pub", "held")); string(b) != "before after" {
		t.Errorf("the file held open through the resync has %q in the resynced mirror", b)
	}

	held.Close()
	unmount()
	f2, unmount2 := serve(t, opts)
	defer unmount2()
	if s := stateOf(t, f2); slices.Contains(s, backing.Stale) {
		t.Errorf("after a restart: %v", s)
	}
}

// TestMirrorPID: under the pid policy, the device reads a limited reader
// causes through sluice's cache (its demand reads and its readahead) go to
// the mirror its process id picks, as btrfs routes a reading process; a
// process of the other parity reads from the other mirror.
func TestMirrorPID(t *testing.T) {
	needFUSE(t)
	dirs, mnt, _ := mirrorSet(t, 2)
	f, unmount := serve(t, mirrorOpts(dirs, mnt, "pid", nil))
	defer unmount()
	const files = 16
	data := bytes.Repeat([]byte("pid policy "), 100000)
	for i := range files { // one file per reader: none is in the cache yet
		if err := os.WriteFile(filepath.Join(mnt, "pub", fmt.Sprint("r", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for i := 0; i < files && len(seen) < 2; i++ {
		before := f.Mirrors().Stats()
		cmd := exec.Command("dd", "if="+filepath.Join(mnt, "pub", fmt.Sprint("r", i)), "of=/dev/null", "bs=64k")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dd as uid 1001: %v: %s", err, out)
		}
		after := f.Mirrors().Stats()
		want := cmd.Process.Pid % 2
		for m := range after {
			d := after[m].Reads - before[m].Reads
			if (m == want) != (d > 0) {
				t.Fatalf("reader pid %d: mirror %d got %d device reads; want them all on mirror %d",
					cmd.Process.Pid, m, d, want)
			}
		}
		seen[want] = true
	}
	if len(seen) < 2 {
		t.Fatalf("%d readers, all of one parity: the other mirror was never chosen", files)
	}
}
