package fsys

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dirSnapshot describes dir and its entries (names, modes, owners, times)
// without following symbolic links.
func dirSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprintf("%s: mode=%o uid=%d mtime=%d.%09d ctime=%d.%09d nlink=%d\n", filepath.Base(dir),
		st.Mode, st.Uid, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Nlink)
	names := dirNames(t, dir)
	for _, n := range names {
		var es unix.Stat_t
		unix.Lstat(filepath.Join(dir, n), &es)
		s += fmt.Sprintf("  %s mode=%o uid=%d\n", n, es.Mode, es.Uid)
	}
	return s
}

// snapshotDiff lists the lines of after missing from before (+) and the
// reverse (-), at most 12 of each.
func snapshotDiff(before, after string) string {
	lines := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			m[l] = true
		}
		return m
	}
	b, a := lines(before), lines(after)
	var out []string
	for sign, pair := range map[string][2]map[string]bool{"+ ": {a, b}, "- ": {b, a}} {
		var ls []string
		for l := range pair[0] {
			if !pair[1][l] {
				ls = append(ls, sign+strings.TrimSpace(l))
			}
		}
		sort.Strings(ls)
		if len(ls) > 12 {
			ls = append(ls[:12], fmt.Sprintf("%s... and %d more", sign, len(ls)-12))
		}
		out = append(out, ls...)
	}
	return strings.Join(out, "\n")
}

// TestEscapeRenameRace: no rename race in SOURCE steers an operation made
// through the mount to a directory outside SOURCE.
func TestEscapeRenameRace(t *testing.T) {
	needFUSE(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	src, mnt, _ := mount(t, Options{AllowOther: true})
	u := filepath.Join(src, "u")
	for _, d := range []string{u, filepath.Join(u, "d")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 4101, 4101); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(u, "dsym")); err != nil {
		t.Fatal(err)
	}
	srcParent := filepath.Dir(src)
	beforeOutside := dirSnapshot(t, outside)
	beforeBase := dirSnapshot(t, base)
	beforeParent := dirSnapshot(t, srcParent)

	const (
		maxSwaps   = 200000
		maxOps     = 3000
		raceLength = 2 * time.Second
	)
	deadline := time.Now().Add(raceLength)
	// Until some operation through the mount has succeeded (on a busy
	// machine the kernel may find the link at every lookup for a while),
	// up to three times as long.
	longest := time.Now().Add(3 * raceLength)
	var ops, oks atomic.Int64
	var stop atomic.Bool
	var swaps int
	var swapErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		dfd, err := unix.Open(u, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			swapErr = err
			return
		}
		defer unix.Close(dfd)
		// d is a symbolic link for short windows only, so that the kernel
		// mostly finds a directory there and sends operations on to sluice,
		// which then races with the next window.
		var st unix.Stat_t
		for swaps < maxSwaps && (time.Now().Before(deadline) || oks.Load() == 0 && time.Now().Before(longest)) {
			for k := 0; k < 2; k++ {
				if err := unix.Renameat2(dfd, "d", dfd, "dsym", unix.RENAME_EXCHANGE); err != nil {
					swapErr = err
					return
				}
			}
			swaps++
			for k := 0; k < 8; k++ {
				unix.Fstatat(dfd, "d", &st, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
	}()
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runAsGroups(4101, 4101, nil, func() {
				d := filepath.Join(mnt, "u", "d")
				for i := 0; i < maxOps && !stop.Load(); i++ {
					f := filepath.Join(d, fmt.Sprintf("f%d-%d", w, i))
					results := []error{}
					fd, err := unix.Open(f, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
					if err == nil {
						unix.Close(fd)
					}
					results = append(results, err,
						unix.Truncate(f, 100),
						unix.Chmod(f, 0o666),
						unix.Mkdir(filepath.Join(d, fmt.Sprintf("dir%d-%d", w, i)), 0o755),
						unix.Symlink("target", filepath.Join(d, fmt.Sprintf("l%d-%d", w, i))),
						unix.Mknod(filepath.Join(d, fmt.Sprintf("p%d-%d", w, i)), unix.S_IFIFO|0o644, 0))
					for _, err := range results {
						ops.Add(1)
						if err == nil {
							oks.Add(1)
						}
					}
				}
			})
			if err != nil {
				t.Errorf("becoming uid 4101: %v", err)
			}
		}()
	}
	wg.Wait()
	if swapErr != nil {
		t.Fatalf("swapping u/d with a symlink in SOURCE: %v", swapErr)
	}
	t.Logf("%d symlink windows, %d operations through the mount (%d succeeded)", swaps, ops.Load(), oks.Load())
	if oks.Load() == 0 {
		t.Errorf("no operation through the mount succeeded: the race was not exercised")
	}
	if after := dirSnapshot(t, outside); after != beforeOutside {
		t.Errorf("the directory outside SOURCE changed during the race (a rename race steered the server outside SOURCE):\n%s", snapshotDiff(beforeOutside, after))
	}
	if after := dirSnapshot(t, base); after != beforeBase {
		t.Errorf("the parent of the outside directory changed:\n%s", snapshotDiff(beforeBase, after))
	}
	if after := dirSnapshot(t, srcParent); after != beforeParent {
		t.Errorf("the parent of SOURCE changed:\n%s", snapshotDiff(beforeParent, after))
	}
}
