package fsys

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/internal/treetest"
)

// tenant is the uid tenants' actions run as in the resync tests.
const tenant = 4101

// resyncPair makes two mirror directories for a resync test, each with a
// directory pub writable by all, and a mount point: mirror 0 a directory,
// mirror 1 a tmpfs of small bytes when small > 0 (a directory
// otherwise). Both are empty but for pub.
func resyncPair(t *testing.T, small int64) (dirs []string, mnt string) {
	t.Helper()
	dir, _, mnt := mountDirs(t)
	for i := range 2 {
		d := filepath.Join(dir, []string{"m0", "m1"}[i])
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if i == 1 && small > 0 {
			if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size="+strconv.FormatInt(small, 10)+",mode=0755"); err != nil {
				t.Skipf("skipping: mounting a tmpfs: %v", err)
			}
			t.Cleanup(func() { unix.Unmount(d, unix.MNT_DETACH) })
		}
		if err := os.Mkdir(filepath.Join(d, "pub"), 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(d, "pub"), 0o777)
		dirs = append(dirs, d)
	}
	return dirs, mnt
}

// randomBytes returns n bytes from a source seeded with seed.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	b := make([]byte, n+7)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// asTenant runs fn as the tenant uid and fails the test with its error.
func asTenant(t *testing.T, what string, fn func() error) {
	t.Helper()
	var err error
	runAs(tenant, func() { err = fn() })
	if err != nil {
		t.Fatalf("%s as uid %d: %v", what, tenant, err)
	}
}

// makeStale turns mirror 1 stale: a tenant's write that it fails.
func makeStale(t *testing.T, f *FS, mnt string, faults []*backing.Faults) {
	t.Helper()
	faults[1].SetWrite(0, syscall.EIO)
	asTenant(t, "write pub/a", func() error {
		return os.WriteFile(filepath.Join(mnt, "pub", "a"), []byte("written while mirror 1 fails"), 0o644)
	})
	faults[1].SetWrite(0, nil)
	if s := stateOf(t, f); s[1] != backing.Stale {
		t.Fatalf("mirror states %v: mirror 1 failed a write and is not stale", s)
	}
}

// TestResyncNoRoom: a resync onto a mirror without room for what it must
// copy fails and leaves the mirror stale, saying why, instead of returning
// it to service with zeros where the writes fell short; a mirror that
// lacks room only because of what the healthy mirror no longer holds gets
// that removed first, and is resynced byte for byte.
func TestResyncNoRoom(t *testing.T) {
	needFUSE(t)
	t.Run("too small", func(t *testing.T) {
		dirs, mnt := resyncPair(t, 7680<<10) // 7.5 MiB
		faults := newFaults(2)
		f, unmount := serve(t, mirrorOpts(dirs, mnt, "adaptive", faults))
		defer unmount()
		data := randomBytes(8<<20, 1)
		asTenant(t, "write pub/big", func() error { return os.WriteFile(filepath.Join(mnt, "pub", "big"), data, 0o644) })
		if s := stateOf(t, f); s[1] != backing.Stale {
			t.Fatalf("mirror states %v: the 7.5 MiB mirror took an 8 MiB file and is not stale", s)
		}
		err := f.Mirrors().Resync(0)
		if err == nil {
			var d int
			got, _ := os.ReadFile(filepath.Join(dirs[1], "pub", "big"))
			for d = 0; d < min(len(got), len(data)) && got[d] == data[d]; d++ {
			}
			t.Fatalf("resync onto a mirror without room succeeded: states %v, last resync %q; the copy differs from byte %d",
				stateOf(t, f), f.Mirrors().LastResync(), d)
		}
		t.Logf("resync: %v", err)
		if s := stateOf(t, f); s[1] != backing.Stale {
			t.Errorf("mirror states %v after a failed resync; want mirror 1 stale", s)
		}
		if last := f.Mirrors().LastResync(); last == "ok" || last == "" || !strings.Contains(last, "big") {
			t.Errorf("LastResync is %q; want the error, naming the file", last)
		}
		got, err := readWholeAs(tenant, filepath.Join(mnt, "pub", "big"), true)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("reading pub/big through the mount after the failed resync: %d bytes, %v; want the 8 MiB written", len(got), err)
		}
	})
	t.Run("room after removals", func(t *testing.T) {
		dirs, mnt := resyncPair(t, 7680<<10)
		// 5 MiB in both mirrors, in a directory that stays.
		old := randomBytes(5<<20, 2)
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(d, "keep"), 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Join(d, "keep"), 0o777)
			if err := os.WriteFile(filepath.Join(d, "keep", "old"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chown(filepath.Join(d, "keep", "old"), tenant, tenant)
		}
		faults := newFaults(2)
		f, unmount := serve(t, mirrorOpts(dirs, mnt, "adaptive", faults))
		defer unmount()
		makeStale(t, f, mnt, faults)
		// Missed by the stale mirror: the old file removed, 5 MiB written.
		asTenant(t, "remove keep/old", func() error { return os.Remove(filepath.Join(mnt, "keep", "old")) })
		data := randomBytes(5<<20, 3)
		asTenant(t, "write pub/new", func() error { return os.WriteFile(filepath.Join(mnt, "pub", "new"), data, 0o644) })
		if err := f.Mirrors().Resync(0); err != nil {
			t.Fatalf("resync onto a mirror with room once keep/old is removed: %v", err)
		}
		if s := stateOf(t, f); s[1] != backing.Healthy {
			t.Fatalf("mirror states %v after the resync", s)
		}
		got, err := os.ReadFile(filepath.Join(dirs[1], "pub", "new"))
		if err != nil || !bytes.Equal(got, data) {
			var d int
			for d = 0; d < min(len(got), len(data)) && got[d] == data[d]; d++ {
			}
			t.Errorf("pub/new in the resynced mirror: %d bytes (%v), differing from byte %d; want the %d written",
				len(got), err, d, len(data))
		}
		treetest.Same(t, dirs[0], dirs[1], backing.StateFile)
	})
}

// TestResyncFIFOSwap: a tenant swapping regular files and FIFOs (renameat2
// RENAME_EXCHANGE, in a loop, in a directory of its own in the healthy
// mirror) throughout resyncs cannot block them: each ends within seconds,
// leaving no goroutine behind, and the next is not told that one is
// running. A resync that opened a FIFO swapped in after its lstat
// blocked for good in one of a few resyncs.
func TestResyncFIFOSwap(t *testing.T) {
	needFUSE(t)
	dirs, mnt := resyncPair(t, 0)
	faults := newFaults(2)
	f, unmount := serve(t, mirrorOpts(dirs, mnt, "adaptive", faults))
	defer unmount()
	const pairs = 32
	asTenant(t, "mkdir pub/t", func() error { return os.Mkdir(filepath.Join(mnt, "pub", "t"), 0o755) })
	own := filepath.Join(dirs[0], "pub", "t") // the tenant's directory, in the healthy mirror
	asTenant(t, "make the files and FIFOs", func() error {
		for k := range pairs {
			if err := os.WriteFile(filepath.Join(own, fmt.Sprint("f", k)), bytes.Repeat([]byte("f"), 4096), 0o644); err != nil {
				return err
			}
			if err := unix.Mkfifo(filepath.Join(own, fmt.Sprint("p", k)), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	var stop atomic.Bool
	swapped := make(chan int)
	go runAs(tenant, func() {
		n := 0
		defer func() { swapped <- n }()
		d, err := unix.Open(own, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return
		}
		defer unix.Close(d)
		for k := 0; !stop.Load(); k = (k + 1) % pairs {
			if unix.Renameat2(d, fmt.Sprint("f", k), d, fmt.Sprint("p", k), unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	})
	stopped := false
	stopSwaps := func() int {
		if stopped {
			return 0
		}
		stopped = true
		stop.Store(true)
		return <-swapped
	}
	defer stopSwaps()
	// Releases a resync blocked opening one of the FIFOs, as a writer
	// opening it does.
	release := func() {
		for k := range pairs {
			for _, name := range []string{"f", "p"} {
				if fd, err := unix.Open(filepath.Join(own, fmt.Sprint(name, k)), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					unix.Close(fd)
				}
			}
		}
	}
	const rounds = 8
	var took []time.Duration
	for r := range rounds {
		makeStale(t, f, mnt, faults)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- f.Mirrors().Resync(0) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			states, next := stateOf(t, f), f.Mirrors().StartResync(0)
			stopSwaps()
			stacks := resyncStacks()
			release()
			t.Errorf("resync %d of %d still runs after 10 s of FIFO swaps: mirror states %v; a next resync: %v; its goroutines:\n%s",
				r+1, rounds, states, next, stacks)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
			return
		}
		took = append(took, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Errorf("resync %d with the tenant swapping: %v", r+1, err)
		} else if s := stateOf(t, f); s[1] != backing.Healthy {
			t.Errorf("mirror states %v after resync %d", s, r+1)
		}
		if s := resyncStacks(); s != "" {
			stopSwaps()
			release()
			t.Fatalf("goroutines of resync %d left after it ended:\n%s", r+1, s)
		}
		if err := f.Mirrors().StartResync(0); err != nil && strings.Contains(err.Error(), "already running") {
			t.Errorf("a resync after resync %d ended: %v", r+1, err)
		}
	}
	n := stopSwaps()
	t.Logf("%d resyncs took %v, with %d swaps meanwhile", rounds, took, n)
	if n == 0 {
		t.Fatal("the tenant swapped nothing: the test did not test")
	}
}

// resyncStacks returns the stacks of the goroutines running a resync's
// code, "" when none is.
func resyncStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "resync.(*Copier)") || strings.Contains(g, "backing.(*Mirror).resync") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestResyncCopyUnfrozen: while a resync copies what the set changed
// during its first pass, a tenant's lookup and open of another file
// through the mount complete, whether the copy runs with the set's changes
// let through (a large file, 64 MiB: then the tenant's write to another
// file completes too) or held off (what is left once little changed: then
// that write waits for the copy). The copy is held, by a fault injected
// into the resynced mirror's writes, until the tenant's lookup and open
// have returned or 5 s have passed.
func TestResyncCopyUnfrozen(t *testing.T) {
	needFUSE(t)
	t.Run("large file", func(t *testing.T) { resyncCopyUnfrozen(t, "big", false) })
	t.Run("last pass", func(t *testing.T) { resyncCopyUnfrozen(t, "small", true) })
}

// resyncCopyUnfrozen runs TestResyncCopyUnfrozen, the file the tenant
// writes during the first pass named name; last says its copy is the last
// pass's, which holds the set's changes off.
func resyncCopyUnfrozen(t *testing.T, name string, last bool) {
	dirs, mnt := resyncPair(t, 0)
	// The same in both mirrors, times included: the first pass copies
	// none of them, and none is looked up through the mount before the
	// copy is held.
	sizes := map[string]int{"big": 64 << 20, "small": 1 << 20, "u1": 4096, "u2": 4096}
	when := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for n, size := range sizes {
		b := randomBytes(size, uint64(len(n)))
		for _, d := range dirs {
			p := filepath.Join(d, "pub", n)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chown(p, tenant, tenant)
			os.Chtimes(p, when, when)
		}
	}
	faults := newFaults(2)
	f, unmount := serve(t, mirrorOpts(dirs, mnt, "adaptive", faults))
	defer unmount()
	makeStale(t, f, mnt, faults)
	m := f.Mirrors()

	// The first pass is held copying pub/a, which mirror 1 missed, while
	// the tenant writes to the file: its copy comes after the first pass.
	faults[1].SetWrite(time.Minute, nil)
	defer faults[1].SetWrite(0, nil)
	if err := m.StartResync(0); err != nil {
		t.Fatal(err)
	}
	copyHeld(t, m, 0)
	asTenant(t, "write pub/"+name, func() error {
		p := filepath.Join(mnt, "pub", name)
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := w.WriteAt([]byte("changed during the first pass"), 0); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		// Its time as the first pass would find it unchanged.
		return os.Chtimes(p, when, when)
	})
	// Lets pub/a through and holds the next write: the copy of the file.
	faults[1].SetWrite(time.Minute, nil)
	copyHeld(t, m, 1)

	// Runs fn as the tenant and sends its error, saying how long it took.
	timed := func(what string, fn func() error) <-chan error {
		done := make(chan error, 1)
		go func() {
			start := time.Now()
			var err error
			runAs(tenant, func() { err = fn() })
			if err == nil {
				err = fmt.Errorf("%s took %v", what, time.Since(start))
			} else {
				err = fmt.Errorf("%s: %w", what, err)
			}
			done <- err
		}()
		return done
	}
	ok := func(err error) bool { return err != nil && strings.Contains(err.Error(), " took ") }
	opened := timed("lookup and open of pub/u1", func() error {
		r, err := os.Open(filepath.Join(mnt, "pub", "u1"))
		if err == nil {
			err = r.Close()
		}
		return err
	})
	wrote := timed("write of pub/u2", func() error {
		return os.WriteFile(filepath.Join(mnt, "pub", "u2"), []byte("written while the copy is held"), 0o644)
	})
	timeout := time.After(5 * time.Second)
	select {
	case err := <-opened:
		if !ok(err) {
			t.Errorf("as uid %d while the copy of pub/%s is held: %v", tenant, name, err)
		}
		t.Logf("as uid %d while the copy of pub/%s is held: %v", tenant, name, err)
	case <-timeout:
		faults[1].SetWrite(0, nil)
		t.Fatalf("lookup and open of pub/u1 as uid %d had not completed 5 s into the held copy of pub/%s (once it went on: %v)",
			tenant, name, <-opened)
	}
	if last {
		select {
		case err := <-wrote:
			t.Errorf("as uid %d, while the last pass's copy of pub/%s is held: %v; want the write to wait for it", tenant, name, err)
			wrote = nil
		case <-time.After(100 * time.Millisecond):
		}
	} else {
		select {
		case err := <-wrote:
			if !ok(err) {
				t.Errorf("as uid %d while the copy of pub/%s is held: %v", tenant, name, err)
			}
			t.Logf("as uid %d while the copy of pub/%s is held: %v", tenant, name, err)
			wrote = nil
		case <-timeout:
			faults[1].SetWrite(0, nil)
			t.Fatalf("write of pub/u2 as uid %d had not completed 5 s into the held copy of pub/%s (once it went on: %v)",
				tenant, name, <-wrote)
		}
	}
	if !copyIsHeld() {
		t.Fatalf("the copy of pub/%s was no longer held: the test did not test", name)
	}
	faults[1].SetWrite(0, nil)
	if wrote != nil {
		if err := <-wrote; !ok(err) {
			t.Errorf("as uid %d once the copy went on: %v", tenant, err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); m.LastResync() == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the resync had not ended 30 s after the copy went on")
		}
	}
	if last := m.LastResync(); last != "ok" {
		t.Fatalf("resync: %s", last)
	}
	if s := stateOf(t, f); s[1] != backing.Healthy {
		t.Fatalf("mirror states %v after the resync", s)
	}
	treetest.Same(t, dirs[0], dirs[1], backing.StateFile)
}

// copyHeld waits until a resync's copy is held in an injected write fault
// once it has copied at least copied bytes.
func copyHeld(t *testing.T, m *backing.Mirror, copied int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if m.Stats()[1].Resynced >= copied && copyIsHeld() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no copy held after %d bytes copied (%d now); resync %q", copied, m.Stats()[1].Resynced, m.LastResync())
		}
	}
}

// copyIsHeld reports whether a resync's copy of a file waits in an
// injected fault.
func copyIsHeld() bool {
	for _, g := range strings.Split(resyncStacks(), "\n\n") {
		if strings.Contains(g, "backing.(*Faults).inject") && strings.Contains(g, "resync.(*Copier).file") {
			return true
		}
	}
	return false
}
