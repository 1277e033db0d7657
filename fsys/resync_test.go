package fsys

import (
	"bytes"
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
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
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
		if strings.Contains(g, "backing.(*copier)") || strings.Contains(g, "backing.(*Mirror).resync") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
